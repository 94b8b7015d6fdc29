//! What the row-wise normalisations (`crate::layernorm`, `crate::rmsnorm`, forward and backward) share:
//! the row lengths they take, how a row is split over waves ([`waves_per_row`], [`strip_cols`], a
//! wave's [`Frame`]), how a backward's first launch walks its rows ([`RowLoop`]) and the second
//! launch that sums its `dweight` partials ([`sum_partials`]). Each wave holds its share of a row in
//! a strip tile (`BaseShape::STRIP`); rows longer than `lanes ×` [`PER_LANE`] are split over waves
//! whose partial sums meet through shared memory (`KernelBuilder::row_sum_across_waves`).

use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_hw::{Gpu, Target};
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};

mod stage;
mod strides;
pub(crate) use stage::Staged;
pub use strides::RowStrides;

/// The norms' backward variant naming their second launch (`dweight` from the first launch's
/// per-wave partial sums) for `kittens compile --schedule dweight`; a run runs both launches.
pub const DWEIGHT: &str = "dweight";

/// Row lengths the row-wise kernels take (the issue of the suite: hidden sizes of 768 to 8192).
pub const DIMS: std::ops::RangeInclusive<u32> = 768..=8192;
/// A layernorm problem: `rows` rows of `dim` values, dropout with probability `p` keyed by
/// `dropout_seed` and `offset` (the Philox key and counter words, `kittens_ir::philox`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct NormShape {
    pub rows: usize,
    pub dim: usize,
    pub p: f32,
    pub dropout_seed: u64,
    pub offset: u64,
}

impl Default for NormShape {
    /// Odd sizes: 37 rows of 1000 (not a multiple of a wave's 256-column strip), 10% dropout.
    fn default() -> Self {
        NormShape {
            rows: 37,
            dim: 1000,
            p: 0.1,
            dropout_seed: 0x5eed_0000_0000_2a2a,
            offset: 3,
        }
    }
}

/// Values per lane a wave holds of a row before the row is split over more waves: one 16-byte chunk
/// of each tensor, as `torch.compile`'s persistent reduction does (one row per block, 8 values per
/// thread). Measured on the H100 (docs/performance.md, "layernorm and rotary"; at D = 2048,
/// loads of a run issued before any is converted): 8 values per lane 0.99 of the copy bandwidth at
/// p = 0 and 0.94 at p = 0.1 (32 registers); 16 per lane 0.99 and 1.00 (53-56 registers); 32 per lane
/// 0.98 and 0.90; 64 per lane 0.98 and 0.81.
pub const PER_LANE: u32 = 8;
/// The most waves one row is split over (16 × 64 lanes is AMD's 1024-thread block limit).
pub const MAX_WAVES_PER_ROW: u32 = 16;

/// Waves sharing a row of `dim` on waves of `lanes` lanes: the fewest `lanes × 8` chunks per lane
/// that let at most [`MAX_WAVES_PER_ROW`] waves hold the row, then the fewest waves (any count, not
/// only powers of two) whose shares of that many chunks cover it, so that few lanes idle past the
/// row's end (D = 3080 on 32 lanes: 13 waves, 385 of 416 lanes busy, against 16 waves' 512).
pub fn waves_per_row(dim: u32, lanes: u32) -> u32 {
    waves_per_row_at(dim, lanes, PER_LANE)
}

/// [`waves_per_row`] with `per_lane` values per lane (a multiple of 8) in place of [`PER_LANE`].
pub fn waves_per_row_at(dim: u32, lanes: u32, per_lane: u32) -> u32 {
    let chunk = lanes * per_lane.max(8);
    let per_wave = dim.div_ceil(chunk * MAX_WAVES_PER_ROW).max(1) * chunk;
    dim.div_ceil(per_wave).clamp(1, MAX_WAVES_PER_ROW)
}

/// The environment variable that overrides the forwards' split for a measurement: `per_lane=N`
/// (8, 16, 24 or 32 values per lane before a row is split over more waves; [`fwd_per_lane_for`] by
/// default).
pub const FWD_SPLIT_VAR: &str = "KITTENS_NORM_FWD";

