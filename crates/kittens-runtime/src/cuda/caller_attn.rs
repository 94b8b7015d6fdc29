//! The attention forward on caller-owned memory: the lowered `attn_fwd` (sm_90a, producer/consumer
//! schedule) on raw device pointers of q, k, v and o (and the log-sum-exp when asked), enqueued on the
//! caller's stream in the device's primary context, through the machinery of [`super::caller`]. One
//! kernel per configuration (head dimension, mask and its alignment, memory order, log-sum-exp or
//! not) is compiled and loaded on first use per device; the shape (batch, heads, query and key
//! lengths) is a launch parameter, so every shape of a configuration shares it.
//!
//! The arguments are packed from the tile program ([`super::attn_split::pack`]) exactly as the
//! benchmark ([`super::attn`]) packs them over its own buffers, so BSHD and BHSD are the same code
//! with other strides.
//!
//! Few query rows against many keys (decoding) take the key split when the tail planner says it
//! pays ([`super::attn_split::auto_splits`] for the device's SM count, or the count the caller
//! gives): the split kernel, then the merge, on the same stream, their f32 partials in
//! stream-ordered scratch (`cuMemAllocAsync`, freed by `cuMemFreeAsync` after the merge), which a
//! CUDA graph capture records as memory nodes.

use kittens_codegen::Lowered;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
use kittens_kernels::reference::AttnShape;

use cudarc::driver::sys as cu;

use super::attn::{check_shape_kv, params_kv};
use super::attn_split::{auto_splits, pack, workspace};
use super::caller::{check_pointer, enqueue, in_context, kernel_on, multiprocessors, KernelLoad};
use super::driver::check as driver_check;
use super::{invalid, CudaError};

/// What selects one compiled attention kernel; everything else is a launch parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnKernelConfig {
    pub dim: usize,
    pub causal: bool,
    /// With `causal`: the mask aligned bottom-right (`AttnConfig::bottom_right`).
    pub bottom_right: bool,
    pub layout: AttnLayout,
    /// The kernel also writes the log-sum-exp (`AttnConfig::lse`).
    pub lse: bool,
    /// Key parts (`AttnConfig::kv_splits`): 1 is the plain kernel; more, the split kernel writing
    /// partials, or with `merge` the merge of that many partials.
    pub kv_splits: u32,
    /// The merge launch of a split run (`kittens_kernels::attn_fwd::split::build_merge`).
    pub merge: bool,
}

impl AttnKernelConfig {
    /// The per-device cache key.
    fn key(&self) -> String {
        let split = match (self.kv_splits, self.merge) {
            (0 | 1, _) => String::new(),
            (g, false) => format!(" split={g}"),
            (g, true) => format!(" merge={g}"),
        };
        format!(
            "attn_fwd dim={} causal={} bottom_right={} layout={:?} lse={}{split}",
            self.dim,
            self.causal,
            self.causal && self.bottom_right,
            self.layout,
            self.lse
        )
    }
}

/// Where the kernel comes from: the caller builds `attn_fwd` for sm_90a at the configuration and
/// lowers it (the runtime names no kernel). Called once per device and configuration.
pub type LowerAttn = fn(&AttnKernelConfig) -> Result<Lowered, CudaError>;

/// bf16 attention operands at raw device addresses: `o = softmax(q·kᵀ/√d)·v`, q and o with
/// `shape.heads` heads of `shape.seq` rows, k and v with `shape.heads_kv` heads of `seq_kv` rows, all
/// dense in `shape.layout`; `lse`, when given, f32 `[batch, heads, seq]` contiguous.
#[derive(Debug, Clone, Copy)]
pub struct AttnPointers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: Option<u64>,
    pub shape: AttnShape,
    pub seq_kv: usize,
    pub causal: bool,
    pub bottom_right: bool,
    /// The key split: `auto` (the planner's choice for the device) or a fixed count.
    pub kv_splits: KvSplits,
}

impl AttnPointers {
    fn config(&self) -> AttnKernelConfig {
        AttnKernelConfig {
            dim: self.shape.dim,
            causal: self.causal,
            bottom_right: self.causal && self.bottom_right,
            layout: self.shape.layout,
            lse: self.lse.is_some(),
            kv_splits: 1,
            merge: false,
        }
    }

