//! Data-dependent indices: `Expr::Elem` (an element of an `i32` global) and a global's per-block
//! `Clip`, the two pieces a packed (varlen) batch needs. A segmented scale over a packed tensor: block
//! `(b, t)` scales rows `cu[b] + 16t ..` of sequence `b` by `b + 1`, clipped at `cu[b + 1]`, so rows of
//! the next sequence are neither read into its tile nor overwritten.

use kittens_hw::dtype::DType::{F32, I32};
use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};
use kittens_ir::*;
use kittens_tile::{BaseShape, Layout};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ROWS: u32 = 16;
const COLS: i64 = 32;

/// Block `(i, t)` works on sequence `b = batch - 1 - i` (later sequences first, so that a write past a
/// sequence's end would land after the next sequence's own and show): `y[r] = x[r]·w[b]` for its rows
/// `r`, and `s[b, t] = Σ_r x[r]` (the column sums of its clipped tile, which would take in the next
/// sequence's rows if the clip did not hold on reads).
fn segmented_scale() -> Kernel {
    let mut k = KernelBuilder::new("segmented_scale", Schedule::Plain { waves: 1 });
    let [batch, total, max_len] = ["batch", "total", "max_len"].map(|n| k.param(n));
    let dims = [("s", total.clone()), ("c", Expr::c(COLS))];
    let x = k.global("x", F32, &dims, Access::Read);
    let y = k.global("y", F32, &dims, Access::ReadWrite);
    let w = k.global(
        "w",
        F32,
        &[("b", batch.clone()), ("c", Expr::c(COLS))],
        Access::Read,
    );
    let tiles = max_len.ceil_div(i64::from(ROWS));
    let sums = [
        ("b", batch.clone()),
        ("t", tiles.clone()),
        ("c", Expr::c(COLS)),
    ];
    let s = k.global("s", F32, &sums, Access::Write);
    let cu = k.global("cu", I32, &[("b", &batch + 1)], Access::Read);
    k.grid(vec![batch.clone(), tiles], GridOrder::RowMajor);
    let (b, t) = (&batch - 1 - k.block(0), k.block(1));
    let (start, end) = (Expr::elem(cu, b.clone()), Expr::elem(cu, &b + 1));
    k.clip(x, 0, end.clone());
    k.clip(y, 0, end);
    let tile = k.tile("x", F32, ROWS, COLS as u32, Layout::Row, BaseShape::S16X16);
    let wv = k.col_vec("w", tile, F32);
    let sum = k.col_vec("sum", tile, F32);
    let view = |g| {
        k.gview(
            g,
            vec![&start + &t * i64::from(ROWS), Expr::c(0)],
            0,
            1,
            ROWS,
            COLS as u32,
        )
    };
    let (xv, yv) = (view(x), view(y));
    k.load_global(tile, xv);
    k.col_sum(sum, tile);
    k.store(
        k.gview(
            s,
            vec![b.clone(), t.clone(), Expr::c(0)],
            1,
            2,
            1,
            COLS as u32,
        ),
        sum,
    );
    k.load_global(wv, k.gview(w, vec![b, Expr::c(0)], 0, 1, 1, COLS as u32));
    k.mul_col(tile, tile, wv);
    k.store(yv, tile);
    k.finish().expect("the kernel builds")
}