/// The widest row a forward holds in one 32-lane wave with [`FwdSplit::OneWaveUpTo1024`] (32 values
/// per lane).
pub const ONE_WAVE_MAX_DIM: u32 = 32 * 32;

/// The waves (at [`PER_LANE`]) past which [`FwdSplit::Halved`] halves a row's split: from 2056 to
/// 3072 the halved layernorm forward (five or six waves of 512 columns) spills on sm_90a.
pub const HALVED_PAST_WAVES: u32 = 12;

/// How a forward splits its rows over waves beyond [`PER_LANE`]'s rule, as measured per kernel on the
/// H200 (docs/performance.md, "rmsnorm and swiglu").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FwdSplit {
    /// 16 values per lane where 8 would split a row over more than [`HALVED_PAST_WAVES`] waves
    /// (D > 3072 on 32 lanes): half the waves meeting at each cross-wave sum.
    Halved,
    /// As [`Self::Halved`], and a row of at most 1024 held by one wave (no cross-wave sum, no
    /// barrier).
    OneWaveUpTo1024,
}

/// The forwards' values per lane for rows of `dim` on waves of `lanes` lanes: what [`FWD_SPLIT_VAR`]
/// sets, else [`fwd_per_lane_for`]; an error naming the variable where it holds anything else.
pub fn fwd_per_lane(dim: u32, lanes: u32, split: FwdSplit) -> Result<u32, KernelError> {
    let Ok(v) = std::env::var(FWD_SPLIT_VAR) else {
        return Ok(fwd_per_lane_for(dim, lanes, split));
    };
    v.trim()
        .strip_prefix("per_lane=")
        .and_then(|n| n.trim().parse().ok())
        .filter(|n| matches!(n, 8 | 16 | 24 | 32))
        .ok_or_else(|| {
            KernelError::Config(format!(
                "{FWD_SPLIT_VAR} = {v:?}: expected per_lane=N (8, 16, 24 or 32)"
            ))
        })
}

/// The forwards' default values per lane: on 32-lane waves (the only ones measured) as `split` says,
/// [`PER_LANE`] elsewhere.
pub fn fwd_per_lane_for(dim: u32, lanes: u32, split: FwdSplit) -> u32 {
    if lanes != 32 {
        return PER_LANE;
    }
    if split == FwdSplit::OneWaveUpTo1024 && dim <= ONE_WAVE_MAX_DIM {
        return dim.div_ceil(lanes).div_ceil(8) * 8;
    }
    if dim > lanes * PER_LANE * HALVED_PAST_WAVES {
        16
    } else {
        PER_LANE
    }
}

/// Waves of a block whose rows are split over `waves_per_row` waves: at least 4, whole rows.
pub fn block_waves(waves_per_row: u32) -> u32 {
    waves_per_row * 4u32.div_ceil(waves_per_row.max(1))
}

/// Columns of one wave's strip of a row of `dim` split over `waves_per_row` waves: its share rounded up
/// to whole `lanes × 8` chunks (the strip lowering deals 8-value chunks to the lanes).
pub fn strip_cols(dim: u32, waves_per_row: u32, lanes: u32) -> u32 {
    let chunk = lanes * 8;
    dim.div_ceil(waves_per_row).div_ceil(chunk) * chunk
}

/// The checks every row-wise configuration shares, its errors prefixed by `kernel`: the row length
/// (a multiple of 8 in [`DIMS`]), `eps`, the wave width and the waves per row.
pub(crate) fn check_rows(
    kernel: &str,
    dim: u32,
    eps: f32,
    lanes: u32,
    (waves, waves_per_row): (u32, u32),
) -> Result<(), KernelError> {
    let bad = |m: String| Err(KernelError::Config(format!("{kernel}: {m}")));
    if !DIMS.contains(&dim) || !dim.is_multiple_of(8) {
        return bad(format!(
            "row length D = {dim} must be a multiple of 8 from {} to {}",
            DIMS.start(),
            DIMS.end()
        ));
    }
    if !(eps.is_finite() && eps > 0.0) {
        return bad(format!("eps = {eps} must be positive"));
    }
    if !matches!(lanes, 32 | 64) {
        return bad(format!("{lanes} lanes per wave (32 or 64)"));
    }
    if waves_per_row == 0 || !waves.is_multiple_of(waves_per_row) {
        return bad(format!(
            "{waves_per_row} waves per row must divide {waves} waves per block"
        ));
    }
    Ok(())
}

