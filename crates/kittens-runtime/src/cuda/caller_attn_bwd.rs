//! The attention backward on caller-owned memory: the lowered sm_90a launches of `attn_bwd`
//! (`kittens_kernels::attn_bwd`'s Hopper programs) on raw device pointers, enqueued in order on the
//! caller's stream in the device's primary context, through the machinery of [`super::caller`] and
//! with the arguments packed from the tile programs as the forward's ([`super::caller_attn`]). One
//! kernel per launch and configuration (head dimension, mask, memory order); the shape is a launch
//! parameter. Two forms ([`AttnBwdForm`]):
//!
//! - two launches (the default): the query blocks, which compute dQ and write `D = rowsum(dO∘O)`,
//!   then the key blocks, which read D and compute dK and dV;
//! - FlashAttention-3's three (§3.3): a strip pass writing D and zeroing an f32 dQ accumulator of
//!   Q's shape, the key blocks adding `dS·K` into it with atomic adds beside dK and dV, a strip pass
//!   rounding it to bf16 dQ. The accumulator is stream-ordered scratch (`cuMemAllocAsync`, freed by
//!   `cuMemFreeAsync` after the last launch), as the forward's split partials.

use kittens_codegen::Lowered;
use kittens_kernels::attn_bwd::{BwdSchedule, BwdShape, Causal};
use kittens_kernels::attn_fwd::AttnLayout;

use cudarc::driver::sys as cu;

use super::attn_split::pack;
use super::caller::{check_pointer, enqueue, in_context, kernel_on, KernelLoad};
use super::driver::check as driver_check;
use super::{invalid, CudaError};

/// Which launches compute the backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttnBwdForm {
    /// The query blocks (dQ and D), then the key blocks (dK, dV): deterministic, no workspace.
    #[default]
    TwoLaunch,
    /// FlashAttention-3's: D and the zeroed f32 accumulator, the key blocks adding dQ into it with
    /// f32 atomics, the conversion to bf16 (five products per block pair instead of seven; the dQ
    /// sum's order varies from run to run).
    AtomicDq,
}

impl AttnBwdForm {
    /// The Hopper programs of this form, in stream order.
    pub fn launches(self) -> &'static [BwdSchedule] {
        let first = match self {
            AttnBwdForm::TwoLaunch => BwdSchedule::HopperKv,
            AttnBwdForm::AtomicDq => BwdSchedule::HopperAtomicKv,
        };
        first.hopper_launches().unwrap_or(&[])
    }
}

/// What selects one compiled kernel of the backward; everything else is a launch parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnBwdKernelConfig {
    pub dim: usize,
    pub causal: Causal,
    pub layout: AttnLayout,
    /// Which of the Hopper programs (one of an [`AttnBwdForm`]'s launches).
    pub schedule: BwdSchedule,
}

impl AttnBwdKernelConfig {
    fn key(&self) -> String {
        // The strip passes know no mask: one kernel serves every mask.
        let causal = match self.schedule {
            BwdSchedule::HopperAtomicPre | BwdSchedule::HopperAtomicDq => Causal::No,
            _ => self.causal,
        };
        format!(
            "attn_bwd dim={} causal={causal:?} layout={:?} schedule={:?}",
            self.dim, self.layout, self.schedule
        )
    }
}

/// Where the kernels come from: the caller builds and lowers them (the runtime names no kernel).
pub type LowerAttnBwd = fn(&AttnBwdKernelConfig) -> Result<Lowered, CudaError>;

/// The backward's operands at raw device addresses: bf16 q, o, do, dq with `shape.heads` heads and k,
/// v, dk, dv with `shape.heads_kv`, dense in `shape.layout`; f32 `lse` (read) and `delta` (scratch
/// the first launch writes, `rowsum(dO∘O)`) `[batch, heads, seq_q]`, contiguous. `form` picks the
/// launches; the atomic form's f32 dQ accumulator is the runtime's scratch, not an operand.
#[derive(Debug, Clone, Copy)]
pub struct AttnBwdPointers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub d_o: u64,
    pub lse: u64,
    pub delta: u64,
    pub dq: u64,
    pub dk: u64,
    pub dv: u64,
    pub shape: BwdShape,
    pub causal: Causal,
    pub form: AttnBwdForm,
}

impl AttnBwdPointers {
    /// Address and size in bytes of the tensor the tile programs name `name`.
    fn tensor(&self, name: &str) -> Result<(u64, u64), CudaError> {
        let sh = &self.shape;
        let (q, kv, stats) = (
            sh.q_len() as u64 * 2,
            sh.kv_len() as u64 * 2,
            sh.lse_len() as u64 * 4,
        );
        Ok(match name {
            "q" => (self.q, q),
            "o" => (self.o, q),
            "do" => (self.d_o, q),
            "dq" => (self.dq, q),
            "k" => (self.k, kv),
            "v" => (self.v, kv),
            "dk" => (self.dk, kv),
            "dv" => (self.dv, kv),
            "lse" => (self.lse, stats),
            "delta" => (self.delta, stats),
            _ => {
                return Err(invalid(format!(
                    "the lowered attention backward takes an unknown tensor `{name}`"
                )))
            }
        })
    }

