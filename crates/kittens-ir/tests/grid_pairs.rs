//! `KernelBuilder::pair_long_short`: the rank it gives each position is a bijection, and the
//! persistent lowering's assignment of paired launch ids to blocks balances tiles whose cost falls
//! with their rank (causal attention's query blocks), where the plain round-robin does not.

use kittens_ir::{Env, KernelBuilder, Schedule};

fn ranks(n: i64) -> Vec<i64> {
    let mut k = KernelBuilder::new("pairs", Schedule::Plain { waves: 1 });
    let n_e = k.param("n");
    let rank = k.pair_long_short(&k.block(0), &n_e);
    (0..n)
        .map(|t| {
            let env = Env {
                params: &[n],
                vars: &[],
                block: &[t],
                wave: 0,
            };
            rank.eval(&env).expect("rank evaluates")
        })
        .collect()
}

#[test]
fn ranks_alternate_long_and_short_and_cover_every_position() {
    assert_eq!(ranks(6), vec![0, 5, 1, 4, 2, 3]);
    assert_eq!(ranks(5), vec![0, 4, 1, 3, 2]);
    assert_eq!(ranks(1), vec![0]);
    for n in 1..=300 {
        let mut r = ranks(n);
        r.sort_unstable();
        assert_eq!(r, (0..n).collect::<Vec<_>>(), "n = {n}");
    }
}

#[test]
fn the_grid_is_marked_paired() {
    let mut k = KernelBuilder::new("pairs", Schedule::Plain { waves: 1 });
    let n = k.param("n");
    k.grid(vec![n.clone()], kittens_ir::GridOrder::RowMajor);
    let plain = k.finish().expect("an empty kernel builds");
    assert!(!plain.grid.paired);
    let mut k = KernelBuilder::new("pairs", Schedule::Plain { waves: 1 });
    let n = k.param("n");
    k.grid(vec![n.clone()], kittens_ir::GridOrder::RowMajor);
    let _ = k.pair_long_short(&k.block(0), &n);
    assert!(k.finish().expect("an empty kernel builds").grid.paired);
}

/// Busiest block's work over the mean, for `rows` rows of `n` query blocks (rank `r` costs `n − r`
/// key blocks, as causal attention's do) on `blocks` persistent blocks; `paired` as the CUDA
/// lowering assigns launch ids (`2(b + ⌊r/2⌋·G) + r mod 2`), else round-robin (`b + r·G`).
fn busiest_over_mean(rows: usize, n: usize, blocks: usize, paired: bool) -> f64 {
    let rank: Vec<usize> = ranks(n as i64).iter().map(|&r| r as usize).collect();
    let cost = |id: usize| if paired { n - rank[id % n] } else { id % n + 1 };
    let tiles = rows * n;
    let mut load = vec![0usize; blocks];
    for (b, l) in load.iter_mut().enumerate() {
        for round in 0.. {
            let id = if paired && tiles > blocks {
                2 * (b + (round / 2) * blocks) + round % 2
            } else {
                b + round * blocks
            };
            if id >= tiles {
                break;
            }
            *l += cost(id);
        }
    }
    let total: usize = load.iter().sum();
    assert_eq!(total, rows * n * (n + 1) / 2, "every tile ran once");
    *load.iter().max().unwrap() as f64 / (total as f64 / blocks as f64)
}

#[test]
fn pairs_balance_causal_query_blocks_on_132_blocks() {
    // B16 H16 N2048 and B2 H24 N16384 with 128-row query blocks, the H100's 132 SMs.
    for (rows, n) in [(256, 16), (48, 128), (256, 32), (8, 256)] {
        let rr = busiest_over_mean(rows, n, 132, false);
        let paired = busiest_over_mean(rows, n, 132, true);
        assert!(paired <= 1.04, "rows {rows} n {n}: paired {paired:.3}");
        assert!(
            paired < rr,
            "rows {rows} n {n}: paired {paired:.3} rr {rr:.3}"
        );
    }
    assert!(busiest_over_mean(256, 16, 132, false) > 1.15);
    assert!(busiest_over_mean(48, 128, 132, false) > 1.15);
}
