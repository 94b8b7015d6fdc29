//! The tile IR: what a kernel is after the builder has run.
//!
//! A [`Kernel`] is a set of declarations (parameters, global tensors, shared buffers, register tiles and
//! vectors, loop variables), a [`Grid`] with its remap, a [`Schedule`], and a body of [`Stmt`]s. Every
//! memory effect is visible in the ops (docs/architecture.md principle 3): an async load names the shared buffer it
//! writes, waits and barriers are explicit ops, and every op that several waves perform together names its
//! [`Scope`]. The body is stored *after* schedule expansion (`crate::schedule`): the barriers, priority
//! changes and fences a schedule implies are ordinary ops marked `implied: true`, so lowerings, the
//! analysis and the interpreter walk one representation.
//!
//! Execution model (what every backend must reproduce): a launch runs `grid.blocks()` blocks; each block
//! runs `waves` waves (NVIDIA: warps) that execute the body; register tiles and vectors are private to each
//! wave; shared buffers are per block. Coordinates outside a global tensor read as zero and stores to them
//! are dropped, so shapes need not be multiples of the tile.

use crate::expr::{Cond, Expr, ParamId, VarId};
use kittens_hw::dtype::DType;
use kittens_tile::{BaseShape, Layout, RegTile, SharedTile};
use serde::{Deserialize, Serialize};

pub use crate::expr::GlobalId;
pub use crate::numerics::Rounding;

/// A shared-memory buffer (ring of `count` tiles), by position in [`Kernel::shared`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SharedId(pub u32);
/// A register tile or vector (per wave), by position in [`Kernel::regs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegId(pub u32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamDecl {
    pub name: String,
    /// A 32-bit data word (a seed or counter word: any value in `0..2^32`, 0 included) rather than a
    /// problem size (at least 1); [`crate::KernelBuilder::param_word`] declares one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub word: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// A global tensor: a logical N-d shape with strides in elements, so BSHD and BHSD attention layouts
/// are the same logical `[B, H, S, D]` tensor with different strides (no copies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GlobalDecl {
    pub name: String,
    pub dtype: DType,
    /// Logical dimension names (e.g. `["b", "h", "s", "d"]`), for messages and generated code.
    pub dim_names: Vec<String>,
    pub dims: Vec<Expr>,
    /// Stride of each logical dimension, in elements.
    pub strides: Vec<Expr>,
    pub access: Access,
    /// How a target with a choice fills shared ring slots from this tensor (`load_async`); the
    /// interpreter and the AMD lowerings ignore it: the values loaded are the same either way.
    pub slot_fill: SlotFill,
    /// Where this tensor ends for the block reading it ([`Clip`]): a packed batch's sequence end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip: Option<Clip>,
}

/// A per-block end of one dimension of a global: every access treats coordinates of `dim` at or past
/// `end` (an expression of the block's coordinates, typically an [`Expr::Elem`] of `cu_seqlens`) as
/// outside the tensor — reads give zero, stores and atomic adds are dropped — exactly as past the
/// tensor's edge. It is what keeps a block of a packed (varlen) batch from reading the next sequence's
/// rows into its softmax and from writing over them: the next sequence lives right there, where TMA's
/// clipping at the tensor's edge does not help.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Clip {
    pub dim: u8,
    pub end: Expr,
}

/// How the sm_90a lowering fills a shared ring slot from a global tensor. Both write the same
/// swizzled slot and read past-the-end elements as zero; they differ in what reads global memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotFill {
    /// One thread hands the whole box to the Tensor Memory Accelerator (a `CUtensorMap` argument).
    /// Rows that start off 128-byte lines make each 128-byte box row straddle two lines, which TMA
    /// reads slowly (H100: 3000³ at 0.42 of cuBLAS against 0.82 at 3008³, docs/performance.md).
    #[default]
    Tma,
    /// The producer warpgroup's 128 threads copy the slot in 16-byte `cp.async` pieces (PTX ISA
    /// §9.7.9.25.3) from a plain pointer and the tensor's row stride, with no alignment beyond 16
    /// bytes asked of the rows; the slot's `full` barrier counts the 128 threads' arrivals.
    CpAsync,
}

