//! Running the varlen attention programs ([`crate::attn_varlen`], [`crate::attn_varlen_bwd`]) on the
//! CPU interpreter on the caller's packed tensors. The offsets are on the host here, so they are
//! checked (each argument named): `cu_seqlens_*` of `batch + 1` entries, starting at 0, never
//! decreasing, within the packed tensors; `max_seqlen_*` at least every sequence's length (a smaller
//! one would leave rows uncomputed). A device caller cannot check these without reading the offsets
//! back (a synchronisation), which is why FlashAttention trusts them; so does a CUDA path.

use crate::attn_varlen::VarlenConfig;
use crate::exec::BwdTensors;
use crate::KernelError;
use kittens_ir::interp;

/// A packed batch's sizes and offsets.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub heads: usize,
    pub heads_kv: usize,
    pub cu_q: Vec<i64>,
    pub cu_k: Vec<i64>,
    pub max_q: usize,
    pub max_k: usize,
    /// `seqused_k` (with [`VarlenConfig::seqused_k`]): sequence `b` keeps `used_k[b]` keys from
    /// `cu_k[b]`; `cu_k` then only needs to start at 0 and not decrease.
    pub used_k: Option<Vec<i64>>,
    /// ALiBi's slopes `[batch, heads]` (with [`VarlenConfig::alibi`]).
    pub alibi: Option<Vec<f32>>,
}

fn problem(msg: String) -> KernelError {
    KernelError::Problem(msg)
}

impl Packed {
    /// Checks the offsets against the packed tensors' rows and returns the kernels' parameters.
    fn params(&self, total_q: usize, total_k: usize) -> Result<[i64; 7], KernelError> {
        if self.heads == 0 || self.heads_kv == 0 || !self.heads.is_multiple_of(self.heads_kv) {
            return Err(problem(format!(
                "heads: {} query heads must be a positive multiple of the {} KV heads",
                self.heads, self.heads_kv
            )));
        }
        if self.cu_q.len() != self.cu_k.len() || self.cu_q.len() < 2 {
            return Err(problem(format!(
                "cu_seqlens_q, cu_seqlens_k: both need batch + 1 >= 2 entries, got {} and {}",
                self.cu_q.len(),
                self.cu_k.len()
            )));
        }
        for (name, cu, total, max, max_name) in [
            (
                "cu_seqlens_q",
                &self.cu_q,
                total_q,
                self.max_q,
                "max_seqlen_q",
            ),
            (
                "cu_seqlens_k",
                &self.cu_k,
                total_k,
                self.max_k,
                "max_seqlen_k",
            ),
        ] {
            if cu[0] != 0 {
                return Err(problem(format!("{name}: must start at 0, got {}", cu[0])));
            }
            for (b, w) in cu.windows(2).enumerate() {
                if w[1] < w[0] {
                    return Err(problem(format!(
                        "{name}: must not decrease, got {} then {} at entries {b}, {}",
                        w[0],
                        w[1],
                        b + 1
                    )));
                }
                if (w[1] - w[0]) as usize > max {
                    return Err(problem(format!(
                        "{max_name}: {max}, but sequence {b} has {} rows ({name})",
                        w[1] - w[0]
                    )));
                }
            }
            let last = *cu.last().unwrap_or(&0);
            // The interpreter holds every tensor as f32, exact for integers up to 2^24.
            if last > 1 << 24 {
                return Err(problem(format!(
                    "{name}: ends at {last}; the CPU interpreter takes packed batches of at most \
                     2^24 rows"
                )));
            }
            if last as usize > total {
                return Err(problem(format!(
                    "{name}: ends at {last}, past the packed tensor's {total} rows"
                )));
            }
        }
        if let Some(used) = &self.used_k {
            if used.len() + 1 != self.cu_k.len() {
                return Err(problem(format!(
                    "seqused_k: {} entries for {} sequences",
                    used.len(),
                    self.cu_k.len() - 1
                )));
            }
            for (b, &u) in used.iter().enumerate() {
                let end = self.cu_k[b].checked_add(u);
                if u < 0 || u as usize > self.max_k || end.is_none_or(|e| e as usize > total_k) {
                    return Err(problem(format!(
                        "seqused_k: sequence {b} uses {u} keys from row {}; it must be 0 to \
                         max_seqlen_k = {} and end within the {total_k} key rows",
                        self.cu_k[b], self.max_k
                    )));
                }
            }
        }
        if let Some(a) = &self.alibi {
            let want = (self.cu_q.len() - 1) * self.heads;
            if a.len() != want {
                return Err(problem(format!(
                    "alibi_slopes: {} slopes, want batch x heads = {want}",
                    a.len()
                )));
            }
            crate::attn::score::Alibi::check(a)?;
        }
        Ok([
            (self.cu_q.len() - 1) as i64,
            self.heads as i64,
            self.heads_kv as i64,
            total_q as i64,
            total_k as i64,
            self.max_q.max(1) as i64,
            self.max_k.max(1) as i64,
        ])
    }
    fn offsets(&self) -> [Vec<f32>; 2] {
        [&self.cu_q, &self.cu_k].map(|c| c.iter().map(|&x| x as f32).collect())
    }
    /// The tensors after the offsets that `cfg`'s programs declare (the slopes), checked against it.
    fn after_offsets(&self, cfg: &VarlenConfig) -> Result<Vec<Vec<f32>>, KernelError> {
        if cfg.alibi != self.alibi.is_some() {
            return Err(problem(
                "alibi_slopes: given without the configuration's alibi, or missing".into(),
            ));
        }
        Ok(self.alibi.iter().cloned().collect())
    }
}