/// The most bytes of partial sums a block keeps in shared memory ([`RowLoop::shared_acc`]): what
/// leaves room for the row sums' ring under the 48 KiB a kernel declares statically (sm_90a).
pub const SHARED_ACC_MAX_BYTES: u32 = 32 * 1024;

/// The most shared memory the staged inputs of one SM's blocks take ([`RowLoop::stage`]): what leaves
/// room for the row sums' ring and the partial sums under sm_90a's 227 KiB per block.
pub const STAGE_MAX_BYTES: u32 = 192 * 1024;

/// Rows ahead a default staged loop copies ([`RowLoop::stage_where`]): two beat one where a lane
/// holds two chunks of the row (layernorm D 8192: 1.41× against 1.19× the unstaged loop, H200).
pub const STAGED_DEPTH: u32 = 2;

/// The narrowest row the backwards stage by default ([`RowLoop::stage_where`]).
pub const STAGED_MIN_DIM: u32 = 4096;

/// Rows of `D` one wave of the second launch sums (a `DW_ROWS × lanes·8` strip per step).
pub const DW_ROWS: u32 = 4;

/// The environment variable that overrides [`RowLoop`] for a measurement: `blocks=N`,
/// `waves_per_row=W`, `prefetch=0|1|2`, `resident=R`, `shared_acc=0|1`, `late=0|1` and/or
/// `one_sum=0|1` and/or `stage=0..4`, comma-separated (e.g. `KITTENS_NORM_BWD=blocks=132,prefetch=0`).
pub const ROW_LOOP_VAR: &str = "KITTENS_NORM_BWD";

/// How the first launch of a row-wise backward (`rmsnorm_bwd`, `layernorm_bwd`) walks its rows, as
/// Apex's and Liger-Kernel's layernorm backwards do: a grid of at most `blocks` blocks (a few per SM),
/// block `b` visiting the row groups `b, b + grid, b + 2·grid, …` and keeping its share of the
/// `dweight` partial sums in registers across all of them, so the second launch sums only
/// `grid × rows_per_block` partial rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RowLoop {
    /// The most blocks of the first launch.
    pub blocks: u32,
    /// Waves sharing one row, where a measurement overrides [`waves_per_row`]'s choice.
    pub waves_per_row: Option<u32>,
    /// How far ahead a block loads its rows' inputs (as raw bf16 words, converted at first use), so
    /// that with one block per SM a row's DRAM round trip overlaps the block barriers and arithmetic
    /// of the row before it (the software pipelining of Apex's and Liger-Kernel's row loops):
    /// 0: every input of a row loaded at the row's start; 1: the inputs of the row's first sum
    /// (layernorm: x and residual; rmsnorm: r) loaded one row ahead, the others at the row's start,
    /// consumed only after its first barrier; 2: every input one row ahead (more registers).
    /// Only where a wave's share of a row is one 16-byte chunk per lane ([`Self::ahead`]): longer
    /// shares leave no registers for it. Level 2 by default on 32-lane (NVIDIA) GPUs and the CPU
    /// interpreter (on the H200, layernorm_bwd 8192×4096: 2.20×, 1.98×, 1.73× a copy's time at levels
    /// 0, 1, 2; rmsnorm_bwd 2.24×, 2.02×, 1.62×); 0 on AMD, whose 1024-thread blocks at D = 8192
    /// have no room for it (gfx950 spills).
    pub prefetch: u32,
    /// Blocks of the first launch asked to be resident per SM at once (`kittens_ir::Grid::resident`:
    /// sm_90a caps the registers so that they fit), each with its own rows in flight and its own
    /// barriers, so that one block's arithmetic and barriers overlap another's loads.
    pub resident: u32,
    /// Whether the launches' kernels are built for 32-bit offsets (`kittens_ir::Grid::index32`:
    /// fewer registers on sm_90a), set by [`Self::index32_for`] where the problem's rows fit; the
    /// launcher refuses a larger tensor by name.
    pub index32: bool,
    /// Whether a lane keeps its partial sums of `dweight` (and `dbias`) in shared memory (its own
    /// words, read and written back once a row, no barrier) rather than in registers across the
    /// whole row loop: 8 fewer live registers a lane per chunk and sum, so that two blocks of 16
    /// waves fit an SM where the register-held sums leave room for one (the register bound of
    /// issue #33: Liger-Kernel and Apex hold these sums per block, not per lane).
    pub shared_acc: bool,
    /// Whether a row's inputs past its first sum (layernorm: `dy`, `weight`, `dh`) are loaded where
    /// first used, after the row's first barrier, rather than with the first sum's inputs: fewer
    /// values live across that barrier (the longer shares' order, `crate::layernorm::bwd::chunks`),
    /// their latency left to the other blocks of the SM ([`Self::resident`]).
    pub late_loads: bool,
    /// Whether a row's block-wide sums meet at one barrier rather than two: every sum a row needs is
    /// taken from its inputs before the first exchange (rmsnorm: `Σ r²` and `Σ (w·dy)·r`, since
    /// `mean(w·dy·r̂) = rstd · mean(w·dy·r)`; layernorm: `Σ h`, `Σ h²`, `Σ g`, `Σ g·h`, the variance
    /// as `E[h²] − mean²` and `mean(g·(h − mean))` as `E[g·h] − mean·E[g]`), through ring slots that
    /// alternate with the row's parity so that the next row's partials never overwrite slots
    /// another wave still reads. Halves the barriers of the row chain that bounds the backwards
    /// (docs/performance.md, "rmsnorm and swiglu"); the raw second moment loses precision where a
    /// row's mean dwarfs its spread (as Apex's single-pass variance does).
    pub one_sum: bool,
    /// Rows ahead (0: none) whose inputs a wave copies into a ring in shared memory asynchronously
    /// ([`Staged`]: `cp.async` on sm_90a), in place of [`Self::prefetch`]: bytes in flight without
    /// registers (issue #33). The depth is cut to what fits [`STAGE_MAX_BYTES`] per SM.
    pub stage: u32,
}