/// `count` shared tiles of one shape (a double buffer is `count: 2`), addressed by a run-time index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedDecl {
    pub name: String,
    pub tile: SharedTile,
    pub count: u32,
}

impl SharedDecl {
    pub fn bytes(&self) -> u32 {
        self.tile.bytes() * self.count
    }
}

/// Which tile axis a register vector is indexed by: `Rows` holds one value per row (what `row_max`
/// produces and `sub_row` broadcasts), `Cols` one value per column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    Rows,
    Cols,
}

/// A register vector, distributed over a wave's lanes like the rows (or columns) of a tile with the given
/// layout and base shape — the lowering needs those to know which lanes hold which entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RegVec {
    pub dtype: DType,
    pub len: u32,
    pub axis: Axis,
    pub layout: Layout,
    pub base: BaseShape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegKind {
    Tile(RegTile),
    Vec(RegVec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegDecl {
    pub name: String,
    pub kind: RegKind,
}

impl RegDecl {
    pub fn dtype(&self) -> DType {
        match self.kind {
            RegKind::Tile(t) => t.dtype,
            RegKind::Vec(v) => v.dtype,
        }
    }
    /// Logical (rows, cols); a vector is `len × 1`.
    pub fn shape(&self) -> (u32, u32) {
        match self.kind {
            RegKind::Tile(t) => (t.rows, t.cols),
            RegKind::Vec(v) => (v.len, 1),
        }
    }
    pub fn tile(&self) -> Option<&RegTile> {
        match &self.kind {
            RegKind::Tile(t) => Some(t),
            RegKind::Vec(_) => None,
        }
    }
    pub fn vec(&self) -> Option<&RegVec> {
        match &self.kind {
            RegKind::Vec(v) => Some(v),
            RegKind::Tile(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarDecl {
    pub name: String,
}

/// A `rows × cols` window of a global tensor: element `(i, j)` is
/// `tensor[origin + i·e(row_dim) + j·e(col_dim)]` where `origin` has one coordinate per dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GlobalView {
    pub tensor: GlobalId,
    pub origin: Vec<Expr>,
    pub row_dim: u8,
    pub col_dim: u8,
    pub rows: u32,
    pub cols: u32,
}

/// A `rows × cols` sub-tile of buffer `index` of a shared ring, starting at element `(row0, col0)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedView {
    pub buf: SharedId,
    pub index: Expr,
    pub row0: Expr,
    pub col0: Expr,
    pub rows: u32,
    pub cols: u32,
}

/// Who performs an op together. `Wave` is one AMD wavefront (64 lanes) or one NVIDIA warp (32 lanes);
/// `WarpGroup` is four consecutive waves (a Hopper warpgroup; on AMD one wave per SIMD, the unit the
/// 8-wave ping-pong alternates); `Consumers` is every wave of a producer/consumer schedule's consumer
/// role (barriers only: the consumer warpgroups exchanging tiles in shared memory without the
/// producer, FlashAttention-3's dS hand-off); `Block` is every wave of the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Wave,
    WarpGroup,
    Consumers,
    Block,
}

impl Scope {
    /// Waves in one instance of the scope, for a block of `waves` waves (for `Consumers`, which only
    /// barriers take, an upper bound: [`Schedule::consumer_waves`] gives the exact ones).
    pub fn waves(self, block_waves: u32) -> u32 {
        match self {
            Scope::Wave => 1,
            Scope::WarpGroup => 4.min(block_waves),
            Scope::Consumers | Scope::Block => block_waves,
        }
    }
}

/// The four operand forms of a matrix multiply-accumulate `D = op(A)·op(B) + C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MmaForm {
    /// A is M×K, B is K×N.
    Ab,
    /// A is M×K, B is N×K (`C = A·Bᵀ`).
    Abt,
    /// A is K×M, B is K×N.
    Atb,
    /// A is K×M, B is N×K.
    Atbt,
}

impl MmaForm {
    pub fn a_transposed(self) -> bool {
        matches!(self, MmaForm::Atb | MmaForm::Atbt)
    }
    pub fn b_transposed(self) -> bool {
        matches!(self, MmaForm::Abt | MmaForm::Atbt)
    }
    pub fn name(self) -> &'static str {
        match self {
            MmaForm::Ab => "mma_ab",
            MmaForm::Abt => "mma_abt",
            MmaForm::Atb => "mma_atb",
            MmaForm::Atbt => "mma_atbt",
        }
    }
}

/// An `mma` input: a register tile, or a shared tile (Hopper `wgmma` reads B — and optionally A — from
/// shared memory; validation refuses shared operands on AMD, whose MFMAs read registers only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MmaOperand {
    Reg(RegId),
    Shared(SharedView),
}