fn rows(what: &str, len: usize, heads: usize, dim: usize) -> Result<usize, KernelError> {
    let per = heads * dim;
    if per == 0 || !len.is_multiple_of(per) {
        return Err(problem(format!(
            "{what}: {len} elements is not a whole number of rows of {heads} heads x {dim}"
        )));
    }
    Ok(len / per)
}

/// `(o, lse)`: `o` like `q` (`[total_q, heads, d]`), `lse` `[heads, total_q]`; rows outside every
/// sequence are 0 in `o` and `lse`.
pub fn forward(
    cfg: &VarlenConfig,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: &Packed,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    forward_with(&crate::attn_varlen::build(cfg)?, cfg, q, k, v, p)
}

/// [`forward`] running `kernel`, a varlen forward program of `cfg` with [`crate::attn_varlen`]'s
/// tensors and parameters (e.g. the sm_90a program, `crate::attn_varlen_hopper`, on the interpreter).
pub fn forward_with(
    kernel: &kittens_ir::Kernel,
    cfg: &VarlenConfig,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: &Packed,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    let d = cfg.dim as usize;
    let total_q = rows("q", q.len(), p.heads, d)?;
    let total_k = rows("k", k.len(), p.heads_kv, d)?;
    if v.len() != k.len() {
        return Err(problem(format!(
            "v: {} elements, k has {}",
            v.len(),
            k.len()
        )));
    }
    let params = p.params(total_q, total_k)?;
    let [cq, ck] = p.offsets();
    if cfg.seqused_k != p.used_k.is_some() {
        return Err(problem(
            "seqused_k: given without the configuration's seqused_k, or missing".into(),
        ));
    }
    let mut t = vec![q.to_vec(), k.to_vec(), v.to_vec(), cq, ck];
    if let Some(u) = &p.used_k {
        t.push(u.iter().map(|&x| x as f32).collect());
    }
    t.extend(p.after_offsets(cfg)?);
    let n_in = t.len();
    t.push(vec![0.0; q.len()]);
    t.push(vec![0.0; p.heads * total_q]);
    interp::run(kernel, &params, &mut t)?;
    let lse = t.swap_remove(n_in + 1);
    let o = t.swap_remove(n_in);
    Ok((o, lse))
}