impl RowLoop {
    /// This loop with [`Self::index32`] set where `rows` rows `row_len` elements apart (the widest
    /// row stride of the problem's tensors) span at most `kittens_ir::INDEX32_MAX_SPAN` elements;
    /// larger problems keep 64-bit offsets.
    pub fn index32_for(self, rows: usize, row_len: usize) -> Self {
        let span = rows
            .checked_mul(row_len)
            .and_then(|n| u64::try_from(n).ok());
        RowLoop {
            index32: span.is_some_and(|n| n <= kittens_ir::INDEX32_MAX_SPAN),
            ..self
        }
    }

    /// As many blocks as fill the target's SMs / CUs once with 16 waves each (the measured best on an
    /// H200 for the layernorm backward at D = 4096: one 512-thread block per SM, against two or four),
    /// so that blocks of `waves` waves get `16 / waves` per SM; 5 on the CPU interpreter (so that a
    /// test's few dozen rows make every block loop, with a partial last round).
    pub fn for_target(target: Target, waves: u32) -> Self {
        Self::for_gpu(target.gpu(), waves)
    }

    /// [`Self::for_target`] for a GPU (`None`: the CPU interpreter).
    pub fn for_gpu(gpu: Option<&Gpu>, waves: u32) -> Self {
        RowLoop {
            blocks: gpu.map_or(5, |g| g.compute_units * (16 / waves.max(1)).max(1)),
            waves_per_row: None,
            prefetch: if gpu.is_none_or(|g| g.wave_width == 32) {
                2
            } else {
                0
            },
            resident: 1,
            index32: false,
            shared_acc: false,
            late_loads: false,
            one_sum: false,
            stage: 0,
        }
    }

    /// [`Self::for_target`] with what [`ROW_LOOP_VAR`] sets; an error naming the variable where it
    /// holds anything else.
    pub fn from_env(target: Target, waves: u32) -> Result<Self, KernelError> {
        match std::env::var(ROW_LOOP_VAR) {
            Ok(v) => Self::parse(target, waves, &v),
            Err(_) => Ok(Self::for_target(target, waves)),
        }
    }

