//! Arrival counters a prepared call owns ([`super::dispatch::Prepared`]): the `i32` tensors a launch
//! both reads and writes that the caller does not name, the tile counters of a split-K GEMM whose last
//! block per tile reduces (`kittens_ir::Stmt::LastArrival`). Each must be zero when a launch starts
//! and every launch leaves it zero, so unlike other scratch it cannot be fresh memory per call: the
//! call keeps one zeroed allocation per stream (two streams running the call at once must not share
//! counters), made on the call's first launch on that stream and zeroed on it, before the launch.

use std::sync::Mutex;

use cudarc::driver::sys as cu;

use super::driver::check;
use super::CudaError;

/// Whether the tensor `name` of a call of `kernels` is an arrival counter: an `i32` global some launch
/// both reads and writes.
pub(crate) fn is_counter(kernels: &[&kittens_ir::Kernel], name: &str) -> bool {
    kernels.iter().any(|k| {
        k.globals.iter().any(|g| {
            g.name == name
                && g.dtype == kittens_hw::dtype::DType::I32
                && g.access == kittens_ir::Access::ReadWrite
        })
    })
}

/// The counters of one call: which of its tensors they are and their bytes, and the allocations.
pub(crate) struct OwnedCounters {
    ordinal: i32,
    /// (tensor index in the call's list, bytes).
    tensors: Vec<(usize, u64)>,
    /// Per stream: one device allocation per counter tensor, in `tensors`' order.
    per_stream: Mutex<Vec<(u64, Vec<u64>)>>,
}

impl OwnedCounters {
    pub(crate) fn new(ordinal: i32, tensors: Vec<(usize, u64)>) -> OwnedCounters {
        OwnedCounters {
            ordinal,
            tensors,
            per_stream: Mutex::new(Vec::new()),
        }
    }

    /// Whether tensor `i` is one of the counters (its address is the call's, not the caller's).
    pub(crate) fn owns(&self, i: usize) -> bool {
        self.tensors.iter().any(|&(t, _)| t == i)
    }

    /// Puts the counters' addresses for `stream` into `addrs` (allocating and zeroing them on
    /// `stream` the first time). The caller has the call's context current.
    pub(crate) fn place(&self, stream: u64, addrs: &mut [u64]) -> Result<(), CudaError> {
        if self.tensors.is_empty() {
            return Ok(());
        }
        let mut per = self.per_stream.lock().unwrap_or_else(|p| p.into_inner());
        if !per.iter().any(|(s, _)| *s == stream) {
            let mut ptrs = Vec::with_capacity(self.tensors.len());
            for &(_, bytes) in &self.tensors {
                let mut p = 0;
                let words = usize::try_from(bytes.div_ceil(4).max(1)).map_err(super::invalid)?;
                // SAFETY: out-parameter; freed in Drop.
                check(
                    unsafe { cu::cuMemAlloc_v2(&mut p, words * 4) },
                    "cuMemAlloc",
                )?;
                ptrs.push(p);
                // SAFETY: `p` holds `words` 32-bit words; ordered on `stream` before its launches.
                check(
                    unsafe { cu::cuMemsetD32Async(p, 0, words, stream as cu::CUstream) },
                    "cuMemsetD32Async",
                )?;
            }
            per.push((stream, ptrs));
        }
        let (_, ptrs) = per.iter().find(|(s, _)| *s == stream).expect("just made");
        for (&(i, _), &p) in self.tensors.iter().zip(ptrs) {
            if let Some(a) = addrs.get_mut(i) {
                *a = p;
            }
        }
        Ok(())
    }
}

impl Drop for OwnedCounters {
    fn drop(&mut self) {
        let per = self.per_stream.get_mut().unwrap_or_else(|p| p.into_inner());
        let all: Vec<u64> = per.drain(..).flat_map(|(_, ptrs)| ptrs).collect();
        if all.is_empty() {
            return;
        }
        // A failure (a context already gone at exit) leaks nothing the process still uses.
        let _ = super::caller::in_context(self.ordinal, || {
            for p in all {
                // SAFETY: allocated by cuMemAlloc in `place` and freed once.
                let _ = unsafe { cu::cuMemFree_v2(p) };
            }
            Ok(())
        });
    }
}
