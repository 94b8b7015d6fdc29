//! The L2 cache model (module `l2`; the NVRTC disk cache is `kittens_runtime::cuda::cache`) for GEMM grid
//! orders on chiplet GPUs (per-XCD L2 + shared LLC) and single-L2 GPUs.
//!
//! What is simulated (HipKittens §3.4 "Cost model"):
//! - blocks are launched in id order and handed to XCDs round-robin (`id mod n_xcd`), one block per CU
//!   per round, so a round is `compute_units` consecutive launch ids; the grid order decides which tile
//!   each id computes;
//! - within a round all blocks advance through K in lockstep; at each k-step every block reads its A
//!   k-slice (`tile_m × tile_k`) and its B k-slice (`tile_n × tile_k`; B is stored N×K, K contiguous,
//!   as in HipKittens Fig. 21's `mma_ABt`) through its XCD's L2;
//! - caches are fully associative LRU over **segments**: one segment is one operand k-slice of one tile
//!   row or column (24 KiB for a 192×64 bf16 A slice). Every line of a slice is touched together by the
//!   blocks that use it, so at line granularity they would share one recency and hit or miss together;
//!   treating the slice as the unit is what makes the model fast (14592³ is ~2 M accesses);
//! - L2 misses go to the LLC (when the GPU has one), LLC misses to HBM;
//! - modeled bandwidth is HipKittens Eq. 1: `LLC_bw × LLC_hit + L2_bw × L2_hit`.
//!
//! What it ignores is listed in docs/grid.md: the C write-back, set conflicts and address hashing,
//! blocks drifting out of lockstep, prefetch depth, the L1/LDS, and any timing at all.

use crate::GridError;
use kittens_hw::Gpu;
use serde::Serialize;

use crate::remap::GridOrder;

/// A GEMM problem and its block tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GemmShape {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub tile_m: u64,
    pub tile_n: u64,
    pub tile_k: u64,
    /// Bytes per input element (2 for bf16).
    pub elem_bytes: u64,
}

impl GemmShape {
    /// A bf16 GEMM `m × n × k` with a `tile = (tile_m, tile_n, tile_k)` block tile.
    pub fn bf16(m: u64, n: u64, k: u64, tile: (u64, u64, u64)) -> Self {
        GemmShape {
            m,
            n,
            k,
            tile_m: tile.0,
            tile_n: tile.1,
            tile_k: tile.2,
            elem_bytes: 2,
        }
    }

    fn validate(&self) -> Result<(), GridError> {
        let dims = [
            self.m,
            self.n,
            self.k,
            self.tile_m,
            self.tile_n,
            self.tile_k,
            self.elem_bytes,
        ];
        if dims.contains(&0) {
            return Err(GridError::Invalid(
                "GEMM sizes, tiles and element size must be positive".into(),
            ));
        }
        Ok(())
    }

    /// Tile rows along M and columns along N of the output grid (partial edge tiles count).
    pub fn grid(&self) -> (u64, u64) {
        (self.m.div_ceil(self.tile_m), self.n.div_ceil(self.tile_n))
    }

    /// Number of k-steps.
    pub fn ksteps(&self) -> u64 {
        self.k.div_ceil(self.tile_k)
    }

    /// Bytes of an operand k-slice: `extent` rows of the tile (clipped at the matrix edge) × the k-step
    /// (clipped at K).
    fn slice_bytes(&self, index: u64, tile: u64, full: u64, kstep: u64) -> u64 {
        let rows = tile.min(full - index * tile);
        let ks = self.tile_k.min(self.k - kstep * self.tile_k);
        rows * ks * self.elem_bytes
    }
}

/// The result of one simulation. Hit rates are fractions of requested bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct L2Report {
    pub gpu: String,
    pub order: String,
    /// L2 hits / L2 requests.
    pub l2_hit: f64,
    /// LLC hits / LLC requests (the L2 misses); 0 on GPUs without an LLC.
    pub llc_hit: f64,
    /// Bytes the L2s requested (all operand reads).
    pub l2_request_bytes: u64,
    /// Bytes read from HBM (LLC misses, or L2 misses without an LLC).
    pub hbm_bytes: u64,
    /// Compulsory bytes: A and B read once each.
    pub compulsory_bytes: u64,
    /// HipKittens Eq. 1 with the catalog's L2 and LLC peaks, TB/s.
    pub bandwidth_tbps: f64,
    /// Eq. 1 with the bandwidths HipKittens Table 4 uses ([`SEED_000_TABLE4_EQ1_TBPS`]), TB/s; only for
    /// the MI355X, the GPU they were fitted on.
    pub bandwidth_tbps_table4: Option<f64>,
    /// Phase spread of the CUs of an XCD, as a fraction of one block's duration (0: lockstep).
    pub stagger: f64,
    pub blocks: u64,
    pub rounds: u64,
}