/// Elementwise functions. Binary ones take two arguments, unary ones one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MapFn {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Exp,
    Exp2,
    Log,
    Neg,
    Abs,
    /// `1/√x` (the device's reciprocal square root: a layernorm's inverse standard deviation).
    Rsqrt,
    /// `1 / (1 + e^(−x))`, the logistic sigmoid (a gate; SiLU's derivative is built from it).
    Sigmoid,
    /// `x / (1 + e^(−x))` = `x · sigmoid(x)`, SiLU (Swish-1; SwiGLU's gate, Shazeer 2020). One op so
    /// that a gate costs one exponential and one division, and the tails are exact: `e^(−x)` is
    /// infinite below about −88, where the quotient is −0.
    Silu,
    /// The hyperbolic tangent (a soft cap's `cap·tanh(x/cap)`, Gemma 2's logits). One op so that each
    /// target takes its cheapest form: CUDA's is the special function unit's `tanh.approx.f32`
    /// (PTX ISA; what FlashAttention's soft cap runs), the others `1 − 2/(e^(2x) + 1)`.
    Tanh,
    /// `1` where `x ≥ y`, else `0` (a mask as a factor: dropout keeps where `uniform ≥ p`).
    Ge,
    /// Copy / convert: the value is rounded to the destination dtype with the op's rounding.
    Copy,
}

impl MapFn {
    pub fn arity(self) -> usize {
        match self {
            MapFn::Add
            | MapFn::Sub
            | MapFn::Mul
            | MapFn::Div
            | MapFn::Max
            | MapFn::Min
            | MapFn::Ge => 2,
            _ => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            MapFn::Add => "add",
            MapFn::Sub => "sub",
            MapFn::Mul => "mul",
            MapFn::Div => "div",
            MapFn::Max => "max",
            MapFn::Min => "min",
            MapFn::Exp => "exp",
            MapFn::Exp2 => "exp2",
            MapFn::Log => "log",
            MapFn::Neg => "neg",
            MapFn::Abs => "abs",
            MapFn::Rsqrt => "rsqrt",
            MapFn::Sigmoid => "sigmoid",
            MapFn::Silu => "silu",
            MapFn::Tanh => "tanh",
            MapFn::Ge => "ge",
            MapFn::Copy => "copy",
        }
    }
}

