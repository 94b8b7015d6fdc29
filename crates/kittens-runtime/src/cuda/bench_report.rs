//! The GEMM benchmarks' report (`super::bench` for BF16 against cuBLAS, `super::bench_fp8` for FP8
//! against cuBLASLt): one row per shape and block, the compiled kernels, and the summary (geometric
//! means of the ratio to the vendor library over the timed rows that passed).

use kittens_kernels::gemm::BLayout;
use serde::Serialize;

use super::bench_shapes::{geomean, Shape, ShapeName};
use super::bench_time::Timing;
use super::gemm_pad::PadPlan;
use super::{CudaCompileReport, CudaError};

/// How one row ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowStatus {
    /// Checked (and timed, for a timed row) and correct.
    Ok,
    /// Ran, but the output failed the correctness check.
    Failed,
    /// Did not run to the end: the error says why (the other figures are NaN, null in JSON).
    Error,
}

/// One problem size and block's results.
#[derive(Clone, Debug, Serialize)]
pub struct GemmBenchRow {
    pub status: RowStatus,
    /// Why the row could not run (status `error`).
    pub error: Option<String>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// The block of C per thread block, `ROWSxCOLS`, with `/kS` when K is cut in `S` slices.
    pub tile: Option<String>,
    /// K slices (1: no split-K).
    pub split_k: u32,
    /// Whether `tile` is the one the shape-aware configuration chooses for this shape.
    pub chosen: bool,
    /// The cost model's time for this block, µs (`shapes::estimate_us`).
    pub model_us: f64,
    /// Operands that went through a padded copy, and the copies' own median time (NaN: none).
    pub padded: PadPlan,
    pub pad_ms: f64,
    /// Our time includes the padded copies.
    pub ours_ms: f64,
    pub cublas_ms: f64,
    pub ours_tflops: f64,
    pub cublas_tflops: f64,
    /// ours / cuBLAS throughput, measured in the same run.
    pub ratio: f64,
    /// Timed launches per implementation.
    pub iters: usize,
    /// ‖ours − cuBLAS‖_F / ‖cuBLAS‖_F over all of C.
    pub rel_err_vs_cublas: f64,
    /// max |ours − cuBLAS| / max |cuBLAS|.
    pub max_err_vs_cublas: f64,
    /// max |x − ref| / rms(ref) over the spot-checked entries, ref an f64 dot product.
    pub spot_err_ours: f64,
    pub spot_err_cublas: f64,
    /// Elements of our C still holding the NaN poison (never written) or otherwise not finite.
    pub non_finite: usize,
    pub input_copies: usize,
    pub passed: bool,
}

/// One compiled block shape.
#[derive(Clone, Debug, Serialize)]
pub struct KernelInfo {
    pub tile: String,
    pub entry: String,
    pub stages: u32,
    pub compile: CudaCompileReport,
}

/// Geometric means of the ratio to cuBLAS over timed rows that passed.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Over the rows of the chosen blocks.
    pub geomean_ratio: Option<f64>,
    pub min_ratio: Option<f64>,
    /// The shape of the smallest ratio.
    pub worst: Option<String>,
    /// Per block (with `TileChoice::Each`): (block, geometric mean, shapes).
    pub per_tile: Vec<(String, f64, usize)>,
    /// With `TileChoice::Each`: the best block of every shape (what a perfect choice would reach).
    pub best_of_geomean: Option<f64>,
    pub timed_rows: usize,
    pub failed_rows: usize,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct GemmBenchReport {
    pub device: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub l2_bytes: u64,
    pub driver_version: i32,
    pub cublas: String,
    pub b_layout: BLayout,
    pub kernels: Vec<KernelInfo>,
    pub warmup: usize,
    pub budget_ms: f64,
    pub timing: Timing,
    pub rows: Vec<GemmBenchRow>,
    /// Correctness-only shapes (timings NaN).
    pub checks: Vec<GemmBenchRow>,
    pub summary: Summary,
}

