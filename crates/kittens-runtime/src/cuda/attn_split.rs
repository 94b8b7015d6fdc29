//! The attention forward's launches on Hopper, with or without the key split
//! (`kittens_kernels::attn_fwd::split`: Flash-Decoding, MI300X-attn §5.2 generalised): how many parts
//! a shape gets on a device ([`auto_splits`]), the kernels of a configuration lowered for sm_90a
//! ([`lower_launches`]: the attention; or the split kernel, then the merge), the workspace the split
//! writes and the merge reads ([`workspace`]), and one launch's arguments packed by tensor name
//! ([`pack`]), for the benchmark ([`super::attn`]) and the element-wise checks ([`super::attn_lse`],
//! [`super::attn_decode`]); the Python package's calls take the registry's launches of the same
//! kernels through [`super::dispatch`].

use kittens_codegen::Lowered;
use kittens_hw::Target;
use kittens_kernels::attn_fwd::split::{self, KvSplits, SplitShape};
use kittens_kernels::attn_fwd::{build, AttnConfig};
use kittens_kernels::reference::AttnShape;

use std::rc::Rc;

use super::args::PackedArgs;
use super::attn::params_kv;
use super::driver::{encode_tiled, Device, DeviceBuffer, Function, MapType, Stream};
use super::limits::check_tensor_map_nd;
use super::{compile, invalid, CudaCompileReport, CudaError};

/// The parts `splits` resolves to for `sh` (`seq_kv` keys) with configuration `cfg` on a device of
/// `sms` SMs: a fixed count as given; `auto` as the tail planner decides (`split::choose`) for the
/// catalog's sm_90a GPU with the device's own SM count.
pub fn auto_splits(
    splits: KvSplits,
    sms: u32,
    cfg: &AttnConfig,
    sh: &AttnShape,
    seq_kv: usize,
) -> Result<u32, CudaError> {
    let gpu = Target::Sm90a
        .gpu()
        .ok_or_else(|| invalid("no sm_90a GPU in the catalog"))?;
    let gpu = kittens_hw::Gpu {
        compute_units: sms.max(1),
        ..gpu.clone()
    };
    let shape = SplitShape {
        batch: sh.batch as u64,
        heads: sh.heads as u64,
        seq: sh.seq as u64,
        seq_kv: seq_kv as u64,
    };
    Ok(split::resolve(splits, &gpu, cfg, shape).map_err(invalid)?.0)
}

/// `cfg` lowered for sm_90a, in launch order: the attention; with `cfg.kv_splits > 1` the split
/// kernel and then its merge.
pub fn lower_launches(cfg: &AttnConfig) -> Result<Vec<Lowered>, CudaError> {
    let lower = |k| kittens_codegen::lower(&k, Target::Sm90a).map_err(invalid);
    let mut out = vec![lower(build(cfg).map_err(invalid)?)?];
    if cfg.kv_splits > 1 {
        out.push(lower(split::build_merge(cfg).map_err(invalid)?)?);
    }
    Ok(out)
}

/// The tensors a split run of `splits` parts writes and reads between its launches, with their
/// bytes (f32 `[G, b, h, s, d]` and `[G, b, h, s]`); none without a split.
pub fn workspace(splits: u32, sh: &AttnShape) -> Result<Vec<(&'static str, u64)>, CudaError> {
    if splits <= 1 {
        return Ok(Vec::new());
    }
    let rows = [
        splits as u64,
        sh.batch as u64,
        sh.heads as u64,
        sh.seq as u64,
    ]
    .iter()
    .try_fold(4u64, |a, &x| a.checked_mul(x))
    .ok_or_else(|| invalid(format!("{sh:?} split {splits}: workspace overflows")))?;
    let o = rows
        .checked_mul(sh.dim as u64)
        .ok_or_else(|| invalid(format!("{sh:?} split {splits}: workspace overflows")))?;
    Ok(vec![(split::O_PARTIAL, o), (split::LSE_PARTIAL, rows)])
}