/// An argument of an elementwise map, as seen at element `(i, j)` of the destination.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arg {
    /// The same-shaped register tile or vector, element `(i, j)`.
    Reg(RegId),
    /// A per-row vector broadcast along each row: element `v[i]` (`sub_row`, `mul_row`, ...).
    RowBcast(RegId),
    /// A per-column vector broadcast along each column: element `v[j]` (`sub_col`, `mul_col`, ...).
    ColBcast(RegId),
    Scalar(#[serde(with = "crate::serial::any_f32")] f32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// Which elements a [`Op::Mask`] keeps (others are set to its value). Coordinates are global: element
/// `(i, j)` of the tile is `(row0 + i, col0 + j)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskRule {
    /// Keep `col <= row + offset`: causal attention on a `queries × keys` score tile (`offset` 0 is
    /// PyTorch's top-left `is_causal`; `seq_k - seq_q` aligns bottom-right).
    Causal { offset: Expr },
    /// Keep `row <= col + offset`: the same rule on a transposed `keys × queries` tile (HipKittens E.3
    /// computes `K·Qᵀ`).
    CausalT { offset: Expr },
    /// Keep `col >= row + offset`: the left edge of a sliding window on a `queries × keys` tile
    /// (FlashAttention's `window_size[0]`; the right edge is [`MaskRule::Causal`]).
    WindowStart { offset: Expr },
    /// Keep `row >= col + offset`: the same rule on a transposed `keys × queries` tile.
    WindowStartT { offset: Expr },
    /// Keep `col < limit` (key columns past the sequence end).
    ColsBelow(Expr),
    /// Keep `row < limit`.
    RowsBelow(Expr),
}

/// Which asynchronous queue a wait drains. `Async`: global→shared loads (AMD `vmcnt` for
/// `buffer_load … lds`; Hopper TMA completion on an mbarrier). `Shared`: shared→register loads (AMD
/// `lgkmcnt`; a no-op on Hopper where `ld.shared` is synchronous to the issuing thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitQueue {
    Async,
    Shared,
}

/// How far a wait drains its queue, counted in IR ops issued by this wave (the lowering converts to
/// instruction counts: one op may be several `buffer_load`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitCount {
    /// Wait until at most `n` of this wave's ops on the queue are outstanding.
    Outstanding(u32),
    /// Let the schedule analysis choose the largest safe count; the interpreter treats it as 0.
    Auto,
}

/// Instruction-scheduling hints for the compiler (no effect on values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedHint {
    /// Nothing may be scheduled across this point (AMD `sched_barrier(0)`, HipKittens E.1).
    Fence,
    /// Interleave `mma` matrix ops with `other` vector ops, `groups` times (HipKittens E.3
    /// `sched_barrier_pairs<mma, other, id>`; AMD `sched_group_barrier`).
    Pairs { mma: u32, other: u32, groups: u32 },
    /// Interleave `mma` matrix ops with `reads` shared→register reads, `groups` times (AMD
    /// `sched_group_barrier` on MFMA and DS-read groups; the 4-wave interleave, HipKittens §3.3.2).
    MmaReads { mma: u32, reads: u32, groups: u32 },
    /// Interleave `mma` matrix ops with `exp` transcendental ops (the softmax's `exp2`), `groups`
    /// times, in this order: HipKittens E.3's compute clusters, one block's MFMAs issued between the
    /// exponentials of another's softmax (AMD `sched_group_barrier` on MFMA and TRANS groups).
    MmaExp { mma: u32, exp: u32, groups: u32 },
}