/// The backward's parameters after checking the tensors' sizes against each other and the offsets.
fn backward_params(
    cfg: &VarlenConfig,
    t: &BwdTensors,
    p: &Packed,
) -> Result<[i64; 7], KernelError> {
    let BwdTensors {
        q,
        k,
        v,
        o,
        d_o,
        lse,
    } = *t;
    let d = cfg.dim as usize;
    let total_q = rows("q", q.len(), p.heads, d)?;
    let total_k = rows("k", k.len(), p.heads_kv, d)?;
    for (name, t, want) in [
        ("v", v.len(), k.len()),
        ("out", o.len(), q.len()),
        ("grad_out", d_o.len(), q.len()),
        ("lse", lse.len(), p.heads * total_q),
    ] {
        if t != want {
            return Err(problem(format!("{name}: {t} elements, want {want}")));
        }
    }
    p.params(total_q, total_k)
}

/// `[dq, dk, dv]` (f32, layouts of `q`, `k`, `v`) from the forward's `o` and `lse` and the upstream
/// gradient `d_o`.
pub fn backward(
    cfg: &VarlenConfig,
    t: BwdTensors,
    p: &Packed,
) -> Result<[Vec<f32>; 3], KernelError> {
    use crate::attn_varlen_bwd::{build, Part};
    let params = backward_params(cfg, &t, p)?;
    let [cq, ck] = p.offsets();
    let slopes = p.after_offsets(cfg)?;
    let (q, k, v) = (t.q, t.k, t.v);
    let inputs = t.all().map(<[f32]>::to_vec);
    let run = |part, outputs: &[usize]| -> Result<Vec<Vec<f32>>, KernelError> {
        let mut t: Vec<Vec<f32>> = inputs.to_vec();
        t.extend([cq.clone(), ck.clone()]);
        t.extend(slopes.iter().cloned());
        let n_in = t.len();
        t.extend(outputs.iter().map(|&n| vec![0.0; n]));
        interp::run(&build(cfg, part)?, &params, &mut t)?;
        Ok(t.split_off(n_in))
    };
    let mut kv = run(Part::Keys, &[k.len(), v.len()])?;
    let dq = run(Part::Queries, &[q.len()])?.remove(0);
    let dv = kv.remove(1);
    Ok([dq, kv.remove(0), dv])
}

/// [`backward`] through the sm_90a program ([`crate::attn_varlen_bwd_hopper`]) on the interpreter,
/// with what its caller does around it on the device done here: `delta = rowsum(dO∘O)` (f32
/// products and sum, `[heads, total_q]`) before, `dq = dq_acc · scale` after. dK and dV come out of
/// the program rounded to bf16.
pub fn backward_sm90(
    cfg: &VarlenConfig,
    t: BwdTensors,
    p: &Packed,
) -> Result<[Vec<f32>; 3], KernelError> {
    let params = backward_params(cfg, &t, p)?;
    let BwdTensors {
        q,
        k,
        v,
        o,
        d_o,
        lse,
    } = t;
    let kernel = crate::attn_varlen_bwd_hopper::build(cfg)?;
    let d = cfg.dim as usize;
    let total_q = q.len() / (p.heads * d);
    let mut delta = vec![0.0f32; p.heads * total_q];
    for (r, (o_r, do_r)) in o.chunks(d).zip(d_o.chunks(d)).enumerate() {
        let (row, h) = (r / p.heads, r % p.heads);
        delta[h * total_q + row] = o_r.iter().zip(do_r).map(|(a, b)| a * b).sum();
    }
    let [cq, ck] = p.offsets();
    let mut t = vec![
        q.to_vec(),
        k.to_vec(),
        v.to_vec(),
        d_o.to_vec(),
        lse.to_vec(),
        delta,
        cq,
        ck,
    ];
    t.extend(p.after_offsets(cfg)?);
    let n_in = t.len();
    t.extend([vec![0.0; k.len()], vec![0.0; v.len()], vec![0.0; q.len()]]);
    interp::run(&kernel, &params, &mut t)?;
    let scale = cfg.logits.scale(cfg.dim);
    let dq = t
        .swap_remove(n_in + 2)
        .into_iter()
        .map(|x| x * scale)
        .collect();
    let dv = t.swap_remove(n_in + 1);
    let dk = t.swap_remove(n_in);
    Ok([dq, dk, dv])
}