/// Where a launch finds a tensor by its name in the tile program: its address and bytes.
pub type TensorAt<'a> = &'a dyn Fn(&str) -> Result<(u64, u64), CudaError>;

/// The arguments of launch `l` at `values`, each tensor from `tensor(name) -> (address, bytes)`
/// (tensor maps checked against the bytes), and its grid on a device of `sms` SMs.
pub fn pack(
    l: &Lowered,
    values: &[(&str, i64)],
    tensor: TensorAt,
    sms: u32,
) -> Result<(PackedArgs, u32), CudaError> {
    let args = PackedArgs::pack(
        l,
        values,
        |g| {
            let (ptr, bytes) = tensor(&g.tensor)?;
            let bytes = usize::try_from(bytes).map_err(|_| invalid("tensor size"))?;
            let ty = MapType::of(g.dtype)?;
            check_tensor_map_nd(&g.dims, &g.strides, &g.boxes, ty.bytes(), bytes)?;
            encode_tiled(ptr, ty, &g.dims, &g.strides, &g.boxes, g.swizzle)
        },
        |name| Ok(tensor(name)?.0),
    )?;
    let grid = l
        .blocks(values, sms)
        .ok_or_else(|| invalid(format!("grid extents of the lowered `{}`", l.entry)))?;
    Ok((args, grid))
}