/// Fully associative LRU over dense segment ids with a byte capacity; an intrusive doubly linked list
/// in arrays, so every access is O(1).
struct Lru {
    capacity: u64,
    used: u64,
    prev: Vec<u32>,
    next: Vec<u32>,
    size: Vec<u32>,
    present: Vec<bool>,
    head: u32,
    tail: u32,
}

const NIL: u32 = u32::MAX;

/// Most operand slices the model tracks: each cache keeps 13 bytes per slice id, so this bounds the
/// model's memory near 500 MB on a 9-cache GPU (65536³ with 192×256×64 tiles needs 0.6 M).
pub const MAX_SEGMENTS: u64 = 1 << 22;
/// Most output tiles of a grid: the model keeps 16 bytes per tile (65536² with 64×64 tiles is 2^20).
pub const MAX_TILES: u64 = 1 << 22;
/// Most block k-steps (tiles × k-steps), each two cache accesses: this bounds the model's run time to
/// well under a minute on one core (65536³ with 192×256×64 tiles is 0.67 · 2^27 block k-steps and
/// took ~20 s on the MI355X model; 14592³ is about 2^20).
pub const MAX_BLOCK_STEPS: u64 = 1 << 27;

/// Refuse a problem the model cannot hold or would take too long on, before allocating anything:
/// every count is computed in u128, so nothing wraps.
fn check_budgets(shape: &GemmShape, order: GridOrder) -> Result<(), GridError> {
    const MODEL: &str = "cache model";
    let (rows, cols) = shape.grid();
    let ks = shape.ksteps() as u128;
    let tiles = rows as u128 * cols as u128;
    let hint = "; use a larger --tile";
    GridError::check_budget("a grid", tiles, "tiles", MODEL, MAX_TILES, hint)?;
    let segments = (rows as u128 + cols as u128) * ks;
    GridError::check_budget(
        "a problem",
        segments,
        "operand slices",
        MODEL,
        MAX_SEGMENTS,
        hint,
    )?;
    let steps = tiles * ks;
    GridError::check_budget(
        "a run",
        steps,
        "block k-steps",
        MODEL,
        MAX_BLOCK_STEPS,
        hint,
    )?;
    order.check(rows, cols)?;
    let slice =
        shape.tile_m.max(shape.tile_n) as u128 * shape.tile_k as u128 * shape.elem_bytes as u128;
    if slice > u32::MAX as u128 {
        return Err(GridError::overflow(
            format!("an operand k-slice of {slice} bytes"),
            32,
        ));
    }
    let compulsory =
        (shape.m as u128 + shape.n as u128) * shape.k as u128 * shape.elem_bytes as u128;
    if compulsory > u64::MAX as u128 {
        return Err(GridError::overflow(
            format!(
                "the compulsory traffic (m + n)·k·{} = {compulsory} bytes",
                shape.elem_bytes
            ),
            64,
        ));
    }
    Ok(())
}

impl Lru {
    fn new(capacity: u64, ids: usize) -> Self {
        Lru {
            capacity,
            used: 0,
            prev: vec![NIL; ids],
            next: vec![NIL; ids],
            size: vec![0; ids],
            present: vec![false; ids],
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, id: u32) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        if p == NIL {
            self.head = n
        } else {
            self.next[p as usize] = n
        }
        if n == NIL {
            self.tail = p
        } else {
            self.prev[n as usize] = p
        }
    }

    fn push_front(&mut self, id: u32) {
        self.prev[id as usize] = NIL;
        self.next[id as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = id;
        }
        self.head = id;
        if self.tail == NIL {
            self.tail = id;
        }
    }

