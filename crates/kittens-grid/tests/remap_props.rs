//! Property tests for the grid remaps: every remap is a bijection on its grid, for many sizes including
//! block counts that are not multiples of XCDs × C, and Algorithm 1's tail keeps launch order.

use kittens_grid::remap::{group_m, head_first, row_major, xcd_chunk, xcd_swizzle, GridOrder};
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn assert_bijection(n: u64, f: impl Fn(u64) -> u64, what: &str) {
    let mut seen = vec![false; n as usize];
    for id in 0..n {
        let v = f(id);
        assert!(v < n, "{what}: id {id} -> {v} outside 0..{n}");
        assert!(!seen[v as usize], "{what}: {v} hit twice");
        seen[v as usize] = true;
    }
}

fn random_cases(seed: u64, count: usize) -> Vec<(u64, u64, u64, u64, u64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let rows = rng.gen_range(1..=90);
            let cols = rng.gen_range(1..=90);
            let xcd = [1, 2, 4, 8, 3][rng.gen_range(0..5)];
            let window = rng.gen_range(1..=12);
            let chunk = rng.gen_range(1..=600);
            (rows, cols, xcd, window, chunk)
        })
        .collect()
}

#[test]
fn xcd_chunk_is_a_bijection() {
    for (rows, cols, xcd, _, chunk) in random_cases(1, 400) {
        let n = rows * cols;
        assert_bijection(
            n,
            |i| xcd_chunk(i, n, xcd, chunk),
            &format!("chunk n={n} x={xcd} c={chunk}"),
        );
    }
}

#[test]
fn tile_orders_are_bijections() {
    let enc = |(r, c): (u64, u64), cols: u64| r * cols + c;
    for (rows, cols, xcd, window, chunk) in random_cases(2, 400) {
        let n = rows * cols;
        let tag = format!("{rows}x{cols} x={xcd} W={window} C={chunk}");
        assert_bijection(
            n,
            |i| enc(group_m(i, rows, cols, window), cols),
            &format!("group_m {tag}"),
        );
        assert_bijection(
            n,
            |i| enc(xcd_swizzle(i, rows, cols, xcd, window, chunk), cols),
            &format!("xcd {tag}"),
        );
        assert_bijection(
            n,
            |i| enc(row_major(i, cols), cols),
            &format!("row-major {tag}"),
        );
        for o in [
            GridOrder::RowMajor,
            GridOrder::GroupM {
                window: window as u32,
            },
            GridOrder::XcdSwizzle {
                xcds: xcd as u32,
                window: window as u32,
                chunk: chunk as u32,
            },
        ] {
            assert_bijection(
                n,
                |i| enc(o.tile(i, rows, cols).expect("2-d"), cols),
                &format!("{o:?} {tag}"),
            );
        }
    }
}

/// The paper's shapes, where the chunk does not divide the grid: 9216/192×256 is 48×36 = 1728 blocks
/// (C25: 1728 = 8·200 + 128), 14592 is 76×57 = 4332 blocks (C64: 4332 = 8·512 + 236; C542: 8·542 > 4332).
#[test]
fn paper_shapes_are_bijections() {
    for (rows, cols, w, c) in [
        (48, 36, 5, 25),
        (48, 36, 7, 216),
        (76, 57, 8, 542),
        (76, 57, 8, 64),
    ] {
        let n = rows * cols;
        assert_bijection(
            n,
            |i| {
                let (r, q) = xcd_swizzle(i, rows, cols, 8, w, c);
                r * cols + q
            },
            &format!("{rows}x{cols} W{w}/C{c}"),
        );
    }
}

/// Algorithm 1 lines 5–6: ids at or past the aligned prefix map to themselves; inside the prefix each
/// XCD (`id mod n`) receives whole chunks of `C` consecutive logical ids.
#[test]
fn tail_keeps_order_and_prefix_is_chunked() {
    for (rows, cols, xcd, _, chunk) in random_cases(3, 300) {
        let n = rows * cols;
        let limit = n / (xcd * chunk) * (xcd * chunk);
        for id in limit..n {
            assert_eq!(xcd_chunk(id, n, xcd, chunk), id);
        }
        for id in 0..limit {
            let logical = xcd_chunk(id, n, xcd, chunk);
            assert_eq!(
                (logical / chunk) % xcd,
                id % xcd,
                "n={n} x={xcd} c={chunk} id={id}"
            );
        }
    }
}

/// MI300X-attn §4.1: the q blocks of one (batch, head) all run on one XCD, for every (batch, head) inside
/// the aligned prefix; the map is a bijection onto (batch, head, q_block) for every size.
#[test]
fn head_first_keeps_a_head_on_one_xcd() {
    let mut rng = SmallRng::seed_from_u64(4);
    for _ in 0..200 {
        let (b, h, q, x) = (
            rng.gen_range(1..5),
            rng.gen_range(1..40),
            rng.gen_range(1..50),
            8,
        );
        let n = b * h * q;
        assert_bijection(
            n,
            |i| {
                let (bb, hh, qq) = head_first(i, b, h, q, x);
                assert!(bb < b && hh < h && qq < q);
                (bb * h + hh) * q + qq
            },
            "head_first",
        );
        let mut xcd_of = vec![None; (b * h) as usize];
        let aligned_heads = (b * h) / x * x;
        for id in 0..n {
            let (bb, hh, _) = head_first(id, b, h, q, x);
            let bh = (bb * h + hh) as usize;
            if (bh as u64) < aligned_heads {
                let prev = xcd_of[bh].get_or_insert(id % x);
                assert_eq!(*prev, id % x, "b={b} h={h} q={q}: head {bh} on two XCDs");
            }
        }
    }
}