/// One operation. Register ops are performed by each executing wave on its own registers; memory ops that
/// waves share name their [`Scope`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Asynchronous global→shared copy of `src` into `dst`, split among the waves of `scope` (each wave
    /// copies a contiguous band of rows). The data lands when the issuing wave executes a covering
    /// [`Op::Wait`] on [`WaitQueue::Async`]; others see it after a barrier. AMD: `buffer_load … lds`;
    /// Hopper: TMA + mbarrier (`scope` then says which waves wait on the barrier).
    LoadAsync {
        dst: SharedView,
        src: GlobalView,
        scope: Scope,
    },
    /// Shared→register load; the destination's layout (row or column) decides the instruction
    /// (AMD `ds_read_b128` or `ds_read_b64_tr_b16`, HipKittens D.1).
    LoadShared {
        dst: RegId,
        src: SharedView,
    },
    /// Synchronous global→register load.
    LoadGlobal {
        dst: RegId,
        src: GlobalView,
    },
    /// Register→shared store, rounding to the shared dtype.
    StoreShared {
        dst: SharedView,
        src: RegId,
        rounding: Rounding,
    },
    /// Register→global store, rounding to the tensor dtype; elements outside the tensor are dropped.
    StoreGlobal {
        dst: GlobalView,
        src: RegId,
        rounding: Rounding,
    },
    /// `dst[i,j] += src[i,j]` for every element of the view inside the tensor, an f32 read-modify-write
    /// per element that is atomic with respect to every other block's (Hopper `red.global.add.f32`): a
    /// commutative reduction into an f32 tensor, so blocks may add into the same elements (FlashAttention-2
    /// §3.2's dQ accumulated by the key blocks). The CPU interpreter adds in launch order (block id, then
    /// program order); a device adds in whatever order the blocks reach memory, so the result is not
    /// bit-reproducible from run to run (f32 addition is not associative), only equal up to rounding.
    AtomicAdd {
        dst: GlobalView,
        src: RegId,
    },
    /// `d = op(a)·op(b) + c` (`c: None` is zero), f32 accumulation, rounded to `d`'s dtype.
    Mma {
        form: MmaForm,
        d: RegId,
        a: MmaOperand,
        b: MmaOperand,
        c: Option<RegId>,
    },
    /// Elementwise `dst[i,j] = f(args…)` computed in f32 and rounded to `dst`'s dtype with `rounding`.
    Map {
        dst: RegId,
        f: MapFn,
        args: Vec<Arg>,
        rounding: Rounding,
    },
    /// `dst[k] = op over the axis of src` (with `Rows` one result per row), combined with `acc` if given.
    Reduce {
        dst: RegId,
        src: RegId,
        axis: Axis,
        op: ReduceOp,
        acc: Option<RegId>,
    },
    /// Uniform random values in [0, 1) from the counter-based stream keyed by `(seed, offset)`
    /// (`crate::philox`): element `(i, j)` of `dst` is `philox::uniform(philox::stream(seed, offset,
    /// index0 + i·row_stride + j))`, so every backend draws the same bits (dropout masks). The 64-bit
    /// `seed` and `offset` are given as 32-bit words `[low, high]`, each expression read modulo 2^32
    /// (kernel parameters are 32-bit on the devices).
    Random {
        dst: RegId,
        seed: [Expr; 2],
        offset: [Expr; 2],
        index0: Expr,
        row_stride: Expr,
    },
    /// Set every element to `value` (`zero`, `neg_infty`).
    Fill {
        dst: RegId,
        #[serde(with = "crate::serial::any_f32")]
        value: f32,
    },
    /// `dst = srcᵀ` with the layout swapped (HipKittens `swap_layout_and_transpose`): the same registers
    /// reinterpreted, so it is free on the device.
    Transpose {
        dst: RegId,
        src: RegId,
    },
    /// `dst = src` in the other layout (a register shuffle on the device).
    SwapLayout {
        dst: RegId,
        src: RegId,
    },
    /// Set elements not kept by `rule` to `value`; `(row0, col0)` is the tile's global origin.
    Mask {
        dst: RegId,
        rule: MaskRule,
        row0: Expr,
        col0: Expr,
        #[serde(with = "crate::serial::any_f32")]
        value: f32,
    },
    /// ALiBi's linear bias (Press et al., "Train Short, Test Long"; FlashAttention's `alibi_slopes`):
    /// `dst[i][j] += slope·|row0 + i − col0 − j|` in f32, `slope` a vector of `dst` broadcast along
    /// its axis (`slope[i]` for a `Rows` vector, `slope[j]` for a `Cols` one; an attention holds one
    /// slope per block in every entry, in whichever vector its layout keeps). The distance is
    /// symmetric, so a transposed score tile (keys × queries) takes the same op with the origins
    /// swapped.
    Alibi {
        dst: RegId,
        slope: RegId,
        row0: Expr,
        col0: Expr,
    },
    /// Block until this wave has at most `count` outstanding ops on `queue`.
    Wait {
        queue: WaitQueue,
        count: WaitCount,
    },
    /// Barrier over `scope` (AMD `s_barrier`; NVIDIA `bar.sync`/named barriers). Executed by a subset of
    /// waves inside a conditional, it is the 8-wave ping-pong's stagger barrier.
    Barrier {
        scope: Scope,
    },
    /// Wave priority (AMD `s_setprio`, 0–3); a no-op on NVIDIA.
    Priority(u8),
    Hint(SchedHint),
    /// Hopper register reallocation (`setmaxnreg`): producers shrink, consumers grow; a no-op on AMD.
    SetMaxRegs {
        regs: u32,
    },
}