    /// What can be checked without a driver: shapes the Hopper programs take (head dimension 64 or
    /// 128, heads_kv dividing heads, every tensor below 2^31 elements: offsets are 32-bit in the
    /// kernel) and 16-byte aligned bases for the tensors TMA reads.
    pub fn check(&self) -> Result<(), CudaError> {
        let sh = &self.shape;
        if sh.dim != 64 && sh.dim != 128 {
            return Err(invalid(format!(
                "head dimension {} (the Hopper attention backward takes 64 or 128)",
                sh.dim
            )));
        }
        if sh.batch == 0 || sh.heads == 0 || sh.heads_kv == 0 || sh.seq_q == 0 || sh.seq_kv == 0 {
            return Err(invalid(format!("empty attention problem {sh:?}")));
        }
        if !sh.heads.is_multiple_of(sh.heads_kv) {
            return Err(invalid(format!(
                "heads_kv {} must divide heads {}",
                sh.heads_kv, sh.heads
            )));
        }
        let u = |x: usize| x as u64;
        let most = [sh.heads, sh.heads_kv]
            .iter()
            .zip([sh.seq_q, sh.seq_kv])
            .map(|(&h, s)| {
                u(sh.batch)
                    .checked_mul(u(h))
                    .and_then(|x| x.checked_mul(u(s)))
                    .and_then(|x| x.checked_mul(u(sh.dim)))
            })
            .collect::<Option<Vec<u64>>>();
        match most {
            Some(v) if v.iter().all(|&n| n < 1u64 << 31) => {}
            _ => {
                return Err(invalid(format!(
                    "{sh:?}: at most 2^31 elements per tensor (32-bit strides)"
                )))
            }
        }
        for name in ["q", "k", "v", "do"] {
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

/// Enqueues the backward (`p.form`'s launches, in order) on `stream` of device `ordinal`.
/// Returns the kernel loads this call made (first use of a configuration on the device).
///
/// # Safety
/// The ten ranges must stay allocated until the launches have run on `stream`; dq, dk, dv and delta
/// must not overlap each other or the inputs; `stream` must be a live stream of that context (or 0).
pub unsafe fn attention_bwd(
    ordinal: i32,
    stream: u64,
    p: &AttnBwdPointers,
    lower: LowerAttnBwd,
) -> Result<Vec<KernelLoad>, CudaError> {
    p.check()?;
    let sh = &p.shape;
    in_context(ordinal, || {
        for name in ["q", "k", "v", "o", "do", "lse", "delta", "dq", "dk", "dv"] {
            let (ptr, bytes) = p.tensor(name)?;
            check_pointer(name, ptr, bytes, ordinal)?;
        }
        let values = [
            ("batch", sh.batch as i64),
            ("heads", sh.heads as i64),
            ("heads_kv", sh.heads_kv as i64),
            ("seq_q", sh.seq_q as i64),
            ("seq_kv", sh.seq_kv as i64),
        ];
        let raw = stream as cu::CUstream;
        // The atomic form's f32 dQ accumulator (Q's shape and layout) in stream order: allocated
        // here, zeroed by the first launch, freed after the last.
        let mut acc = None;
        let run = (|| {
            if p.form == AttnBwdForm::AtomicDq {
                let bytes = sh.q_len() as u64 * 4;
                let size = usize::try_from(bytes).map_err(|_| invalid("workspace size"))?;
                let mut ptr = 0;
                // SAFETY: out-parameter; a stream of the current context.
                driver_check(
                    unsafe { cu::cuMemAllocAsync(&mut ptr, size, raw) },
                    "cuMemAllocAsync",
                )?;
                acc = Some((ptr, bytes));
            }
            let tensor = |name: &str| match (name, acc) {
                ("dq_acc", Some(a)) => Ok(a),
                _ => p.tensor(name),
            };
            let mut loads = Vec::new();
            // Each launch reads what the one before it wrote (D, the accumulator): in order.
            for &schedule in p.form.launches() {
                let cfg = AttnBwdKernelConfig {
                    dim: sh.dim,
                    causal: p.causal,
                    layout: sh.layout,
                    schedule,
                };
                let (kernel, fresh) = kernel_on(ordinal, &cfg.key(), &|| lower(&cfg))?;
                let l = &kernel.lowered;
                let (mut args, grid) = pack(l, &values, &tensor, kernel.resident)?;
                let mut pointers = args.pointers();
                // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`),
                // alive until the call returns; the maps were checked against the allocations the
                // driver reports; the caller keeps the memory and the stream alive, the accumulator
                // lives until its stream-ordered free.
                unsafe { enqueue(&kernel, grid, &mut pointers, stream)? };
                if fresh {
                    loads.push(kernel.load.clone());
                }
            }
            Ok::<_, CudaError>(loads)
        })();
        if let Some((ptr, _)) = acc {
            // SAFETY: freed after everything enqueued on the stream before it.
            driver_check(unsafe { cu::cuMemFreeAsync(ptr, raw) }, "cuMemFreeAsync")?;
        }
        run
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointers(dim: usize, heads: usize, heads_kv: usize) -> AttnBwdPointers {
        AttnBwdPointers {
            q: 0x1000,
            k: 0x2000,
            v: 0x3000,
            o: 0x3800,
            d_o: 0x4000,
            lse: 0x5000,
            delta: 0x6000,
            dq: 0x7000,
            dk: 0x8000,
            dv: 0x9000,
            shape: BwdShape {
                batch: 2,
                heads,
                heads_kv,
                seq_q: 77,
                seq_kv: 90,
                dim,
                layout: AttnLayout::Bshd,
            },
            causal: Causal::TopLeft,
            form: AttnBwdForm::TwoLaunch,
        }
    }

    fn launch(p: &AttnBwdPointers) -> Result<Vec<KernelLoad>, CudaError> {
        let lower: LowerAttnBwd = |_| Err(invalid("not lowered in this test"));
        // SAFETY: the addresses are never dereferenced on the host; the checks refuse them.
        unsafe { attention_bwd(0, 0, p, lower) }
    }

    #[test]
    fn refuses_what_the_hopper_programs_lack() {
        let e = launch(&pointers(96, 4, 2)).unwrap_err().to_string();
        assert!(
            e.contains("head dimension 96") && e.contains("64 or 128"),
            "{e}"
        );
        let e = launch(&pointers(64, 6, 4)).unwrap_err().to_string();
        assert!(e.contains("must divide"), "{e}");
        let mut p = pointers(64, 4, 2);
        p.shape.seq_kv = 0;
        assert!(launch(&p).unwrap_err().to_string().contains("empty"));
        let mut p = pointers(128, 64, 8);
        p.shape.seq_q = 1 << 20;
        assert!(launch(&p).unwrap_err().to_string().contains("2^31"));
        let mut p = pointers(128, 4, 4);
        p.d_o += 8;
        let e = launch(&p).unwrap_err().to_string();
        assert!(e.contains("do at") && e.contains("16-byte aligned"), "{e}");
    }

    /// Shapes the kernels take get as far as the driver: with host addresses that is an error on any
    /// machine, never a crash.
    #[test]
    fn host_pointers_are_an_error_not_a_crash() {
        let e = launch(&pointers(128, 4, 2)).unwrap_err();
        assert!(
            matches!(
                e,
                CudaError::NoDriver(_) | CudaError::NoDevice(_) | CudaError::Invalid(_)
            ),
            "{e}"
        );
    }

    #[test]
    fn forms_launch_in_stream_order_and_share_the_strip_passes() {
        use BwdSchedule::*;
        assert_eq!(AttnBwdForm::default(), AttnBwdForm::TwoLaunch);
        assert_eq!(AttnBwdForm::TwoLaunch.launches(), &[HopperQ, HopperKv]);
        assert_eq!(
            AttnBwdForm::AtomicDq.launches(),
            &[HopperAtomicPre, HopperAtomicKv, HopperAtomicDq]
        );
        let cfg = |schedule, causal| AttnBwdKernelConfig {
            dim: 128,
            causal,
            layout: AttnLayout::Bshd,
            schedule,
        };
        for s in [HopperAtomicPre, HopperAtomicDq] {
            assert_eq!(cfg(s, Causal::No).key(), cfg(s, Causal::BottomRight).key());
        }
        let keys: std::collections::HashSet<String> = [HopperQ, HopperKv, HopperAtomicKv]
            .iter()
            .flat_map(|&s| [Causal::No, Causal::TopLeft].map(|c| cfg(s, c).key()))
            .collect();
        assert_eq!(keys.len(), 6);
    }

    /// The atomic form refuses what the two-launch form refuses, before any allocation.
    #[test]
    fn atomic_form_checks_the_same() {
        let mut p = pointers(96, 4, 2);
        p.form = AttnBwdForm::AtomicDq;
        let e = launch(&p).unwrap_err().to_string();
        assert!(e.contains("head dimension 96"), "{e}");
        let mut p = pointers(128, 4, 2);
        p.form = AttnBwdForm::AtomicDq;
        assert!(matches!(
            launch(&p).unwrap_err(),
            CudaError::NoDriver(_) | CudaError::NoDevice(_) | CudaError::Invalid(_)
        ));
    }
}