    /// Touch `id` of `bytes`; true on a hit. A miss inserts it and evicts from the cold end.
    fn access(&mut self, id: u32, bytes: u64) -> bool {
        if self.present[id as usize] {
            self.unlink(id);
            self.push_front(id);
            return true;
        }
        if bytes > self.capacity {
            return false;
        }
        self.present[id as usize] = true;
        self.size[id as usize] = bytes as u32;
        self.used += bytes;
        self.push_front(id);
        while self.used > self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            self.present[victim as usize] = false;
            self.used -= self.size[victim as usize] as u64;
        }
        false
    }
}

#[derive(Default)]
struct Counters {
    l2_req: u64,
    l2_hit: u64,
    llc_req: u64,
    llc_hit: u64,
    hbm: u64,
}

/// The caches of one GPU: one L2 per instance and an optional shared LLC.
struct Hierarchy {
    l2: Vec<Lru>,
    llc: Option<Lru>,
    c: Counters,
}

impl Hierarchy {
    fn new(gpu: &Gpu, ids: usize) -> Self {
        let l2 = (0..gpu.l2_instances())
            .map(|_| Lru::new(gpu.l2_bytes, ids))
            .collect();
        let llc = (gpu.llc_bytes > 0).then(|| Lru::new(gpu.llc_bytes, ids));
        Hierarchy {
            l2,
            llc,
            c: Counters::default(),
        }
    }

    fn read(&mut self, l2: usize, id: u32, bytes: u64) {
        self.c.l2_req += bytes;
        if self.l2[l2].access(id, bytes) {
            self.c.l2_hit += bytes;
            return;
        }
        match self.llc.as_mut() {
            Some(llc) => {
                self.c.llc_req += bytes;
                if llc.access(id, bytes) {
                    self.c.llc_hit += bytes;
                } else {
                    self.c.hbm += bytes;
                }
            }
            None => self.c.hbm += bytes,
        }
    }
}

/// Simulate one GEMM under one grid order on one GPU with the lockstep model (see the module doc).
pub fn simulate(gpu: &Gpu, shape: &GemmShape, order: GridOrder) -> Result<L2Report, GridError> {
    simulate_staggered(gpu, shape, order, 0.0)
}

/// As [`simulate`], with the CUs of an XCD out of phase: slot `s` of `S` starts its blocks
/// `s · stagger · ks / S` k-steps late (`ks` k-steps per block). `stagger = 0` is lockstep rounds;
/// `stagger = 1` is the fully staggered steady state where some CU of each XCD finishes a block every
/// `ks / S` k-steps and the next launch id takes its place. Real runs lie between (docs/grid.md).
pub fn simulate_staggered(
    gpu: &Gpu,
    shape: &GemmShape,
    order: GridOrder,
    stagger: f64,
) -> Result<L2Report, GridError> {
    shape.validate()?;
    if !(0.0..=1.0).contains(&stagger) {
        return Err(GridError::Invalid(format!(
            "stagger {stagger} outside 0..=1"
        )));
    }
    check_budgets(shape, order)?;
    let (rows, cols) = shape.grid();
    let ks = shape.ksteps();
    let ids = (rows + cols) * ks;
    let blocks = rows * cols;
    let cus = gpu.compute_units as u64;
    let n_xcd = gpu.xcds as u64;
    let n_l2 = gpu.l2_instances() as u64;
    let slots = cus / n_xcd;
    let rounds = blocks.div_ceil(cus);
    let mut h = Hierarchy::new(gpu, ids as usize);
    // Time runs in ticks of 1/q k-step; slot s starts `offset[s]` ticks late.
    let q = if stagger > 0.0 { slots } else { 1 };
    let offset: Vec<u64> = (0..slots)
        .map(|s| (s as f64 * stagger * ks as f64).floor() as u64)
        .collect();
    let end = rounds * ks * q + offset.last().copied().unwrap_or(0);
    // Tile of every launch id, computed once.
    let tiles: Vec<(u64, u64)> = (0..blocks)
        .map(|id| order.tile(id, rows, cols))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            GridError::Invalid(format!(
                "{} is not an order of a 2-d GEMM grid",
                order.label()
            ))
        })?;
    // Slots grouped by the tick phase at which they start a k-step, so each tick visits only them.
    let mut by_phase: Vec<Vec<usize>> = vec![Vec::new(); q as usize];
    for (s, &off) in offset.iter().enumerate() {
        by_phase[(off % q) as usize].push(s);
    }
    for t in 0..end {
        for x in 0..n_xcd {
            let l2 = (x % n_l2) as usize;
            for &s in &by_phase[(t % q) as usize] {
                let Some(tau) = t.checked_sub(offset[s]) else {
                    break;
                };
                let (round, k) = (tau / q / ks, tau / q % ks);
                let id = round * cus + s as u64 * n_xcd + x;
                let Some(&(r, c)) = tiles.get(id as usize) else {
                    continue;
                };
                h.read(
                    l2,
                    (r * ks + k) as u32,
                    shape.slice_bytes(r, shape.tile_m, shape.m, k),
                );
                h.read(
                    l2,
                    ((rows + c) * ks + k) as u32,
                    shape.slice_bytes(c, shape.tile_n, shape.n, k),
                );
            }
        }
    }
    Ok(report(gpu, shape, order, &h.c, (blocks, rounds), stagger))
}