    /// [`Self::for_target`] with the settings `v` (the form of [`ROW_LOOP_VAR`]).
    pub fn parse(target: Target, waves: u32, v: &str) -> Result<Self, KernelError> {
        let mut lp = Self::for_target(target, waves);
        let bad = || {
            KernelError::Config(format!(
                "{ROW_LOOP_VAR} = {v:?}: expected blocks=N (N > 0), waves_per_row=W (1, 2, 4, 8, 16 \
                 or 32), prefetch=P (0, 1 or 2), resident=R (1 to 8), shared_acc=S (0 or 1), \
                 late=L (0 or 1), one_sum=O (0 or 1) and/or stage=S (0 to 4), comma-separated"
            ))
        };
        let mut blocks_set = false;
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, val) = item.split_once('=').ok_or_else(bad)?;
            let n: u32 = val.trim().parse().map_err(|_| bad())?;
            match key.trim() {
                "blocks" if n > 0 => (lp.blocks, blocks_set) = (n, true),
                "waves_per_row" if matches!(n, 1 | 2 | 4 | 8 | 16 | 32) => {
                    lp.waves_per_row = Some(n)
                }
                "prefetch" if n <= 2 => lp.prefetch = n,
                "resident" if (1..=8).contains(&n) => lp.resident = n,
                "shared_acc" if n <= 1 => lp.shared_acc = n == 1,
                "late" if n <= 1 => lp.late_loads = n == 1,
                "one_sum" if n <= 1 => lp.one_sum = n == 1,
                "stage" if n <= 4 => lp.stage = n,
                _ => return Err(bad()),
            }
        }
        if !blocks_set {
            lp.blocks *= lp.resident;
        }
        Ok(lp)
    }

    /// This loop with two blocks asked per SM and no prefetch (`resident = 2`, `prefetch = 0`, twice
    /// the blocks) where sm_90a's register report supports it: 32-lane waves, 32-bit offsets
    /// ([`Self::index32`]), a wave's share of a row (`slice` columns) one 16-byte chunk per lane, and
    /// `need` registers (the kernel's at that setting with zero spills, NVRTC's report in
    /// crates/kittens-runtime/tests/norm_index32.rs) within the cap two blocks of `threads` threads
    /// leave: two blocks in flight per SM where one block's registers would otherwise hold the SM
    /// (docs/performance.md, "rmsnorm and swiglu"). Unchanged where [`ROW_LOOP_VAR`] is set (a
    /// measurement's own setting).
    pub fn pair_where_it_fits(self, target: Target, threads: u32, slice: u32, need: u32) -> Self {
        let Some(gpu) = target.gpu() else {
            return self;
        };
        let one_chunk = gpu.wave_width == 32 && slice <= gpu.wave_width * 8;
        if std::env::var_os(ROW_LOOP_VAR).is_some() || !one_chunk || !self.index32 {
            return self;
        }
        let cap = gpu.registers_per_cu() / (2 * threads.max(1)) / 8 * 8;
        if self.resident != 1 || cap < need {
            return self;
        }
        RowLoop {
            blocks: self.blocks * 2,
            prefetch: 0,
            resident: 2,
            ..self
        }
    }

    /// This loop with [`Self::one_sum`] set where `on` (a kernel's measured choice at its row length:
    /// docs/performance.md, "rmsnorm and swiglu"), on 32-lane GPUs and on the CPU interpreter, which
    /// mirrors them as for [`Self::prefetch`] (AMD keeps two barriers a row: not measured there).
    /// Unchanged where [`ROW_LOOP_VAR`] is set (a measurement's own setting).
    pub fn one_sum_where(self, target: Target, on: bool) -> Self {
        let lanes32 = target.gpu().is_none_or(|g| g.wave_width == 32);
        if !on || !lanes32 || std::env::var_os(ROW_LOOP_VAR).is_some() {
            return self;
        }
        RowLoop {
            one_sum: true,
            ..self
        }
    }

    /// This loop with the next [`STAGED_DEPTH`] rows' inputs staged ([`Self::stage`]) where `on` and the
    /// lowering has `cp.async` (32-lane GPUs; the CPU interpreter mirrors them, as for
    /// [`Self::one_sum_where`]; AMD copies synchronously: not measured there). Unchanged where
    /// [`ROW_LOOP_VAR`] is set. Measured on the H200 (docs/performance.md, "rmsnorm and swiglu": staged
    /// rows): two rows ahead gain from D 4096 and lose to two blocks per SM at D 3080.
    pub fn stage_where(self, target: Target, on: bool) -> Self {
        let lanes32 = target.gpu().is_none_or(|g| g.wave_width == 32);
        if !on || !lanes32 || std::env::var_os(ROW_LOOP_VAR).is_some() {
            return self;
        }
        RowLoop {
            stage: STAGED_DEPTH,
            ..self
        }
    }

    /// Whether partial sums of `bytes` per block go to shared memory: [`Self::shared_acc`] where they
    /// fit in [`SHARED_ACC_MAX_BYTES`] (larger ones stay in registers).
    pub fn acc_in_shared(&self, bytes: u32) -> bool {
        self.shared_acc && bytes <= SHARED_ACC_MAX_BYTES
    }

    /// [`Self::stage`]'s depth for rows whose staged inputs take `bytes` of shared memory per block
    /// and step: as deep as fits [`STAGE_MAX_BYTES`] shared by [`Self::resident`] blocks (0: none).
    pub fn stage_depth(&self, bytes: u32) -> u32 {
        let budget = STAGE_MAX_BYTES / self.resident.max(1);
        self.stage.min(budget / bytes.max(1))
    }

    /// [`Self::prefetch`]'s level for a wave's share of `slice` columns on waves of `lanes` lanes:
    /// 0 unless the share is one 16-byte chunk per lane, and 0 where the inputs are staged.
    pub fn ahead(&self, slice: u32, lanes: u32) -> u32 {
        if slice <= lanes * 8 && self.stage == 0 {
            self.prefetch
        } else {
            0
        }
    }

    /// Row groups each block visits, for `rows` rows and `rpb` rows per block: as few as spread the
    /// groups over at most `blocks` blocks.
    pub fn steps(&self, rows: &Expr, rpb: u32) -> Expr {
        rows.ceil_div(i64::from(rpb) * i64::from(self.blocks))
    }

    /// Blocks of the first launch (at most `blocks`; no block without a row).
    pub fn grid(&self, rows: &Expr, rpb: u32) -> Expr {
        rows.ceil_div(self.steps(rows, rpb) * i64::from(rpb))
    }

    /// Rows of the scratch of partial sums: one per row group of a block.
    pub fn parts(&self, rows: &Expr, rpb: u32) -> Expr {
        self.grid(rows, rpb) * i64::from(rpb)
    }

    /// [`Self::for_target`] with [`ROW_LOOP_VAR`]'s override for a measurement, for a backward whose
    /// blocks hold `split.0` waves, `split.1` of them per row: a `waves_per_row` override re-splits
    /// the rows (at least 4 waves a block) and is written back into `split`.
    pub fn for_split(target: Target, split: (&mut u32, &mut u32)) -> Result<Self, KernelError> {
        let (waves, waves_per_row) = split;
        let lp = Self::from_env(target, *waves)?;
        let Some(w) = lp.waves_per_row else {
            return Ok(lp);
        };
        (*waves_per_row, *waves) = (w, block_waves(w));
        Self::from_env(target, *waves)
    }

    /// Elements of a `dim × parts` scratch of partial sums for `rows` rows of blocks of `rpb` rows
    /// ([`Self::parts_at`]); an error naming `what` when the count overflows.
    pub fn scratch_len(
        &self,
        what: &str,
        rows: usize,
        rpb: u32,
        dim: usize,
    ) -> Result<usize, KernelError> {
        self.parts_at(rows, rpb)
            .and_then(|n| n.checked_mul(dim))
            .ok_or_else(|| KernelError::Problem(format!("{what}: the scratch overflows")))
    }

    /// [`Self::parts`] at a concrete row count (`None` on overflow).
    pub fn parts_at(&self, rows: usize, rpb: u32) -> Option<usize> {
        let rpb = rpb as usize;
        let steps = rows.div_ceil(rpb.checked_mul(self.blocks as usize)?);
        rows.div_ceil(steps.checked_mul(rpb)?.max(1))
            .checked_mul(rpb)
    }

    /// The row that wave-row `local` of this block holds at step `s`.
    pub(crate) fn row(
        &self,
        k: &KernelBuilder,
        rows: &Expr,
        rpb: u32,
        s: &Expr,
        local: &Expr,
    ) -> Expr {
        (s.clone() * self.grid(rows, rpb) + k.block(0)) * i64::from(rpb) + local.clone()
    }
}