impl Op {
    /// A short description for error messages and listings.
    pub fn name(&self) -> String {
        match self {
            Op::LoadAsync { .. } => "load_async".into(),
            Op::LoadShared { .. } => "load (shared→reg)".into(),
            Op::LoadGlobal { .. } => "load (global→reg)".into(),
            Op::StoreShared { .. } => "store (reg→shared)".into(),
            Op::StoreGlobal { .. } => "store (reg→global)".into(),
            Op::AtomicAdd { .. } => "atomic_add (reg→global)".into(),
            Op::Mma { form, .. } => form.name().into(),
            Op::Map { f, .. } => f.name().into(),
            Op::Reduce { axis, op, .. } => {
                let a = if *axis == Axis::Rows { "row" } else { "col" };
                format!("{a}_{}", format!("{op:?}").to_lowercase())
            }
            Op::Fill { .. } => "fill".into(),
            Op::Random { .. } => "random".into(),
            Op::Transpose { .. } => "transpose".into(),
            Op::SwapLayout { .. } => "swap_layout".into(),
            Op::Mask { .. } => "mask".into(),
            Op::Alibi { .. } => "alibi".into(),
            Op::Wait { queue, count } => format!("wait({queue:?}, {count:?})"),
            Op::Barrier { scope } => format!("barrier({scope:?})"),
            Op::Priority(p) => format!("priority({p})"),
            Op::Hint(h) => format!("hint({h:?})"),
            Op::SetMaxRegs { regs } => format!("setmaxnreg({regs})"),
        }
    }
}

/// What a cluster does in its schedule (HipKittens §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterKind {
    /// Matrix work: run at raised priority in the ping-pong.
    Compute,
    /// Loads and stores.
    Memory,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stmt {
    /// An op; `implied` marks ops the schedule expansion inserted (stagger barriers, priorities, fences).
    Op { op: Op, implied: bool },
    /// `for var in start..end` (step 1).
    For {
        var: VarId,
        start: Expr,
        end: Expr,
        body: Vec<Stmt>,
    },
    If {
        cond: Cond,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    /// A cluster of the schedule; after expansion its body already holds the implied ops.
    Cluster {
        kind: ClusterKind,
        label: String,
        body: Vec<Stmt>,
    },
    /// The region in which the two ping-pong warpgroups run offset by one cluster; expansion puts the
    /// conditional stagger barrier before it and the re-join barrier after it.
    Staggered { body: Vec<Stmt> },
    /// Warp-specialised roles (producer/consumer schedule): expansion turns it into a conditional on the
    /// warpgroup with the register reallocation of each side.
    Roles {
        producer: Vec<Stmt>,
        consumer: Vec<Stmt>,
    },
    /// The last block to arrive runs `body` (CUTLASS's stream-K "fixup": split-K's partials reduced
    /// in the GEMM's own launch). The waves of `scope` arrive on element `index` (dimension 0) of the
    /// `i32` global `counter`, zero at launch: their earlier global stores are released, one atomic
    /// increment is made (Hopper `atom.acq_rel.gpu`), and the block making the `arrivals`-th resets
    /// the element to zero and, having acquired the other arrivals' released stores, runs `body`.
    /// The interpreter models exactly that hand-off (`crate::interp`); the builder puts a barrier
    /// over `scope` first ([`crate::KernelBuilder::last_arrival`]).
    LastArrival {
        counter: GlobalId,
        index: Expr,
        arrivals: Expr,
        scope: Scope,
        body: Vec<Stmt>,
    },
}

/// How the kernel's waves share the work (HipKittens §3.3.2; docs/architecture.md principle 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Schedule {
    /// No implied synchronisation; `waves` waves.
    Plain { waves: u32 },
    /// Eight waves, two warpgroups alternating compute and memory clusters with a barrier at each
    /// cluster end, priority 1 on compute clusters, a conditional stagger barrier (HipKittens E.1).
    PingPong8,
    /// Four waves, one per SIMD, each interleaving compute and memory; clusters end in a fence only.
    Interleave4,
    /// `producers` warpgroups load, `consumers` warpgroups compute (Hopper warp specialisation);
    /// register reallocation to `producer_regs` / `consumer_regs`.
    ProducerConsumer {
        producers: u32,
        consumers: u32,
        producer_regs: u32,
        consumer_regs: u32,
    },
}

