//! The attention forward on caller-owned memory: the lowered `attn_fwd` (sm_90a, producer/consumer
//! schedule) on raw device pointers of q, k, v and o, enqueued on the caller's stream in the device's
//! primary context, through the machinery of [`super::caller`]. One kernel per configuration (head
//! dimension, mask, memory order) is compiled and loaded on first use per device; the shape (batch,
//! heads, sequence length) is a launch parameter, so every shape of a configuration shares it.
//!
//! The arguments are packed from the tile program ([`super::args`]) exactly as the benchmark
//! ([`super::attn`]) packs them over its own buffers, so BSHD and BHSD are the same code with other
//! strides.

use kittens_codegen::Lowered;
use kittens_kernels::attn_fwd::AttnLayout;
use kittens_kernels::reference::AttnShape;

use super::args::PackedArgs;
use super::attn::{check_shape, params};
use super::caller::{check_pointer, enqueue, in_context, kernel_on, KernelLoad};
use super::driver::encode_bf16;
use super::limits::check_tensor_map_nd;
use super::CudaError;

fn invalid(msg: impl Into<String>) -> CudaError {
    CudaError::Invalid(msg.into())
}

/// What selects one compiled attention kernel; everything else is a launch parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnKernelConfig {
    pub dim: usize,
    pub causal: bool,
    pub layout: AttnLayout,
}

impl AttnKernelConfig {
    /// The per-device cache key.
    fn key(&self) -> String {
        format!(
            "attn_fwd dim={} causal={} layout={:?}",
            self.dim, self.causal, self.layout
        )
    }
}

/// Where the kernel comes from: the caller builds `attn_fwd` for sm_90a at the configuration and
/// lowers it (the runtime names no kernel). Called once per device and configuration.
pub type LowerAttn = fn(&AttnKernelConfig) -> Result<Lowered, CudaError>;

/// bf16 attention operands at raw device addresses: `o = softmax(q·kᵀ/√d)·v`, q and o with
/// `shape.heads` heads, k and v with `shape.heads_kv`, all dense in `shape.layout`.
#[derive(Debug, Clone, Copy)]
pub struct AttnPointers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub shape: AttnShape,
    pub causal: bool,
}

impl AttnPointers {
    fn config(&self) -> AttnKernelConfig {
        AttnKernelConfig {
            dim: self.shape.dim,
            causal: self.causal,
            layout: self.shape.layout,
        }
    }

    /// Address and size in bytes of the tensor the tile program names `name`.
    fn tensor(&self, name: &str) -> Result<(u64, u64), CudaError> {
        let sh = &self.shape;
        let (ptr, heads) = match name {
            "q" => (self.q, sh.heads),
            "k" => (self.k, sh.heads_kv),
            "v" => (self.v, sh.heads_kv),
            "o" => (self.o, sh.heads),
            _ => {
                return Err(invalid(format!(
                    "the lowered attention takes an unknown tensor `{name}`"
                )))
            }
        };
        // `check_shape` bounds every tensor below 2^31 elements, so this cannot overflow.
        Ok((ptr, sh.len(heads) as u64 * 2))
    }

    /// What can be checked without a driver: shapes the Hopper program takes and TMA's 16-byte
    /// aligned base addresses (CUDA driver API `cuTensorMapEncodeTiled`; rows of 64 or 128 bf16 are
    /// 16-byte multiples by construction).
    pub fn check(&self) -> Result<(), CudaError> {
        check_shape(&self.shape)?;
        for name in ["q", "k", "v", "o"] {
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
/// device `ordinal`, in its primary context. Returns the kernel load when this call loaded the
/// configuration's kernel on the device, else `None`. Errors name the problem: a head dimension other
/// than 64 or 128, misaligned addresses, no driver, not a Hopper GPU, pointers that are not device
/// memory of that device or too small.
///
/// # Safety
/// The four ranges must stay allocated until the launch has run on `stream`, o must not overlap q, k
/// or v, and `stream` must be a live stream of that context (or 0).
pub unsafe fn attention_fwd(
    ordinal: i32,
    stream: u64,
    p: &AttnPointers,
    lower: LowerAttn,
) -> Result<Option<KernelLoad>, CudaError> {
    p.check()?;
    let cfg = p.config();
    in_context(ordinal, || {
        for name in ["q", "k", "v", "o"] {
            let (ptr, bytes) = p.tensor(name)?;
            check_pointer(name, ptr, bytes, ordinal)?;
        }
        let (kernel, fresh) = kernel_on(ordinal, &cfg.key(), &|| lower(&cfg))?;
        let l = &kernel.lowered;
        let values = params(&p.shape);
        let mut args = PackedArgs::pack(
            l,
            &values,
            |g| {
                let (ptr, bytes) = p.tensor(&g.tensor)?;
                let bytes = usize::try_from(bytes).map_err(|_| invalid("tensor size"))?;
                check_tensor_map_nd(&g.dims, &g.strides, &g.boxes, bytes)?;
                encode_bf16(ptr, &g.dims, &g.strides, &g.boxes, g.swizzle)
            },
            |name| Ok(p.tensor(name)?.0),
        )?;
        let mut pointers = args.pointers();
        let grid = l
            .blocks(&values, kernel.multiprocessors)
            .ok_or_else(|| invalid("grid extents of the lowered attention"))?;
        // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`), alive
        // until the call returns; the maps were checked against the allocations the driver reports;
        // the caller keeps the memory and the stream alive.
        unsafe { enqueue(&kernel, grid, &mut pointers, stream)? };
        Ok(fresh.then(|| kernel.load.clone()))
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
            shape: AttnShape {
                batch: 2,
                heads,
                heads_kv,
                seq,
                dim,
                layout: AttnLayout::Bshd,
            },
            causal: false,
        }
    }

    fn launch(p: &AttnPointers) -> Result<Option<KernelLoad>, CudaError> {
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
        let keys = [a, b, c, d];
        for i in 0..keys.len() {
            for j in 0..i {
                assert_ne!(keys[i], keys[j]);
            }
        }
    }
}
