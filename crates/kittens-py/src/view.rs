//! What the Python side hands over for each array (address, shape, strides in elements, dtype, device)
//! and the checks that turn a call's arrays into a kernel problem — or into an error naming what is wrong.
//!
//! The layout rules are the same on the CPU and on the GPU: an array is accepted only where the kernel
//! reads it in place (on the GPU through TMA, which needs dense 16-byte-aligned rows), so code that runs
//! on CPU arrays runs unchanged on CUDA tensors, and nothing is ever copied behind the caller's back.

use kittens_kernels::attn::strides::AttnStrides;
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::exec::GemmOperands;
use kittens_kernels::exec::ATTN_DIMS;
use kittens_kernels::gemm::{ALayout, BLayout};

/// Errors that become Python exceptions of the matching type.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// `TypeError`: wrong dtype.
    #[error("{0}")]
    Type(String),
    /// `ValueError`: shapes, strides, devices, sizes.
    #[error("{0}")]
    Value(String),
    /// `RuntimeError`: no driver, no kernel for this device, a failed launch.
    #[error("{0}")]
    Runtime(String),
    /// `KeyboardInterrupt`: the CPU run stopped at a signal (`kittens_ir::interp::InterpError::Cancelled`).
    #[error("interrupted")]
    Interrupted,
}

/// Where an array lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(i32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// One array as the Python side describes it: `(address, shape, strides in elements, dtype name,
/// device type "cpu"/"cuda", device index)`.
pub type ViewArgs = (u64, Vec<i64>, Vec<i64>, String, String, i32);

#[derive(Debug, Clone)]
pub struct View {
    pub name: &'static str,
    pub ptr: u64,
    pub shape: Vec<usize>,
    pub strides: Vec<i64>,
    pub device: Device,
    /// Bytes per element (2 for bf16, 4 for the f32 log-sum-exp).
    pub elem: u64,
    /// An array the call would allocate ([`View::planned`]): checked for shape and layout, but it
    /// has no memory yet to overlap anything.
    pub planned: bool,
}

/// Reads one array's description, checking the dtype (bf16) and the device.
pub fn view(name: &'static str, args: ViewArgs) -> Result<View, ApiError> {
    view_of(name, args, "bfloat16", "kittens' kernels take bfloat16")
}

/// Reads the description of an f32 array (the attention's log-sum-exp).
pub fn view_f32(name: &'static str, args: ViewArgs) -> Result<View, ApiError> {
    view_of(name, args, "float32", "it must be float32")
}

fn view_of(name: &'static str, args: ViewArgs, want: &str, why: &str) -> Result<View, ApiError> {
    let (ptr, shape, strides, dtype, dev, index) = args;
    if dtype != want {
        return Err(ApiError::Type(format!("{name} has dtype {dtype}; {why}")));
    }
    if shape.len() != strides.len() {
        return Err(ApiError::Value(format!(
            "{name}: {} dimensions but {} strides",
            shape.len(),
            strides.len()
        )));
    }
    let shape = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| ApiError::Value(format!("{name}: negative dimension in {shape:?}")))?;
    let device = match dev.as_str() {
        "cpu" => Device::Cpu,
        "cuda" if index >= 0 => Device::Cuda(index),
        other => {
            return Err(ApiError::Value(format!(
                "{name} is on device `{other}:{index}`; kittens runs on cpu and cuda arrays"
            )))
        }
    };
    Ok(View {
        name,
        ptr,
        shape,
        strides,
        device,
        elem: if want == "float32" { 4 } else { 2 },
        planned: false,
    })
}

impl View {
    /// The array a call would allocate when the caller passes none (`shape`, `strides` like `self`'s
    /// device): the checks run on it before the Python side allocates, so a bad input is refused
    /// before a huge output is allocated for it. It has no address: [`disjoint`] skips it.
    pub(crate) fn planned(&self, name: &'static str, shape: Vec<usize>, strides: Vec<i64>) -> View {
        View {
            name,
            ptr: 0,
            shape,
            strides,
            device: self.device,
            elem: self.elem,
            planned: true,
        }
    }

    /// Row-major strides of `shape` (saturating: a shape too large is refused by its size check).
    pub(crate) fn row_major(shape: &[usize]) -> Vec<i64> {
        let mut strides = vec![0i64; shape.len()];
        let mut s = 1i64;
        for i in (0..shape.len()).rev() {
            strides[i] = s;
            s = s.saturating_mul(i64::try_from(shape[i]).unwrap_or(i64::MAX));
        }
        strides
    }

    pub(crate) fn dims(&self) -> String {
        format!("{:?}", self.shape)
    }