/// A wave's place in a row-wise program: its row within the block, its part of the row, the first
/// column of its strip; and the block's ring of partial sums when rows are split.
pub(crate) struct Frame {
    pub(crate) local: Expr,
    part: Expr,
    pub(crate) col0: Expr,
    cols: u32,
    parts: u32,
    partials: Option<kittens_ir::SharedId>,
}

impl Frame {
    /// Rows of `cols`-column strips split over `w_row` waves, `rows` rows per block, `slots` ring
    /// slots of partial sums.
    pub(crate) fn split(
        k: &mut KernelBuilder,
        w_row: u32,
        rows: u32,
        cols: u32,
        slots: u32,
    ) -> Self {
        let part = k.wave() % i64::from(w_row);
        let partials =
            (w_row > 1).then(|| k.shared("partials", F32, rows, w_row, Swizzle::None, slots));
        Frame {
            local: k.wave() / i64::from(w_row),
            col0: part.clone() * i64::from(cols),
            part,
            cols,
            parts: w_row,
            partials,
        }
    }

    /// The `1 × cols` strip of row `row` this wave holds, of tensor `g`.
    pub(crate) fn view(
        &self,
        k: &KernelBuilder,
        g: GlobalId,
        row: &Expr,
    ) -> kittens_ir::GlobalView {
        k.gview(g, vec![row.clone(), self.col0.clone()], 0, 1, 1, self.cols)
    }