impl Schedule {
    pub fn waves(self) -> u32 {
        match self {
            Schedule::Plain { waves } => waves,
            Schedule::PingPong8 => 8,
            Schedule::Interleave4 => 4,
            Schedule::ProducerConsumer {
                producers,
                consumers,
                ..
            } => 4 * (producers + consumers),
        }
    }
    /// The waves of the consumer role (from the producers' last wave on), for a producer/consumer
    /// schedule; `None` for the others (they have no roles).
    pub fn consumer_waves(self) -> Option<std::ops::Range<u32>> {
        match self {
            Schedule::ProducerConsumer { producers, .. } => Some(4 * producers..self.waves()),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Plain { .. } => "plain",
            Schedule::PingPong8 => "8-wave ping-pong",
            Schedule::Interleave4 => "4-wave interleave",
            Schedule::ProducerConsumer { .. } => "producer/consumer",
        }
    }
}

/// Which logical tile a launched block computes: one grid-order type for the whole project, defined
/// beside the remap functions that evaluate it.
pub use kittens_grid::remap::GridOrder;

/// The launch: a 1-d grid of `∏ extents` blocks; `remap` maps each launch id to coordinates
/// `Expr::Block(0..extents.len())`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    pub extents: Vec<Expr>,
    pub remap: GridOrder,
    /// A persistent lowering runs launch ids `2u` and `2u + 1` on one block, one after the other,
    /// whenever there are more tiles than blocks ([`crate::KernelBuilder::pair_long_short`]).
    pub paired: bool,
    /// Blocks of consecutive tiles along extent 0 (a GEMM's row tiles) that run as one thread-block
    /// cluster on GPUs that have them (Hopper): 1 (none), 2 or 4. A load whose global origin does not
    /// depend on `Block(0)` reads the same box in every block of a cluster; the sm_90a lowering has
    /// each block fetch its share of the rows and multicast it to all. Nothing else changes: the interpreter and the AMD
    /// lowerings, which run a block per tile, ignore it.
    pub cluster: u32,
    /// Blocks the program asks to have resident on one SM at once (1: no ask): sm_90a's lowering
    /// caps each thread's registers so that this many blocks fit (`__launch_bounds__(threads,
    /// resident)`, CUDA C++ Programming Guide, "Launch Bounds"), so that a row-wise loop keeps
    /// several rows in flight per SM. The interpreter and the AMD lowerings ignore it.
    #[serde(default = "one")]
    pub resident: u32,
    /// Whether every element offset of the program fits 32-bit signed arithmetic: each global spans
    /// at most [`INDEX32_MAX_SPAN`] elements at its launch (the launcher checks, and refuses a larger
    /// tensor by name). The strip lowering then does its index arithmetic in `int` rather than `long
    /// long` (fewer registers: a 64-bit offset takes two); the other lowerings ignore it.
    #[serde(default)]
    pub index32: bool,
}