    /// The tensors the caller hands over.
    fn names(&self) -> &'static [&'static str] {
        if self.lse.is_some() {
            &["q", "k", "v", "o", "lse"]
        } else {
            &["q", "k", "v", "o"]
        }
    }

    /// The parts the keys are cut into on a device of `sms` SMs.
    fn splits(&self, sms: u32) -> Result<u32, CudaError> {
        let gpu = kittens_hw::Target::Sm90a
            .gpu()
            .ok_or_else(|| invalid("no sm_90a GPU in the catalog"))?;
        let cfg = AttnConfig {
            dim: u32::try_from(self.shape.dim).unwrap_or(u32::MAX),
            ..AttnConfig::for_gpu(gpu)
        };
        auto_splits(self.kv_splits, sms, &cfg, &self.shape, self.seq_kv)
    }

    /// Address and size in bytes of the tensor the tile program names `name`.
    fn tensor(&self, name: &str) -> Result<(u64, u64), CudaError> {
        let sh = &self.shape;
        let kv = AttnShape {
            seq: self.seq_kv,
            ..*sh
        };
        // `check_shape_kv` bounds every tensor below 2^31 elements, so none of these overflow.
        let (ptr, bytes) = match (name, self.lse) {
            ("q", _) => (self.q, sh.len(sh.heads) * 2),
            ("k", _) => (self.k, kv.len(sh.heads_kv) * 2),
            ("v", _) => (self.v, kv.len(sh.heads_kv) * 2),
            ("o", _) => (self.o, sh.len(sh.heads) * 2),
            ("lse", Some(p)) => (p, sh.batch * sh.heads * sh.seq * 4),
            _ => {
                return Err(invalid(format!(
                    "the lowered attention takes an unknown tensor `{name}`"
                )))
            }
        };
        Ok((ptr, bytes as u64))
    }

    /// What can be checked without a driver: shapes the Hopper program takes and TMA's 16-byte
    /// aligned base addresses (CUDA driver API `cuTensorMapEncodeTiled`; rows of 64 or 128 bf16 are
    /// 16-byte multiples by construction).
    pub fn check(&self) -> Result<(), CudaError> {
        check_shape_kv(&self.shape, self.seq_kv)?;
        if let Some(p) = self.lse {
            if !p.is_multiple_of(4) {
                return Err(invalid(format!(
                    "lse at {p:#x} is not 4-byte aligned (f32)"
                )));
            }
        }
        for &name in ["q", "k", "v", "o"].iter() {
            let (ptr, _) = self.tensor(name)?;
            if !ptr.is_multiple_of(16) {
                return Err(invalid(format!(
                    "{name} at {ptr:#x} is not 16-byte aligned (TMA reads it in place)"
                )));
            }
        }
        Ok(())
    }
}

