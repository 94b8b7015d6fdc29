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
//!
//! The declarations and views are in `decl.rs`, the ops in `op.rs`; this file holds the body's statements,
//! the schedule, the grid and the kernel that ties them together.

use crate::expr::{Cond, Expr, ParamId, VarId};
use kittens_hw::dtype::DType;
use serde::{Deserialize, Serialize};

mod decl;
mod op;

pub use decl::*;
pub use op::*;

pub use crate::expr::GlobalId;
pub use crate::numerics::Rounding;

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