    /// `v` (this wave's partial sum of its row) becomes the row's total, through ring slot `slot`.
    pub(crate) fn total(&self, k: &mut KernelBuilder, v: RegId, slot: i64) {
        if let Some(buf) = self.partials {
            k.row_sum_across_waves(
                v,
                buf,
                slot,
                self.local.clone(),
                self.part.clone(),
                self.parts,
            );
        }
    }

    /// [`Self::total`] of several values at one barrier, each through its own ring slot.
    pub(crate) fn totals(&self, k: &mut KernelBuilder, vs: &[(RegId, i64)]) {
        let vs: Vec<(RegId, Expr)> = vs.iter().map(|&(v, s)| (v, Expr::c(s))).collect();
        self.totals_at(k, &vs);
    }

    /// [`Self::totals`] through ring slots computed at run time ([`RowLoop::one_sum`]'s parity).
    pub(crate) fn totals_at(&self, k: &mut KernelBuilder, vs: &[(RegId, Expr)]) {
        if let Some(buf) = self.partials {
            k.row_sums_across_waves(vs, buf, self.local.clone(), self.part.clone(), self.parts);
        }
    }
}

/// A wave's partial sums across the row loop (`dweight`, `dbias`): `n` strips of `cols` f32 columns,
/// in registers or, with `shared` ([`RowLoop::acc_in_shared`]), in shared memory (each lane its own words: the
/// strip lowering reads back what the same lane wrote, so no barrier is needed) through one
/// transient strip.
pub(crate) struct Partials {
    regs: Vec<RegId>,
    shared: Option<(kittens_ir::SharedId, RegId)>,
    n: u32,
}

impl Partials {
    /// `n` partial strips of `cols` columns named `name0, name1, …` for blocks of `waves` waves.
    pub(crate) fn new(
        k: &mut KernelBuilder,
        name: &str,
        (n, cols): (u32, u32),
        waves: u32,
        shared: bool,
    ) -> Self {
        let strip =
            |k: &mut KernelBuilder, n: &str| k.tile(n, F32, 1, cols, Layout::Row, BaseShape::STRIP);
        if shared {
            let buf = k.shared(name, F32, 1, cols, Swizzle::None, waves * n);
            let t = strip(k, &format!("{name}_t"));
            Partials {
                regs: Vec::new(),
                shared: Some((buf, t)),
                n,
            }
        } else {
            Partials {
                regs: (0..n).map(|c| strip(k, &format!("{name}{c}"))).collect(),
                shared: None,
                n,
            }
        }
    }