fn report(
    gpu: &Gpu,
    s: &GemmShape,
    order: GridOrder,
    c: &Counters,
    size: (u64, u64),
    stagger: f64,
) -> L2Report {
    let (blocks, rounds) = size;
    let frac = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let l2_hit = frac(c.l2_hit, c.l2_req);
    let llc_hit = frac(c.llc_hit, c.llc_req);
    L2Report {
        gpu: gpu.name.to_string(),
        order: order.label(),
        l2_hit,
        llc_hit,
        l2_request_bytes: c.l2_req,
        hbm_bytes: c.hbm,
        compulsory_bytes: (s.m + s.n) * s.k * s.elem_bytes,
        bandwidth_tbps: eq1_bandwidth(gpu, l2_hit, llc_hit),
        bandwidth_tbps_table4: (gpu.name == "mi355x").then(|| eq1_bandwidth_paper(l2_hit, llc_hit)),
        stagger,
        blocks,
        rounds,
    }
}

/// HipKittens Eq. 1: `Bandwidth = LLC_bw × LLC_hit + L2_bw × L2_hit`, with the catalog's peaks.
pub fn eq1_bandwidth(gpu: &Gpu, l2_hit: f64, llc_hit: f64) -> f64 {
    gpu.llc_tbps * llc_hit + gpu.l2_tbps * l2_hit
}

/// The (L2, LLC) bandwidths in TB/s that HipKittens Table 4's "Mem. BW" column uses for the MI355X:
/// a least-squares fit of Eq. 1 to its six rows reproduces every row within 0.05 TB/s
/// (`tests/table4.rs` recomputes the fit). They are about 0.43× the catalog's peaks (39.3 / 14.7),
/// so they read as achievable rather than peak rates.
pub const SEED_000_TABLE4_EQ1_TBPS: (f64, f64) = (17.05, 5.99);

/// Eq. 1 with [`SEED_000_TABLE4_EQ1_TBPS`], for printing beside the paper's column.
pub fn eq1_bandwidth_paper(l2_hit: f64, llc_hit: f64) -> f64 {
    SEED_000_TABLE4_EQ1_TBPS.0 * l2_hit + SEED_000_TABLE4_EQ1_TBPS.1 * llc_hit
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    /// Reference LRU: a vector ordered most-recent first, searched linearly.
    fn naive_hits(cap: u64, seq: &[(u32, u64)]) -> Vec<bool> {
        let mut v: Vec<(u32, u64)> = Vec::new();
        seq.iter()
            .map(|&(id, b)| {
                if let Some(p) = v.iter().position(|e| e.0 == id) {
                    let e = v.remove(p);
                    v.insert(0, e);
                    return true;
                }
                if b <= cap {
                    v.insert(0, (id, b));
                    while v.iter().map(|e| e.1).sum::<u64>() > cap {
                        v.pop();
                    }
                }
                false
            })
            .collect()
    }

    #[test]
    fn lru_matches_reference() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..50 {
            let ids = rng.gen_range(2..60u32);
            let cap = rng.gen_range(1..400u64);
            let sizes: Vec<u64> = (0..ids).map(|_| rng.gen_range(1..60)).collect();
            let seq: Vec<(u32, u64)> = (0..500)
                .map(|_| {
                    let id = rng.gen_range(0..ids);
                    (id, sizes[id as usize])
                })
                .collect();
            let mut lru = Lru::new(cap, ids as usize);
            let got: Vec<bool> = seq.iter().map(|&(id, b)| lru.access(id, b)).collect();
            assert_eq!(got, naive_hits(cap, &seq));
        }
    }
}