/// One attention configuration ready to run on the GPU's own buffers (the checks and benchmarks):
/// its launches compiled and loaded, Q, K, V uploaded, O and the log-sum-exp poisoned with NaN, the
/// split's workspace allocated.
pub struct Prepared {
    launches: Vec<(Function, Lowered, CudaCompileReport)>,
    bufs: Vec<(String, DeviceBuffer)>,
    values: [(&'static str, i64); 5],
    sms: u32,
}

impl Prepared {
    /// `cfg` (with the log-sum-exp: the checks judge it) at `sh` with `seq_kv` keys on `dev`.
    pub fn new(
        dev: &Rc<Device>,
        cfg: &AttnConfig,
        sh: &AttnShape,
        seq_kv: usize,
        (q, k, v): (&[u16], &[u16], &[u16]),
    ) -> Result<Prepared, CudaError> {
        let mut launches = Vec::new();
        for l in lower_launches(cfg)? {
            let shared = l.dynamic_shared_bytes();
            let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
            let f = dev.load_module(&image.cubin)?.function(&l.entry, shared)?;
            launches.push((f, l, image.report));
        }
        let upload = |h: &[u16]| -> Result<DeviceBuffer, CudaError> {
            let mut b = dev.alloc(h.len() * 2)?;
            b.upload(h)?;
            Ok(b)
        };
        let mut o = dev.alloc(q.len() * 2)?;
        o.fill_u16(0x7fc0)?; // NaN: an element no launch writes fails the check
        let rows = sh.batch * sh.heads * sh.seq;
        let mut lse = dev.alloc(rows * 4)?;
        lse.upload(&vec![f32::NAN; rows])?;
        let mut bufs = vec![
            ("q".to_string(), upload(q)?),
            ("k".to_string(), upload(k)?),
            ("v".to_string(), upload(v)?),
            ("o".to_string(), o),
            ("lse".to_string(), lse),
        ];
        for (name, bytes) in workspace(cfg.kv_splits, sh)? {
            let bytes = usize::try_from(bytes).map_err(|_| invalid("workspace size"))?;
            bufs.push((name.to_string(), dev.alloc(bytes)?));
        }
        Ok(Prepared {
            launches,
            bufs,
            // The merge reads three of them (`batch, heads, seq`), by name.
            values: params_kv(sh, seq_kv),
            sms: dev.multiprocessors,
        })
    }

    /// Enqueues every launch on `stream`, in order.
    pub fn enqueue(&self, stream: &Stream) -> Result<(), CudaError> {
        let tensor = |name: &str| match self.bufs.iter().find(|b| b.0 == name) {
            Some((_, b)) => Ok((b.ptr(), b.bytes() as u64)),
            None => Err(invalid(format!(
                "the lowered attention takes an unknown tensor `{name}`"
            ))),
        };
        for (f, l, _) in &self.launches {
            let (mut args, grid) = pack(l, &self.values, &tensor, self.sms)?;
            let mut pointers = args.pointers();
            // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`); the
            // buffers hold the shape's tensors and the workspace, the maps were checked against
            // them; `args` outlives the launch.
            unsafe { f.launch((grid, 1, 1), (l.threads, 1, 1), stream, &mut pointers)? };
        }
        Ok(())
    }

    /// O (bf16 bits) and the log-sum-exp as they are now on the device.
    pub fn read(&self) -> Result<(Vec<u16>, Vec<f32>), CudaError> {
        let get = |name: &str| {
            self.bufs
                .iter()
                .find(|b| b.0 == name)
                .map(|b| &b.1)
                .ok_or_else(|| invalid(format!("no buffer `{name}`")))
        };
        let (o, lse) = (get("o")?, get("lse")?);
        let mut out_o = vec![0u16; o.bytes() / 2];
        o.download(&mut out_o)?;
        let mut out_lse = vec![0f32; lse.bytes() / 4];
        lse.download(&mut out_lse)?;
        Ok((out_o, out_lse))
    }

    /// The entry names and compile reports of the launches, in order.
    pub fn reports(&self) -> Vec<(&str, &CudaCompileReport)> {
        self.launches
            .iter()
            .map(|(_, l, r)| (l.entry.as_str(), r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kittens_kernels::attn_fwd::AttnLayout;

    fn shape(batch: usize, heads: usize, seq: usize) -> AttnShape {
        AttnShape {
            batch,
            heads,
            heads_kv: heads,
            seq,
            dim: 128,
            layout: AttnLayout::Bshd,
        }
    }

    fn h100() -> AttnConfig {
        AttnConfig::for_gpu(kittens_hw::gpu("h100").unwrap())
    }

    /// Decoding on 132 SMs splits in 4; a full grid or a short cache does not; the device's own SM
    /// count enters (a 66-SM part would split B1 H32 in 2).
    #[test]
    fn auto_splits_decoding_on_the_device() {
        let auto = |sms, sh: &AttnShape, skv| auto_splits(KvSplits::Auto, sms, &h100(), sh, skv);
        assert_eq!(auto(132, &shape(1, 32, 1), 32768).unwrap(), 4);
        assert_eq!(auto(66, &shape(1, 32, 1), 32768).unwrap(), 2);
        assert_eq!(auto(132, &shape(16, 16, 4096), 4096).unwrap(), 1);
        assert_eq!(auto(132, &shape(1, 32, 1), 128).unwrap(), 1);
        let fixed = auto_splits(KvSplits::Fixed(3), 132, &h100(), &shape(1, 1, 1), 1);
        assert_eq!(fixed.unwrap(), 3);
    }

    /// The launches and workspace of a split configuration: the split kernel writing the partials
    /// and the merge reading them, by the names the workspace allocates.
    #[test]
    fn a_split_is_two_launches_meeting_in_the_workspace() {
        let cfg = AttnConfig {
            kv_splits: 4,
            lse: true,
            ..h100()
        };
        let l = lower_launches(&cfg).unwrap();
        assert_eq!(l.len(), 2);
        let globals =
            |l: &Lowered| -> Vec<String> { l.ir.globals.iter().map(|g| g.name.clone()).collect() };
        assert_eq!(globals(&l[0]), ["q", "k", "v", "o_partial", "lse_partial"]);
        assert_eq!(globals(&l[1]), ["o_partial", "lse_partial", "o", "lse"]);
        let w = workspace(4, &shape(2, 3, 5)).unwrap();
        assert_eq!(
            w,
            [("o_partial", 4 * 4 * 30 * 128), ("lse_partial", 4 * 4 * 30)]
        );
        assert!(workspace(1, &shape(2, 3, 5)).unwrap().is_empty());
        assert_eq!(lower_launches(&h100()).unwrap().len(), 1);
    }
}