fn uniform(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// Runs the kernel on sequence lengths `lens` packed into `total` rows (the rows past the last
/// sequence are padding no block may touch) and checks every output against f64 loops.
fn check(kernel: &Kernel, lens: &[usize], total: usize, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let c = COLS as usize;
    let mut cu = vec![0usize];
    for l in lens {
        cu.push(cu.last().unwrap() + l);
    }
    assert!(*cu.last().unwrap() <= total);
    let (batch, max_len) = (lens.len(), lens.iter().copied().max().unwrap_or(0).max(1));
    let tiles = max_len.div_ceil(ROWS as usize);
    let x = uniform(&mut rng, total * c);
    let y0 = uniform(&mut rng, total * c);
    let w = uniform(&mut rng, batch * c);
    let cu_f: Vec<f32> = cu.iter().map(|&v| v as f32).collect();
    let mut tensors = vec![
        x.clone(),
        y0.clone(),
        w.clone(),
        vec![f32::NAN; batch * tiles * c],
        cu_f,
    ];
    let params = [batch as i64, total as i64, max_len as i64];
    interp::run(kernel, &params, &mut tensors).expect("the kernel runs");
    for r in 0..total {
        let seq = (0..batch).find(|&b| (cu[b]..cu[b + 1]).contains(&r));
        for j in 0..c {
            let want = match seq {
                Some(b) => (x[r * c + j] as f64 * w[b * c + j] as f64) as f32,
                None => y0[r * c + j],
            };
            assert_eq!(
                tensors[1][r * c + j],
                want,
                "y[{r}, {j}] (sequence {seq:?}), lens {lens:?}"
            );
        }
    }
    for b in 0..batch {
        for t in 0..tiles {
            let rows = (cu[b] + t * ROWS as usize).min(cu[b + 1])
                ..(cu[b] + (t + 1) * ROWS as usize).min(cu[b + 1]);
            for j in 0..c {
                let want: f64 = rows.clone().map(|r| x[r * c + j] as f64).sum();
                let got = tensors[3][(b * tiles + t) * c + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "s[{b}, {t}, {j}] = {got}, want {want}, lens {lens:?}"
                );
            }
        }
    }
}

#[test]
fn packed_sequences_read_and_write_only_their_rows() {
    let kernel = segmented_scale();
    check(&kernel, &[1, 17, 0, 40, 5], 70, 1);
    check(&kernel, &[33], 40, 2);
    check(&kernel, &[16, 16, 3], 35, 3);
}

#[test]
fn index_reads_round_trip_through_a_kernel_file() {
    let kernel = segmented_scale();
    let text = serial::to_json(&kernel);
    assert!(
        text.contains("\"elem\"") && text.contains("\"clip\""),
        "{text}"
    );
    let back = serial::from_json(&text).expect("reads back");
    assert_eq!(back, kernel);
    check(&back, &[9, 0, 21], 31, 4);
}

#[test]
fn index_reads_are_refused_where_no_block_runs_or_from_a_float_tensor() {
    let kernel = segmented_scale();
    let text = serial::to_json(&kernel);
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    // An index read in a shape: evaluated before any block runs.
    doc["kernel"]["globals"][0]["dims"][0] = serde_json::json!({"elem": [4, {"const": 0}]});
    let e = serial::from_json(&doc.to_string()).unwrap_err().to_string();
    assert!(e.contains("index read of global id 4"), "{e}");
    // An index read of the f32 tensor `w`.
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["kernel"]["globals"][0]["clip"]["end"] = serde_json::json!({"elem": [2, {"const": 0}]});
    let e = serial::from_json(&doc.to_string()).unwrap_err().to_string();
    assert!(
        e.contains("index read of global id 2") && e.contains("i32"),
        "{e}"
    );
}

#[test]
fn host_evaluation_sees_an_index_read_as_unknown() {
    let e = Expr::elem(GlobalId(0), 1) + 2;
    let env = Env {
        params: &[],
        vars: &[],
        block: &[],
        wave: 0,
    };
    assert_eq!(e.eval(&env), None);
    assert_eq!(
        e.eval_in(&env, &|g, i| Some(10 * i64::from(g.0) + i + 5)),
        Some(8)
    );
    assert!(e.reads_memory() && !(Expr::c(1) + 2).reads_memory());
}

#[test]
fn i32_buffers_round_trip_exactly() {
    let v = [0.0f32, 1.0, 17.0, 300.0, 16_777_216.0, -5.0];
    let bytes = to_bytes(&v, I32, Rounding::Rtne);
    assert_eq!(bytes.len(), 4 * v.len());
    assert_eq!(&bytes[4..8], &1i32.to_le_bytes());
    assert_eq!(from_bytes(&bytes, I32).unwrap(), v.to_vec());
}

/// A loop whose trip count reads the offsets (a packed sequence's length in 16-row steps, the varlen
/// attention's key walk): the schedule analysis reads every `i32` element `i` as `i·E` with `E` one more
/// size after the parameters, enumerated past the tile size, so `verify` traces every trip count; given
/// the parameters alone, the bound stays unknown and the analysis says which expression it could not read.
#[test]
fn loop_bounds_that_read_elements_are_verified_over_element_sizes() {
    let mut k = KernelBuilder::new("walk", Schedule::Plain { waves: 2 });
    let batch = k.param("batch");
    let cu = k.global("cu", I32, &[("b", &batch + 1)], Access::Read);
    k.grid(vec![batch.clone()], GridOrder::RowMajor);
    let b = k.block(0);
    let len = Expr::elem(cu, &b + 1) - Expr::elem(cu, b.clone());
    k.for_range("j", 0, len.ceil_div(16), |k, _| k.barrier());
    let kernel = k.finish().expect("the kernel builds");
    let sets = analysis::representative_params(&kernel);
    assert!(sets.iter().all(|s| s.len() == kernel.params.len() + 1));
    assert!(sets.iter().any(|s| s[1] > 2 * 16), "{sets:?}");
    analysis::verify(&kernel).expect("every trip count verified");
    let opts = analysis::Options {
        params: vec![2],
        ..Default::default()
    };
    let e = analysis::analyze_launch(&kernel, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("g0["), "{e}");
}
