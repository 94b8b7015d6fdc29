//! The ops of a kernel body ([`Op`]) and what they are made of: scopes, mma forms and operands,
//! elementwise functions and their arguments, reductions, mask rules, waits and scheduling hints.

use crate::expr::Expr;
use serde::{Deserialize, Serialize};

use super::{Axis, GlobalView, RegId, Rounding, SharedView};

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
    /// barriers take, an upper bound: [`Schedule::consumer_waves`](super::Schedule::consumer_waves) gives the exact ones).
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