    /// Whether the strides are `want` on every dimension longer than 1 (a size-1 dimension's stride is
    /// never used to address anything, and frameworks set it freely). An empty array (a dimension of
    /// 0) addresses nothing at all: any strides are its strides (numpy gives some empty arrays zero
    /// strides, its own `np.empty((0, 8))` included).
    pub(crate) fn strides_are(&self, want: &[usize]) -> bool {
        if self.shape.contains(&0) {
            return true;
        }
        self.shape
            .iter()
            .zip(&self.strides)
            .zip(want)
            .all(|((&n, &s), &w)| n <= 1 || usize::try_from(s) == Ok(w))
    }

    /// Elements the array spans, or `None` on overflow (the caller reports it).
    fn elems(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// Byte range `[start, end)` of a dense array.
    pub(crate) fn bytes(&self) -> Result<(u64, u64), ApiError> {
        let n = self
            .elems()
            .and_then(|e| e.checked_mul(self.elem as usize))
            .ok_or_else(|| {
                ApiError::Value(format!(
                    "{} of shape {} is too large",
                    self.name,
                    self.dims()
                ))
            })?;
        let end = self
            .ptr
            .checked_add(n as u64)
            .ok_or_else(|| ApiError::Value(format!("{}: address range overflows", self.name)))?;
        Ok((self.ptr, end))
    }
}

/// All arrays of one call on one device.
pub(crate) fn same_device(views: &[&View]) -> Result<Device, ApiError> {
    let d = views[0].device;
    if let Some(v) = views.iter().find(|v| v.device != d) {
        return Err(ApiError::Value(format!(
            "arrays on different devices: {} is on {}, {} on {}",
            views[0].name, d, v.name, v.device
        )));
    }
    Ok(d)
}

/// The output must not share memory with an input (the kernel reads inputs while it writes).
pub(crate) fn disjoint(out: &View, inputs: &[&View]) -> Result<(), ApiError> {
    let (o0, o1) = out.bytes()?;
    for v in inputs {
        let (i0, i1) = v.bytes()?;
        if out.planned || v.planned {
            continue;
        }
        if o0 < i1 && i0 < o1 && o0 < o1 && i0 < i1 {
            return Err(ApiError::Value(format!(
                "{} overlaps {} in memory; pass a separate output array",
                out.name, v.name
            )));
        }
    }
    Ok(())
}

pub(crate) fn ndim(v: &View, n: usize, what: &str) -> Result<(), ApiError> {
    if v.shape.len() == n {
        Ok(())
    } else {
        Err(ApiError::Value(format!(
            "{} must be {n}-D {what}, got shape {}",
            v.name,
            v.dims()
        )))
    }
}

/// A checked `a @ b`: C = `out` (M×N row-major, rows `ldc` apart); A = `a` (M×K) and B = `b` (K×N) each
/// as its strides store it ([`operand`]), read in place.
#[derive(Debug, Clone, Copy)]
pub struct Matmul {
    pub device: Device,
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// How `a` and `b` are stored, as the GEMM kernel reads them.
    pub ops: GemmOperands,
    /// Elements between `out`'s rows (N when dense).
    pub ldc: usize,
}

/// How a matmul operand seen as `rows × cols` is stored: `(false, ld)` row-major with its rows `ld`
/// elements apart (a slice of a bigger row-major matrix), `(true, ld)` as the transpose of a
/// row-major `cols × rows` array with rows `ld` apart (`x.T`, or a slice of one); `None` for any other
/// strides (neither dimension contiguous, negative or overlapping strides).
pub fn operand(v: &View, rows: usize, cols: usize) -> Option<(bool, usize)> {
    if rows == 0 || cols == 0 {
        return Some((false, cols));
    }
    let st = |i: usize| usize::try_from(v.strides[i]).ok();
    let (s0, s1) = (st(0)?, st(1)?);
    let lead = |n: usize, s: usize, cols: usize| {
        if n <= 1 {
            Some(cols)
        } else {
            (s >= cols).then_some(s)
        }
    };
    if cols <= 1 || s1 == 1 {
        if let Some(ld) = lead(rows, s0, cols) {
            return Some((false, ld));
        }
    }
    if rows <= 1 || s0 == 1 {
        return lead(cols, s1, rows).map(|ld| (true, ld));
    }
    None
}

pub fn matmul(a: &View, b: &View, out: &View) -> Result<Matmul, ApiError> {
    ndim(a, 2, "(M, K)")?;
    ndim(b, 2, "(K, N)")?;
    ndim(out, 2, "(M, N)")?;
    let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
    if b.shape[0] != k {
        return Err(ApiError::Value(format!(
            "a @ b: a is {} (M, K) but b is {}: b needs K = {k} rows",
            a.dims(),
            b.dims()
        )));
    }
    if out.shape != [m, n] {
        return Err(ApiError::Value(format!(
            "out has shape {}, a @ b has shape [{m}, {n}]",
            out.dims()
        )));
    }
    let device = same_device(&[a, b, out])?;
    let layout = |v: &View, rows, cols| {
        operand(v, rows, cols).ok_or_else(|| {
            ApiError::Value(format!(
                "{} must have one dimension contiguous: row-major ({rows}, {cols}) with rows any \
                 distance ≥ {cols} apart (a slice of a bigger matrix), or the transpose of a row-major \
                 ({cols}, {rows}) array with rows ≥ {rows} apart; got strides {:?}. The kernel reads \
                 either in place and kittens makes no hidden copies",
                v.name, v.strides
            ))
        })
    };
    let (a_t, lda) = layout(a, m, k)?;
    // b (K, N) transposed is a (N, K) row-major array: the GEMM's B as `N × K`; row-major b is `K × N`.
    let (b_t, ldb) = layout(b, k, n)?;
    // out row-major with rows `ldc ≥ N` apart (a slice of a bigger matrix's rows, written in place).
    let ldc = match operand(out, m, n) {
        Some((false, ldc)) => ldc,
        _ => {
            return Err(ApiError::Value(format!(
            "out must be row-major with rows at least {n} elements apart (strides (ldc, 1), ldc ≥ \
                 {n}), got strides {:?}",
            out.strides
        )))
        }
    };
    disjoint(out, &[a, b])?;
    let dense = [if a_t { m } else { k }, if b_t { k } else { n }];
    Ok(Matmul {
        device,
        a: a.ptr,
        b: b.ptr,
        c: out.ptr,
        m,
        n,
        k,
        ops: GemmOperands {
            a_layout: if a_t { ALayout::Km } else { ALayout::Mk },
            b_layout: if b_t { BLayout::Nk } else { BLayout::Kn },
            ld: ([lda, ldb] != dense).then_some([lda, ldb]),
        },
        ldc,
    })
}

/// A checked attention call: `q, out` are (B, H, N, D), `k, v` (B, H_kv, N_kv, D), all in one of the
/// two dense layouts `attn_fwd` reads; `lse`, when given, a contiguous f32 (B, H, N).
#[derive(Debug, Clone, Copy)]
pub struct Attention {
    pub device: Device,
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: Option<u64>,
    pub batch: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub seq: usize,
    pub seq_kv: usize,
    pub dim: usize,
    pub layout: AttnLayout,
    /// Each tensor's own strides when the four are not dense in one layout (`layout` then unused).
    pub strides: Option<AttnStrides>,
}

/// Dense strides of logical (B, H, N, D) in `layout`.
pub(crate) fn attn_strides(layout: AttnLayout, s: &[usize]) -> [usize; 4] {
    let (h, n, d) = (s[1], s[2], s[3]);
    match layout {
        AttnLayout::Bhsd => [h * n * d, n * d, d, 1],
        AttnLayout::Bshd => [n * h * d, d, h * d, 1],
    }
}

pub fn attention(
    q: &View,
    k: &View,
    v: &View,
    out: &View,
    lse: Option<&View>,
    scale: Option<f64>,
) -> Result<Attention, ApiError> {
    for t in [q, k, v, out] {
        ndim(t, 4, "(B, H, N, D) as for F.scaled_dot_product_attention")?;
    }
    let [b, h, n, d] = [q.shape[0], q.shape[1], q.shape[2], q.shape[3]];
    let hk = k.shape[1];
    if k.shape != v.shape {
        return Err(ApiError::Value(format!(
            "k has shape {} but v has shape {}",
            k.dims(),
            v.dims()
        )));
    }
    if k.shape[0] != b || k.shape[3] != d {
        return Err(ApiError::Value(format!(
            "q is {} but k is {}: batch and head dim must match",
            q.dims(),
            k.dims()
        )));
    }
    let n_kv = k.shape[2];
    if n_kv == 0 && n > 0 {
        return Err(ApiError::Value(format!(
            "k has no keys for q's {n} queries: the softmax over zero keys is undefined"
        )));
    }
    if hk == 0 || !h.is_multiple_of(hk) {
        return Err(ApiError::Value(format!(
            "{h} query heads cannot share {hk} key/value heads: GQA needs H divisible by H_kv"
        )));
    }
    if out.shape != q.shape {
        return Err(ApiError::Value(format!(
            "out has shape {}, the output has q's shape {}",
            out.dims(),
            q.dims()
        )));
    }
    if !ATTN_DIMS.contains(&d) || !d.is_multiple_of(32) {
        return Err(ApiError::Value(format!(
            "head dim {d} is not supported: kittens.attention takes multiples of 32 from {} to {}",
            ATTN_DIMS.start(),
            ATTN_DIMS.end()
        )));
    }
    // Any finite positive scale: a constant of the kernel (`kittens_kernels::attn::score::Logits`).
    if let Some(s) = scale {
        if !(s.is_finite() && s > 0.0) {
            return Err(ApiError::Value(format!(
                "scale={s}: the softmax scale must be finite and positive"
            )));
        }
    }
    if let Some(l) = lse {
        let want = [b, h, n];
        if l.shape != want || !l.strides_are(&[h * n, n, 1]) {
            return Err(ApiError::Value(format!(
                "lse must be a contiguous float32 array of shape {want:?} (B, H, N), got shape {} \
                 strides {:?}",
                l.dims(),
                l.strides
            )));
        }
        if l.device != q.device {
            return Err(ApiError::Value(format!(
                "lse is on {} but q on {}",
                l.device, q.device
            )));
        }
        disjoint(l, &[q, k, v, out])?;
    }
    let device = same_device(&[q, k, v, out])?;
    // One dense layout for all four: the dense programs; otherwise each in its own strides (the
    // strided programs, `kittens_kernels::attn::strides`), the head dim contiguous.
    let layout = [AttnLayout::Bshd, AttnLayout::Bhsd].into_iter().find(|&l| {
        [q, k, v, out]
            .iter()
            .all(|t| t.strides_are(&attn_strides(l, &t.shape)))
    });
    let strides = match layout {
        Some(_) => {
            disjoint(out, &[q, k, v])?;
            None
        }
        None => {
            let [sq, sk, sv, so] = [q, k, v, out].map(attn_tensor_strides);
            let st = AttnStrides {
                q: sq?,
                k: sk?,
                v: sv?,
                o: so?,
                ..AttnStrides::default()
            };
            let o_shape = [b, h, n, d];
            kittens_kernels::attn::strides::check_no_overlap("out", o_shape, st.o)
                .map_err(|e| ApiError::Value(e.to_string()))?;
            disjoint_spans(out, &[q, k, v])?;
            Some(st)
        }
    };
    Ok(Attention {
        device,
        q: q.ptr,
        k: k.ptr,
        v: v.ptr,
        o: out.ptr,
        lse: lse.map(|l| l.ptr),
        batch: b,
        heads: h,
        heads_kv: hk,
        seq: n,
        seq_kv: n_kv,
        dim: d,
        layout: layout.unwrap_or(AttnLayout::Bhsd),
        strides,
    })
}

/// The `[b, h, s]` strides of a 4-D attention tensor that the strided programs read in place: the head
/// dim contiguous (FlashAttention's rule) and no negative stride; else an error naming the tensor
/// and its strides. A dimension of one element takes any stride (it is never stepped along).
pub(crate) fn attn_tensor_strides(t: &View) -> Result<[usize; 3], ApiError> {
    let bad = |why: &str| {
        ApiError::Value(format!(
            "{} strides {:?} (elements, for shape {}): {why}",
            t.name,
            t.strides,
            t.dims()
        ))
    };
    if t.shape[3] > 1 && t.strides[3] != 1 {
        return Err(bad("the head dim (last) must be contiguous, stride 1"));
    }
    let mut st = [0usize; 3];
    for (i, s) in st.iter_mut().enumerate() {
        *s = match usize::try_from(t.strides[i]) {
            _ if t.shape[i] <= 1 => 0,
            Ok(x) => x,
            Err(_) => return Err(bad("negative strides are not read in place")),
        };
    }
    Ok(st)
}

/// [`disjoint`] for strided tensors: the byte ranges from each first element to its last.
fn disjoint_spans(out: &View, inputs: &[&View]) -> Result<(), ApiError> {
    let range = |v: &View| -> Result<(u64, u64), ApiError> {
        let st = attn_tensor_strides(v)?;
        let shape = [v.shape[0], v.shape[1], v.shape[2], v.shape[3]];
        let n = kittens_kernels::attn::strides::span(shape, st)
            .map_err(|e| ApiError::Value(e.to_string()))?;
        Ok((v.ptr, v.ptr.saturating_add(n as u64 * v.elem)))
    };
    let (o0, o1) = range(out)?;
    for v in inputs {
        let (i0, i1) = range(v)?;
        if !(out.planned || v.planned) && o0 < i1 && i0 < o1 && o0 < o1 && i0 < i1 {
            return Err(ApiError::Value(format!(
                "{} overlaps {} in memory; pass a separate output array",
                out.name, v.name
            )));
        }
    }
    Ok(())
}