/// Enqueues the attention forward on `stream` (a `CUstream` handle; 0 is the legacy default stream) of
/// device `ordinal`, in its primary context: one launch, or with a key split the split kernel and its
/// merge. Returns the kernel loads this call made (the first use of a configuration on the device).
/// Errors name the problem: a head dimension other than 64 or 128, misaligned addresses, no driver,
/// not a Hopper GPU, pointers that are not device memory of that device or too small.
///
/// # Safety
/// The four ranges must stay allocated until the launch has run on `stream`, o must not overlap q, k
/// or v, and `stream` must be a live stream of that context (or 0).
pub unsafe fn attention_fwd(
    ordinal: i32,
    stream: u64,
    p: &AttnPointers,
    lower: LowerAttn,
) -> Result<Vec<KernelLoad>, CudaError> {
    p.check()?;
    in_context(ordinal, || {
        for &name in p.names() {
            let (ptr, bytes) = p.tensor(name)?;
            check_pointer(name, ptr, bytes, ordinal)?;
        }
        let g = p.splits(multiprocessors(ordinal)?)?;
        let work = workspace(g, &p.shape)?;
        let raw = stream as cu::CUstream;
        // The partials in stream order: allocated here, freed after the merge.
        let mut scratch: Vec<(&str, u64, u64)> = Vec::new();
        let run = (|| {
            for &(name, bytes) in &work {
                let mut ptr = 0;
                let size = usize::try_from(bytes).map_err(|_| invalid("workspace size"))?;
                // SAFETY: out-parameter; a stream of the current context.
                driver_check(
                    unsafe { cu::cuMemAllocAsync(&mut ptr, size, raw) },
                    "cuMemAllocAsync",
                )?;
                scratch.push((name, ptr, bytes));
            }
            let tensor = |name: &str| match scratch.iter().find(|w| w.0 == name) {
                Some(&(_, ptr, bytes)) => Ok((ptr, bytes)),
                None => p.tensor(name),
            };
            let values = params_kv(&p.shape, p.seq_kv);
            let mut loads = Vec::new();
            for merge in if g > 1 {
                &[false, true][..]
            } else {
                &[false][..]
            } {
                let cfg = AttnKernelConfig {
                    kv_splits: g,
                    merge: *merge,
                    ..p.config()
                };
                let (kernel, fresh) = kernel_on(ordinal, &cfg.key(), &|| lower(&cfg))?;
                let (mut args, grid) = pack(&kernel.lowered, &values, &tensor, kernel.resident)?;
                let mut pointers = args.pointers();
                // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`),
                // alive until the call returns; the maps were checked against the allocations the
                // driver reports; the caller keeps the memory and the stream alive, the scratch
                // lives until its stream-ordered free.
                unsafe { enqueue(&kernel, grid, &mut pointers, stream)? };
                if fresh {
                    loads.push(kernel.load.clone());
                }
            }
            Ok::<_, CudaError>(loads)
        })();
        for (_, ptr, _) in scratch {
            // SAFETY: freed after everything enqueued on the stream before it.
            driver_check(unsafe { cu::cuMemFreeAsync(ptr, raw) }, "cuMemFreeAsync")?;
        }
        run
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointers(dim: usize, seq: usize, heads: usize, heads_kv: usize) -> AttnPointers {
        AttnPointers {
            q: 0x1000,
            k: 0x2000,
            v: 0x3000,
            o: 0x4000,
            lse: None,
            shape: AttnShape {
                batch: 2,
                heads,
                heads_kv,
                seq,
                dim,
                layout: AttnLayout::Bshd,
            },
            seq_kv: seq,
            causal: false,
            bottom_right: false,
            kv_splits: KvSplits::Auto,
        }
    }

    fn launch(p: &AttnPointers) -> Result<Vec<KernelLoad>, CudaError> {
        let lower: LowerAttn = |_| Err(invalid("not lowered in this test"));
        // SAFETY: the addresses are never dereferenced on the host; the checks refuse them.
        unsafe { attention_fwd(0, 0, p, lower) }
    }

    #[test]
    fn refuses_head_dims_the_hopper_program_lacks() {
        for d in [32, 96, 256] {
            let e = launch(&pointers(d, 77, 4, 2)).unwrap_err().to_string();
            assert!(e.contains(&format!("head dimension {d}")), "{e}");
            assert!(e.contains("64 or 128"), "{e}");
        }
    }

    #[test]
    fn refuses_empty_oversized_and_ungrouped_shapes() {
        let e = launch(&pointers(64, 0, 4, 2)).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = launch(&pointers(128, 1 << 20, 64, 8))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2^31"), "{e}");
        let e = launch(&pointers(64, 77, 6, 4)).unwrap_err().to_string();
        assert!(e.contains("must divide"), "{e}");
    }

    #[test]
    fn refuses_bad_key_lengths_and_a_misaligned_lse() {
        let mut p = pointers(64, 77, 4, 2);
        p.seq_kv = 0;
        let e = launch(&p).unwrap_err().to_string();
        assert!(e.contains("no keys"), "{e}");
        p.seq_kv = 1 << 24;
        let e = launch(&p).unwrap_err().to_string();
        assert!(e.contains("keys") && e.contains("2^31"), "{e}");
        p.seq_kv = 1;
        p.lse = Some(0x5002);
        let e = launch(&p).unwrap_err().to_string();
        assert!(e.contains("lse at") && e.contains("4-byte aligned"), "{e}");
    }

    #[test]
    fn refuses_misaligned_addresses() {
        let mut p = pointers(128, 1063, 8, 8);
        p.v += 8;
        let e = launch(&p).unwrap_err().to_string();
        assert!(e.contains("v at") && e.contains("16-byte aligned"), "{e}");
    }

    /// Shapes the kernel takes get as far as the driver: with host addresses that is an error on any
    /// machine (no driver, no device, or "not CUDA device memory"), never a crash.
    #[test]
    fn host_pointers_are_an_error_not_a_crash() {
        for (d, layout) in [(64, AttnLayout::Bshd), (128, AttnLayout::Bhsd)] {
            let mut p = pointers(d, 1063, 8, 2);
            p.shape.layout = layout;
            let e = launch(&p).unwrap_err();
            assert!(
                matches!(
                    e,
                    CudaError::NoDriver(_) | CudaError::NoDevice(_) | CudaError::Invalid(_)
                ),
                "{e}"
            );
            if let CudaError::Invalid(m) = &e {
                assert!(m.contains("not CUDA device memory"), "{m}");
            }
        }
    }

    #[test]
    fn one_kernel_per_configuration() {
        let mut p = pointers(64, 77, 4, 2);
        let a = p.config().key();
        p.shape.seq = 1063;
        p.shape.batch = 3;
        assert_eq!(a, p.config().key(), "the shape is a launch parameter");
        p.causal = true;
        let b = p.config().key();
        p.shape.layout = AttnLayout::Bhsd;
        let c = p.config().key();
        p.shape.dim = 128;
        let d = p.config().key();
        p.bottom_right = true;
        let e = p.config().key();
        p.lse = Some(0x5000);
        let f = p.config().key();
        p.seq_kv = 1;
        assert_eq!(f, p.config().key(), "the key length is a launch parameter");
        let mut cfg = p.config();
        cfg.kv_splits = 4;
        let g = cfg.key();
        cfg.merge = true;
        let h = cfg.key();
        cfg.kv_splits = 2;
        let i = cfg.key();
        let keys = [a, b, c, d, e, f, g, h, i];
        for i in 0..keys.len() {
            for j in 0..i {
                assert_ne!(keys[i], keys[j]);
            }
        }
    }
}
