//! A prepared call on buffers of its own: what `kittens bench` checks and times, for any kernel.
//!
//! The benchmarks run exactly what a caller of the package runs — a registry entry's launches at a
//! problem ([`super::dispatch::registry_stages`]) prepared once ([`Prepared`]) — on device buffers
//! this module allocates, one per tensor the launches declare (inputs, outputs, scratch), each as large
//! as its declared layout spans. Outputs start as NaN, so an element no launch writes fails any check.
//! Nothing here names a kernel: tensors are reached by the names the tile programs give them.

use std::rc::Rc;

use kittens_hw::dtype::DType;
use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};

use super::bench_time::{time_launches, Launch, Timing};
use super::caller::KernelLoad;
use super::dispatch::{Prepared, StageSpec};
use super::driver::{Device, DeviceBuffer, Stream};
use super::{invalid, CudaError};

/// A prepared call and one device buffer per tensor it declares.
pub struct DeviceCall {
    prepared: Prepared,
    bufs: Vec<DeviceBuffer>,
    ptrs: Vec<u64>,
}

impl DeviceCall {
    /// Prepares `stages` on `dev` and allocates every tensor they declare, poisoned with NaN (the
    /// all-ones bit pattern is NaN in bf16, f32 and the fp8 formats alike).
    pub fn new(dev: &Rc<Device>, stages: &[StageSpec]) -> Result<DeviceCall, CudaError> {
        let ordinal = i32::try_from(dev.ordinal).map_err(invalid)?;
        let prepared = Prepared::new(ordinal, stages, Vec::new(), &[]).map_err(invalid)?;
        let mut bufs = Vec::with_capacity(prepared.spans().len());
        for (t, &span) in prepared.tensors().iter().zip(prepared.spans()) {
            let bytes = usize::try_from(span)
                .map_err(|_| invalid(format!("tensor `{}`: {span} bytes", t.name)))?;
            // Even and non-empty, for the 16-bit fill.
            let mut b = dev.alloc(bytes.max(2).next_multiple_of(2))?;
            b.fill_u16(0xffff)?;
            bufs.push(b);
        }
        let ptrs = bufs.iter().map(DeviceBuffer::ptr).collect();
        Ok(DeviceCall {
            prepared,
            bufs,
            ptrs,
        })
    }

    fn index(&self, name: &str) -> Result<usize, CudaError> {
        self.prepared
            .tensors()
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| {
                let names: Vec<_> = self.prepared.tensors().iter().map(|t| &t.name).collect();
                invalid(format!(
                    "no launch of this call declares a tensor `{name}`; its tensors: {names:?}"
                ))
            })
    }

    /// The declared element type of tensor `name`.
    pub fn dtype(&self, name: &str) -> Result<DType, CudaError> {
        Ok(self.prepared.tensors()[self.index(name)?].dtype)
    }

    /// Writes `values` (rounded to the tensor's dtype, to nearest even) into tensor `name`, which
    /// must span exactly that many elements.
    pub fn upload(&mut self, name: &str, values: &[f32]) -> Result<(), CudaError> {
        let i = self.index(name)?;
        let bytes = to_bytes(values, self.prepared.tensors()[i].dtype, Rounding::Rtne);
        self.upload_bytes(name, &bytes)
    }

    /// Writes raw element bytes into tensor `name`, which must span exactly `bytes.len()`.
    pub fn upload_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<(), CudaError> {
        let i = self.index(name)?;
        let span = self.prepared.spans()[i];
        if bytes.len() as u64 != span {
            return Err(invalid(format!(
                "tensor `{name}` spans {span} bytes; {} given",
                bytes.len()
            )));
        }
        self.bufs[i].upload_prefix(bytes)
    }

    /// Tensor `name`'s elements as f32 (after [`DeviceCall::launch`] and a synchronisation).
    pub fn download(&self, name: &str) -> Result<Vec<f32>, CudaError> {
        let i = self.index(name)?;
        let len = usize::try_from(self.prepared.spans()[i]).map_err(invalid)?;
        let host = self.bufs[i].download_prefix(len)?;
        from_bytes(&host, self.prepared.tensors()[i].dtype).map_err(invalid)
    }

    /// Enqueues the call's launches on `stream`.
    pub fn launch(&self, stream: &Stream) -> Result<(), CudaError> {
        // SAFETY: every tensor has a live buffer of this device at least as large as its declared
        // span (allocated in `new`, kept as long as `self`); the launches' tensors are distinct
        // buffers, so no output overlaps an input.
        unsafe {
            self.prepared
                .launch(&self.ptrs, stream.raw() as u64, &[])
                .map_err(invalid)
        }
    }

    /// [`DeviceCall::launch`] with some tensors at other addresses (`(name, address)`: another copy
    /// of an input, for timing past the L2); the rest in the call's own buffers.
    ///
    /// # Safety
    /// Each address given must be live device memory of the call's device holding at least the
    /// tensor's declared span, kept until the stream has run the launches, overlapping no other
    /// tensor of the call.
    pub unsafe fn launch_with(&self, stream: &Stream, at: &[(&str, u64)]) -> Result<(), CudaError> {
        let mut ptrs = self.ptrs.clone();
        for &(name, ptr) in at {
            ptrs[self.index(name)?] = ptr;
        }
        // SAFETY: the caller's addresses as documented above; the rest as in `launch`.
        unsafe {
            self.prepared
                .launch(&ptrs, stream.raw() as u64, &[])
                .map_err(invalid)
        }
    }

    /// Median milliseconds of the whole call (all its launches), timed by CUDA events after
    /// `warmup` calls, with `others` (baselines) interleaved call by call; ours first in the result.
    pub fn time_with(
        &self,
        stream: &Stream,
        warmup: usize,
        iters: usize,
        others: Vec<Launch<'_>>,
    ) -> Result<Vec<f64>, CudaError> {
        let mut ours = |_: usize| self.launch(stream);
        let mut fs: Vec<Launch<'_>> = Vec::with_capacity(others.len() + 1);
        fs.push(&mut ours);
        for f in others {
            fs.push(f);
        }
        time_launches(stream, warmup, iters.max(1), Timing::Interleaved, &mut fs)
    }

    /// Bytes of all the call's tensors together.
    pub fn bytes(&self) -> usize {
        self.bufs.iter().map(DeviceBuffer::bytes).sum()
    }

    /// Each launch's grid (blocks) and threads per block.
    pub fn geometry(&self) -> Vec<(u32, u32)> {
        self.prepared.geometry()
    }

    /// The call's kernels as loaded, launch by launch (names, registers, spills).
    pub fn kernels(&self) -> Vec<&KernelLoad> {
        self.prepared.kernels()
    }
}