/// The most elements a global of an [`Grid::index32`] program spans: half of `2^31`, so that an
/// offset computed past a tensor's end for a masked-off row or column (up to a block's rows and a
/// tile's columns beyond it) still fits.
pub const INDEX32_MAX_SPAN: u64 = 1 << 30;

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    pub schedule: Schedule,
    /// Waves per block (= `schedule.waves()`).
    pub waves: u32,
    pub params: Vec<ParamDecl>,
    pub globals: Vec<GlobalDecl>,
    pub shared: Vec<SharedDecl>,
    pub regs: Vec<RegDecl>,
    pub vars: Vec<VarDecl>,
    pub grid: Grid,
    /// The expanded body.
    pub body: Vec<Stmt>,
}

impl Kernel {
    /// Whether the kernel reads indices from memory: an `i32` index tensor for [`crate::Expr::Elem`]
    /// or a per-block [`Clip`] (FlashAttention's varlen batches). Lowerings that do not emit these
    /// yet refuse such a kernel rather than drop the reads.
    pub fn reads_indices(&self) -> bool {
        self.globals
            .iter()
            .any(|g| g.dtype == DType::I32 || g.clip.is_some())
    }
    pub fn reg(&self, r: RegId) -> &RegDecl {
        &self.regs[r.0 as usize]
    }
    pub fn global(&self, g: GlobalId) -> &GlobalDecl {
        &self.globals[g.0 as usize]
    }
    pub fn shared_decl(&self, s: SharedId) -> &SharedDecl {
        &self.shared[s.0 as usize]
    }
    pub fn param_index(&self, name: &str) -> Option<ParamId> {
        self.params
            .iter()
            .position(|p| p.name == name)
            .map(|i| ParamId(i as u32))
    }
    /// Shared memory the kernel allocates per block, in bytes (unpadded; see [`Kernel::shared_offsets`]).
    pub fn shared_bytes(&self) -> u32 {
        self.shared.iter().map(SharedDecl::bytes).sum()
    }

    /// Byte offset of each shared ring in one allocation, each aligned to `align` bytes (a power of two;
    /// e.g. 1024 for Hopper's 128-byte TMA swizzle, whose pattern repeats every 1024 bytes), and the total.
    pub fn shared_offsets(&self, align: u32) -> (Vec<u32>, u32) {
        let a = align.max(1);
        let mut at = 0u32;
        let offs = self
            .shared
            .iter()
            .map(|s| {
                let o = at.div_ceil(a) * a;
                at = o + s.bytes();
                o
            })
            .collect();
        (offs, at)
    }

    /// Blocks a launch with `params` runs (`∏ grid.extents`); `None` if an extent cannot be evaluated.
    pub fn blocks(&self, params: &[i64]) -> Option<u64> {
        let env = crate::expr::Env {
            params,
            vars: &[],
            block: &[],
            wave: 0,
        };
        self.grid
            .extents
            .iter()
            .try_fold(1u64, |n, e| Some(n * e.eval(&env)?.max(0) as u64))
    }

    /// Clusters of the launch (`Grid::cluster` blocks each; extent 0 rounded up to a whole number of
    /// them): the tiles themselves without clusters.
    pub fn cluster_tiles(&self, params: &[i64]) -> Option<u64> {
        let env = crate::expr::Env {
            params,
            vars: &[],
            block: &[],
            wave: 0,
        };
        let c = u64::from(self.grid.cluster.max(1));
        self.grid
            .extents
            .iter()
            .enumerate()
            .try_fold(1u64, |n, (i, e)| {
                let x = e.eval(&env)?.max(0) as u64;
                Some(n * if i == 0 { x.div_ceil(c) } else { x })
            })
    }
}