    fn slot(&self, k: &KernelBuilder, buf: kittens_ir::SharedId, c: u32) -> kittens_ir::SharedView {
        k.smem(buf, k.wave() * i64::from(self.n) + i64::from(c))
    }

    /// Every partial set to zero.
    pub(crate) fn zero(&self, k: &mut KernelBuilder) {
        match self.shared {
            Some((buf, t)) => {
                k.zero(t);
                for c in 0..self.n {
                    k.store_shared(self.slot(k, buf, c), t);
                }
            }
            None => self.regs.iter().for_each(|&r| k.zero(r)),
        }
    }

    /// Partial `c` += `src`.
    pub(crate) fn add(&self, k: &mut KernelBuilder, c: u32, src: RegId) {
        match self.shared {
            Some((buf, t)) => {
                k.load(t, self.slot(k, buf, c));
                k.wait_shared(0);
                k.add(t, t, src);
                k.store_shared(self.slot(k, buf, c), t);
            }
            None => {
                let r = self.regs[c as usize];
                k.add(r, r, src);
            }
        }
    }

    /// Partial `c` written to `dst`.
    pub(crate) fn store(&self, k: &mut KernelBuilder, c: u32, dst: kittens_ir::GlobalView) {
        match self.shared {
            Some((buf, t)) => {
                k.load(t, self.slot(k, buf, c));
                k.wait_shared(0);
                k.store(dst, t);
            }
            None => k.store(dst, self.regs[c as usize]),
        }
    }
}

/// A kernel summing the rows of transposed partial sums: for each `(scratch, out)` pair,
/// `out[j] = Σ_p scratch[j, p]` (f32 `[dim, parts]` in, bf16 `[dim]` out), `parts` as
/// [`RowLoop::parts`] gives it for blocks of `rows_per_block` rows. Parameter `rows`; tensors
/// the scratches, then the outputs. Each wave sums [`DW_ROWS`] rows of each scratch, `lanes × 8`
/// columns a step.
pub(crate) fn sum_partials(
    name: &str,
    dim: u32,
    lanes: u32,
    rows_per_block: u32,
    lp: &RowLoop,
    pairs: &[(&str, &str)],
) -> Result<Kernel, KernelError> {
    let dim = i64::from(dim);
    let waves = 4;
    let mut k = KernelBuilder::new(name, Schedule::Plain { waves });
    if lp.index32 {
        k.index32();
    }
    let rows = k.param("rows");
    let parts = lp.parts(&rows, rows_per_block);
    let d = Expr::c(dim);
    let scratch: Vec<GlobalId> = pairs
        .iter()
        .map(|(s, _)| {
            k.global(
                s,
                F32,
                &[("col", d.clone()), ("part", parts.clone())],
                Access::Read,
            )
        })
        .collect();
    let outs: Vec<GlobalId> = pairs
        .iter()
        .map(|(_, o)| {
            k.global(
                o,
                Bf16,
                &[("col", d.clone()), ("one", Expr::c(1))],
                Access::Write,
            )
        })
        .collect();
    let per_block = i64::from(waves * DW_ROWS);
    k.grid(vec![Expr::c(dim).ceil_div(per_block)], GridOrder::RowMajor);
    let step = lanes * 8;
    let t = k.tile(
        "partials",
        F32,
        DW_ROWS,
        step,
        Layout::Row,
        BaseShape::STRIP,
    );
    let acc = k.row_vec("dweight", t, F32);
    let row0 = k.block(0) * per_block + k.wave() * i64::from(DW_ROWS);
    for (&src, &out) in scratch.iter().zip(&outs) {
        k.zero(acc);
        k.for_range("step", 0, parts.ceil_div(i64::from(step)), |k, s| {
            let col = s * i64::from(step);
            k.load_global(
                t,
                k.gview(src, vec![row0.clone(), col], 0, 1, DW_ROWS, step),
            );
            k.row_sum_acc(acc, t, acc);
        });
        k.store(
            k.gview(out, vec![row0.clone(), Expr::c(0)], 0, 1, DW_ROWS, 1),
            acc,
        );
    }
    Ok(k.finish()?)
}