/// The geometric means of a run.
pub fn summarise(rows: &[GemmBenchRow], checks: &[GemmBenchRow]) -> Summary {
    let good = |r: &&GemmBenchRow| r.passed && r.ratio.is_finite();
    let chosen: Vec<&GemmBenchRow> = rows.iter().filter(|r| r.chosen).filter(good).collect();
    let worst = chosen
        .iter()
        .min_by(|a, b| a.ratio.total_cmp(&b.ratio))
        .copied();
    let mut tiles: Vec<String> = rows.iter().filter_map(|r| r.tile.clone()).collect();
    tiles.sort();
    tiles.dedup();
    let per_tile = if rows.iter().all(|r| r.chosen) {
        Vec::new()
    } else {
        tiles
            .iter()
            .filter_map(|t| {
                let v: Vec<f64> = rows
                    .iter()
                    .filter(good)
                    .filter(|r| r.tile.as_deref() == Some(t.as_str()))
                    .map(|r| r.ratio)
                    .collect();
                geomean(v.iter().copied()).map(|g| (t.clone(), g, v.len()))
            })
            .collect()
    };
    let mut shapes: Vec<Shape> = rows.iter().map(|r| (r.m, r.n, r.k)).collect();
    shapes.dedup();
    let best_of = geomean(shapes.iter().map(|&s| {
        rows.iter()
            .filter(good)
            .filter(|r| (r.m, r.n, r.k) == s)
            .map(|r| r.ratio)
            .fold(f64::NAN, f64::max)
    }));
    Summary {
        geomean_ratio: geomean(chosen.iter().map(|r| r.ratio)),
        min_ratio: worst.map(|r| r.ratio),
        worst: worst.map(|r| ShapeName((r.m, r.n, r.k)).to_string()),
        per_tile,
        best_of_geomean: best_of,
        timed_rows: rows.len(),
        failed_rows: rows.iter().chain(checks).filter(|r| !r.passed).count(),
    }
}

impl GemmBenchRow {
    /// A row that could not run: `error` says why; every figure is NaN.
    pub fn error((m, n, k): Shape, error: &CudaError) -> GemmBenchRow {
        GemmBenchRow {
            status: RowStatus::Error,
            error: Some(error.to_string()),
            m,
            n,
            k,
            tile: None,
            split_k: 1,
            chosen: true,
            model_us: f64::NAN,
            padded: PadPlan::default(),
            pad_ms: f64::NAN,
            ours_ms: f64::NAN,
            cublas_ms: f64::NAN,
            ours_tflops: f64::NAN,
            cublas_tflops: f64::NAN,
            ratio: f64::NAN,
            iters: 0,
            rel_err_vs_cublas: f64::NAN,
            max_err_vs_cublas: f64::NAN,
            spot_err_ours: f64::NAN,
            spot_err_cublas: f64::NAN,
            non_finite: 0,
            input_copies: 0,
            passed: false,
        }
    }

    /// "ok", "FAILED", or "ERROR: why".
    pub fn verdict(&self) -> String {
        match (self.status, &self.error) {
            (RowStatus::Ok, _) => "ok".into(),
            (RowStatus::Failed, _) => "FAILED".into(),
            (RowStatus::Error, e) => format!("ERROR: {}", e.as_deref().unwrap_or("unknown")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row that cannot run carries its error and fails; its figures are null in JSON.
    #[test]
    fn an_error_row_reports_why_and_fails() {
        let e = CudaError::Invalid("GEMM 3000x1000x777: out of memory".into());
        let row = GemmBenchRow::error((3000, 1000, 777), &e);
        assert!(!row.passed && row.status == RowStatus::Error);
        assert!(row.verdict().contains("out of memory"), "{}", row.verdict());
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["status"], "error");
        assert!(json["error"].as_str().unwrap().contains("777"));
        assert!(json["ours_tflops"].is_null() && json["spot_err_ours"].is_null());
    }

    fn row(shape: Shape, tile: &str, ratio: f64, chosen: bool, passed: bool) -> GemmBenchRow {
        let mut r = GemmBenchRow::error(shape, &CudaError::Invalid(String::new()));
        (r.status, r.error, r.passed) = (RowStatus::Ok, None, passed);
        (r.tile, r.ratio, r.chosen) = (Some(tile.into()), ratio, chosen);
        r
    }

    /// The summary's geometric mean is over the chosen blocks' correct rows; the best-of figure takes
    /// each shape's best block; a failed row counts as failed, not in the mean.
    #[test]
    fn summary_means_chosen_rows_and_best_blocks() {
        let (s1, s2) = ((4096, 4096, 4096), (16, 4096, 4096));
        let rows = [
            row(s1, "128x256", 1.0, true, true),
            row(s1, "128x128", 0.81, false, true),
            row(s2, "128x256", 0.25, false, true),
            row(s2, "64x128", 0.64, true, true),
            row(s2, "128x128", 2.0, false, false),
        ];
        let s = summarise(&rows, &[]);
        assert!((s.geomean_ratio.unwrap() - 0.8).abs() < 1e-12, "{s:?}");
        assert_eq!(s.worst.as_deref(), Some("16x4096x4096"));
        assert_eq!(s.min_ratio, Some(0.64));
        assert!((s.best_of_geomean.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(s.failed_rows, 1);
        let t: Vec<&str> = s.per_tile.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(t, ["128x128", "128x256", "64x128"]);
        assert!((s.per_tile[1].1 - 0.5).abs() < 1e-12);
    }
}
