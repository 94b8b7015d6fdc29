//! Which GEMM shapes a benchmark runs, for any GEMM benchmark (bf16 or another dtype): `MxNxK` lists,
//! square sizes, and the built-in sweeps; and the summary figure of a sweep, the geometric mean of
//! the ratio to the vendor library. No CUDA here: parsing and lists only.

use std::fmt;

/// One GEMM problem `C (M×N) = A (M×K) · B`.
pub type Shape = (usize, usize, usize);

/// A built-in list of shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// The GEMMs of Llama-style layers: M ∈ {4096, 8192, 16384} tokens (and the small batches
    /// M ∈ {16, 64, 256}) times (N, K) of the attention projections (4096×4096, the fused QKV of
    /// grouped-query attention 6144×4096), the MLP (4096×14336 down, 28672×4096 fused gate and up) of
    /// an 8B model, and a 70B model's 8192×8192, 57344×8192 and 8192×28672.
    Llm,
    /// Squares 1024, 2048, 3000, 4096, 8192, 16384 (3000: a size that is no multiple of the block).
    Squares,
}

/// (N, K) of [`Sweep::Llm`].
pub const LLM_NK: [(usize, usize); 7] = [
    (4096, 4096),
    (6144, 4096),
    (4096, 14336),
    (28672, 4096),
    (8192, 8192),
    (57344, 8192),
    (8192, 28672),
];
/// Token counts of [`Sweep::Llm`]: the prefill batches, then the small (decode-like) ones.
pub const LLM_M: [usize; 6] = [4096, 8192, 16384, 16, 64, 256];
/// Sizes of [`Sweep::Squares`].
pub const SQUARES: [usize; 6] = [1024, 2048, 3000, 4096, 8192, 16384];

impl Sweep {
    pub fn shapes(self) -> Vec<Shape> {
        match self {
            Sweep::Llm => LLM_M
                .iter()
                .flat_map(|&m| LLM_NK.iter().map(move |&(n, k)| (m, n, k)))
                .collect(),
            Sweep::Squares => SQUARES.iter().map(|&s| (s, s, s)).collect(),
        }
    }
}

impl std::str::FromStr for Sweep {
    type Err = ShapeError;
    fn from_str(s: &str) -> Result<Self, ShapeError> {
        match s.trim() {
            "llm" => Ok(Sweep::Llm),
            "squares" => Ok(Sweep::Squares),
            other => Err(ShapeError(format!(
                "sweep `{other}`: expected `llm` or `squares`"
            ))),
        }
    }
}

/// A shape list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);

/// Largest extent accepted for one dimension: the kernels' launchers take 32-bit sizes.
pub const MAX_DIM: usize = i32::MAX as usize;

/// `MxNxK` → (M, N, K), each in `1..=MAX_DIM`.
pub fn parse_shape(s: &str) -> Result<Shape, ShapeError> {
    let s = s.trim();
    let bad = |why: &str| ShapeError(format!("shape `{s}`: {why}"));
    let parts: Vec<&str> = s.split('x').collect();
    let [m, n, k] = parts[..] else {
        return Err(bad("expected MxNxK"));
    };
    let dim = |p: &str| -> Result<usize, ShapeError> {
        let v: usize = p.trim().parse().map_err(|_| bad("expected MxNxK"))?;
        if v == 0 || v > MAX_DIM {
            return Err(bad(&format!("every extent must be in 1..={MAX_DIM}")));
        }
        Ok(v)
    };
    Ok((dim(m)?, dim(n)?, dim(k)?))
}

/// `MxNxK,MxNxK,…`; empty entries are refused.
pub fn parse_shapes(list: &str) -> Result<Vec<Shape>, ShapeError> {
    list.split(',').map(parse_shape).collect()
}

/// Geometric mean of the finite, positive values; `None` when there is none.
pub fn geomean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0f64, 0usize);
    for v in values {
        if v.is_finite() && v > 0.0 {
            sum += v.ln();
            n += 1;
        }
    }
    (n > 0).then(|| (sum / n as f64).exp())
}

/// `MxNxK` for display.
pub struct ShapeName(pub Shape);

impl fmt::Display for ShapeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, n, k) = self.0;
        write!(f, "{m}x{n}x{k}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_bad_ones_say_why() {
        assert_eq!(parse_shape(" 1000x1032x520 "), Ok((1000, 1032, 520)));
        assert_eq!(
            parse_shapes("16x4096x4096,3000x3000x777"),
            Ok(vec![(16, 4096, 4096), (3000, 3000, 777)])
        );
        for bad in ["10x10", "axbxc", "0x8x8", "1x2x3x4", "", "8x8x4294967296"] {
            assert!(parse_shape(bad).is_err(), "{bad}");
        }
        assert!(parse_shape("0x8x8").unwrap_err().0.contains("1..="));
        assert!(parse_shapes("8x8x8,").is_err());
    }

    /// The LLM sweep is the three prefill batches and three small ones, each with the seven (N, K).
    #[test]
    fn llm_sweep_lists_every_layer_gemm() {
        let s = Sweep::Llm.shapes();
        assert_eq!(s.len(), 42);
        assert!(s.contains(&(16384, 57344, 8192)) && s.contains(&(16, 8192, 28672)));
        assert_eq!("llm".parse::<Sweep>(), Ok(Sweep::Llm));
        assert!("big".parse::<Sweep>().is_err());
        assert_eq!(Sweep::Squares.shapes()[2], (3000, 3000, 3000));
    }

    #[test]
    fn geomean_of_ratios() {
        let g = geomean([0.5, 2.0, f64::NAN, 1.0]).unwrap();
        assert!((g - 1.0).abs() < 1e-12);
        let g = geomean([0.9, 1.1]).unwrap();
        assert!((g - (0.99f64).sqrt()).abs() < 1e-12);
        assert_eq!(geomean([f64::NAN]), None);
    }
}
