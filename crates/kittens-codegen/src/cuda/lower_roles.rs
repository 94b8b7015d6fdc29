//! The roles of the sm_90a lowering: the shape check behind its barrier → mbarrier hand-off (`lower.rs`
//! module docs: which programs may have their block barriers replaced by per-slot full/empty
//! mbarriers), and the emission of the role split over the persistent grid's tiles.

use kittens_ir::{ClusterKind, Cond, GridOrder, Kernel, MmaOperand, Op, Scope, Stmt, WaitQueue};

use super::emit::{unsupported, CudaLowerError, Emit, Role};

/// The two role bodies of the expanded `Roles` split (each without its leading `set_max_regs`).
pub(super) struct Roles<'k> {
    pub(super) cond: &'k Cond,
    pub(super) producer: (&'k Op, &'k [Stmt]),
    pub(super) consumer: (&'k Op, &'k [Stmt]),
}

/// The shape the barrier → mbarrier hand-off needs (module docs): the body is the role split alone;
/// the producer only loads, waits and hands over; the consumer loads nothing asynchronously and reads
/// shared memory only as `mma` operands after a block barrier ([`walk`]), or tiles it stores itself
/// ([`consumer_owned`]: private to a warpgroup, ordered by warpgroup barriers).
pub(super) fn check_roles(k: &Kernel) -> Result<Roles<'_>, CudaLowerError> {
    let [Stmt::If { cond, then, els }] = k.body.as_slice() else {
        return unsupported("a body other than the producer/consumer role split");
    };
    let (Some(producer), Some(consumer)) = (split_role(then), split_role(els)) else {
        return unsupported("roles that do not start with set_max_regs");
    };
    walk(producer.1, false, &mut |op, _| match op {
        Op::LoadAsync { .. }
        | Op::Wait {
            queue: WaitQueue::Async,
            ..
        }
        | Op::Hint(_) => Ok(()),
        Op::Barrier {
            scope: Scope::Block,
        } => Ok(()),
        o => unsupported(format!(
            "`{}` in the producer role (it only loads and hands over)",
            o.name()
        )),
    })?;
    walk(consumer.1, false, &mut |op, guarded| match op {
        Op::LoadAsync { .. } | Op::LoadShared { .. } => {
            unsupported(format!("`{}` in the consumer role", op.name()))
        }
        Op::Mma { a, b, .. }
            if !guarded && [a, b].iter().any(|o| matches!(o, MmaOperand::Shared(_))) =>
        {
            unsupported("a shared mma operand read before any block barrier")
        }
        Op::Barrier { scope: Scope::Wave } => unsupported("a wave barrier in the consumer role"),
        _ => Ok(()),
    })?;
    Ok(Roles {
        cond,
        producer,
        consumer,
    })
}

/// A role body split into its leading `set_max_regs` and the rest.
fn split_role(b: &[Stmt]) -> Option<(&Op, &[Stmt])> {
    match b.split_first() {
        Some((
            Stmt::Op {
                op: op @ Op::SetMaxRegs { .. },
                ..
            },
            rest,
        )) => Some((op, rest)),
        _ => None,
    }
}

/// Visits every op with whether a block barrier hands its reads over: it sits in a loop whose body
/// starts with one, or after one (or after such a loop) in the same statement list — a key block
/// read before the loop that streams the rest, or after it (a rotated loop's first and last steps).
/// The lowering waits on each slot's `full` barrier before its first read in an epoch either way.
fn walk(
    body: &[Stmt],
    guarded: bool,
    f: &mut dyn FnMut(&Op, bool) -> Result<(), CudaLowerError>,
) -> Result<(), CudaLowerError> {
    let mut guarded = guarded;
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                f(op, guarded)?;
                if matches!(
                    op,
                    Op::Barrier {
                        scope: Scope::Block
                    }
                ) {
                    guarded = true;
                }
            }
            Stmt::For { body, .. } => {
                let starts = matches!(
                    body.first(),
                    Some(Stmt::Op {
                        op: Op::Barrier {
                            scope: Scope::Block
                        },
                        ..
                    })
                );
                walk(body, guarded || starts, f)?;
                guarded |= starts;
            }
            Stmt::If { then, els, .. } => {
                walk(then, guarded, f)?;
                walk(els, guarded, f)?
            }
            Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => walk(body, guarded, f)?,
            Stmt::Roles { .. } => return unsupported("unexpanded roles"),
        }
    }
    Ok(())
}

/// The consumer warpgroups' common barrier (the IR's `Scope::Consumers`): the ID after the last
/// warpgroup's own, so again no ID with two thread counts; Hopper has 16 (PTX ISA `bar.sync`).
pub(super) fn consumers_barrier(waves: u32, consumer_wgs: u32) -> Result<String, CudaLowerError> {
    let id = 4 + waves / 4;
    if id > 15 {
        return unsupported(format!(
            "a consumers barrier in a block of {waves} warps (named barrier {id} of 0-15)"
        ));
    }
    Ok(format!("kt::named_barrier({id}, {});", 128 * consumer_wgs))
}

/// A chunk of a run of consecutive `load_async` ops: loads with the same ring-slot index into rings of
/// the same depth. One chunk becomes one fill: one `empty` wait, one `full` barrier armed with the sum
/// of the bytes, one TMA per load: one barrier pair per stage for A and B together.
pub(super) fn fill_chunks<'k>(k: &Kernel, run: &[&'k Op]) -> Vec<Vec<&'k Op>> {
    let key = |op: &Op| match op {
        Op::LoadAsync { dst, .. } => Some((dst.index.clone(), k.shared_decl(dst.buf).count)),
        _ => None,
    };
    let mut chunks: Vec<Vec<&Op>> = Vec::new();
    for &op in run {
        match chunks.last_mut() {
            Some(c) if key(c[0]) == key(op) && key(op).is_some() => c.push(op),
            _ => chunks.push(vec![op]),
        }
    }
    chunks
}

/// Per shared ring, the distinct slot expressions of the consumer's `mma` reads of it.
fn consumer_reads(body: &[Stmt], out: &mut Vec<Vec<kittens_ir::Expr>>) {
    for s in body {
        match s {
            Stmt::Op {
                op: Op::Mma { a, b, .. },
                ..
            } => {
                for o in [a, b] {
                    if let MmaOperand::Shared(v) = o {
                        let r = &mut out[v.buf.0 as usize];
                        if !r.contains(&v.index) {
                            r.push(v.index.clone());
                        }
                    }
                }
            }
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => consumer_reads(body, out),
            Stmt::If { then, els, .. } => {
                consumer_reads(then, out);
                consumer_reads(els, out)
            }
            Stmt::Op { .. } | Stmt::Roles { .. } => {}
        }
    }
}

/// Maximal runs of consecutive `load_async` statements in one statement list, recursively.
pub(super) fn load_runs<'k>(body: &'k [Stmt], out: &mut Vec<Vec<&'k Op>>) {
    let mut run: Vec<&Op> = Vec::new();
    for s in body {
        if let Stmt::Op {
            op: op @ Op::LoadAsync { .. },
            ..
        } = s
        {
            run.push(op);
            continue;
        }
        if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
        match s {
            Stmt::For { body, .. } | Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                load_runs(body, out)
            }
            Stmt::If { then, els, .. } => {
                load_runs(then, out);
                load_runs(els, out)
            }
            _ => {}
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
}

/// The first mbarrier of each shared ring and the number of mbarriers (per kind, full and empty).
/// Rings that are always filled together (every fill chunk that loads one of them loads exactly the
/// same set) share one barrier per slot; any other ring has its own.
///
/// Rings filled together share only if the consumer reads them with the same slot expressions: a ring
/// read a key block later than its partner (attention's V in the rotated loop) would otherwise find
/// the shared barrier's phase already advanced by the partner's hand-off — on the H100 that hung.
pub(super) fn ring_barriers(k: &Kernel, producer: &[Stmt], consumer: &[Stmt]) -> (Vec<u32>, u32) {
    let mut reads: Vec<Vec<kittens_ir::Expr>> = vec![Vec::new(); k.shared.len()];
    consumer_reads(consumer, &mut reads);
    let mut runs = Vec::new();
    load_runs(producer, &mut runs);
    let ring = |op: &Op| match op {
        Op::LoadAsync { dst, .. } => dst.buf.0 as usize,
        _ => usize::MAX,
    };
    // The set of rings filled together with each ring; None = not loaded yet; a ring seen with two
    // different sets goes alone.
    let mut set: Vec<Option<Vec<usize>>> = vec![None; k.shared.len()];
    let mut alone = vec![false; k.shared.len()];
    for run in &runs {
        for chunk in fill_chunks(k, run) {
            let mut rings: Vec<usize> = chunk.iter().map(|o| ring(o)).collect();
            rings.sort_unstable();
            let dup = rings.windows(2).any(|w| w[0] == w[1]);
            for &r in &rings {
                match &set[r] {
                    _ if dup => alone[r] = true,
                    None => set[r] = Some(rings.clone()),
                    Some(s) if *s != rings => alone[r] = true,
                    Some(_) => {}
                }
            }
        }
    }
    // A set is shared only if none of its members went alone and all are read with the same slot
    // expressions.
    for r in 0..k.shared.len() {
        if let Some(s) = &set[r] {
            let same = |x: &[kittens_ir::Expr], y: &[kittens_ir::Expr]| {
                x.len() == y.len() && x.iter().all(|e| y.contains(e))
            };
            let one = |o: usize| same(&reads[o], &reads[s[0]]);
            if s.iter().any(|&o| alone[o] || !one(o)) {
                alone[r] = true;
            }
        }
    }
    let mut first = vec![u32::MAX; k.shared.len()];
    let mut n = 0u32;
    for r in 0..k.shared.len() {
        if first[r] != u32::MAX {
            continue;
        }
        let members = match &set[r] {
            Some(s) if !alone[r] => s.clone(),
            _ => vec![r],
        };
        for &m in &members {
            first[m] = n;
        }
        n += k.shared[r].count;
    }
    (first, n)
}

/// Per shared ring: whether the producer fills it outside every loop of its body, once per tile
/// (attention's Q). Such a slot is read across the tile's hand-off epochs and goes back only when the
/// tile is done.
pub(super) fn resident_rings(k: &Kernel, producer: &[Stmt]) -> Vec<bool> {
    let mut res = vec![false; k.shared.len()];
    fn visit(body: &[Stmt], in_loop: bool, res: &mut Vec<bool>) {
        for s in body {
            match s {
                Stmt::Op {
                    op: Op::LoadAsync { dst, .. },
                    ..
                } if !in_loop => res[dst.buf.0 as usize] = true,
                Stmt::For { body, .. } => visit(body, true, res),
                Stmt::If { then, els, .. } => {
                    visit(then, in_loop, res);
                    visit(els, in_loop, res)
                }
                Stmt::Cluster { body, .. } | Stmt::Staggered { body } => visit(body, in_loop, res),
                _ => {}
            }
        }
    }
    visit(producer, false, &mut res);
    res
}

/// Per shared tile: whether the consumer role stores it ([`Op::StoreShared`]): a tile no producer
/// fills, read back by the same warpgroup's `wgmma`s after a warpgroup barrier (no full/empty
/// barriers; `lower.rs` orders it with named barriers).
pub(super) fn consumer_owned(k: &Kernel, consumer: &[Stmt]) -> Vec<bool> {
    let mut own = vec![false; k.shared.len()];
    let _ = walk(consumer, true, &mut |op, _| {
        if let Op::StoreShared { dst, .. } = op {
            own[dst.buf.0 as usize] = true;
        }
        Ok(())
    });
    own
}

/// The persistent grid and the role split as C: each role's body in a loop over the block's tiles.
impl Emit<'_> {
    /// This tile's coordinates `blk0, blk1, …` from the tile index `kt_tile` and the grid remap.
    /// The extents the tile index runs over, as C: the grid's, except that in clusters of c extent 0
    /// counts groups of c row tiles (block r of the cluster takes row tile c·p + r, [`Emit::grid`]).
    fn tile_extents(&self) -> Vec<String> {
        let c = self.k.grid.cluster.max(1);
        self.k
            .grid
            .extents
            .iter()
            .enumerate()
            .map(|(i, x)| match i {
                0 if c > 1 => format!("(((u32)({}) + {}u) / {c}u)", self.ex(x), c - 1),
                _ => format!("(u32)({})", self.ex(x)),
            })
            .collect()
    }

    pub(super) fn grid(&mut self) -> Result<(), CudaLowerError> {
        let ext = self.tile_extents();
        let n = ext.len();
        // In clusters the last row tiles' blocks may lie past the end (row tiles no multiple of the
        // cluster): their loads read zeros and TMA clips their stores (`lower_frame.rs`).
        let cluster = self.k.grid.cluster.max(1);
        let clustered = cluster > 1;
        let names: Vec<String> = (0..n).map(|i| format!("blk{i}")).collect();
        self.line(format!("int {};", names.join(", ")));
        let window = match self.k.grid.remap {
            GridOrder::RowMajor => None,
            // On a monolithic Hopper die only the group-M window of the chiplet remap matters (the XCD
            // chunking spreads work over AMD's dies).
            // With clusters the window counts clusters of row tiles, so a group spans `cluster` times
            // the rows: for 128-row blocks of 192 or 256 columns on 132 SMs 16 rows balance the A
            // and B bytes a group keeps in the L2, and clusters of two at 3000³ ran 0.850-0.857 of
            // cuBLAS so against 0.839-0.844 with 8 (H100, docs/performance.md); without clusters 8 and 16
            // measured alike over the sweep.
            GridOrder::GroupM { window } | GridOrder::XcdSwizzle { window, .. } if n == 2 => {
                Some(window)
            }
            r => return unsupported(format!("grid remap {r:?} over {n} extents")),
        };
        match window {
            None => {
                self.line("{ u32 id = kt_tile;");
                for i in (0..n).rev() {
                    self.line(format!(
                        "  blk{i} = (int)(id % (u32)({0})); id /= (u32)({0});",
                        ext[i]
                    ));
                }
                self.line("}");
            }
            Some(w) => {
                // Groups of `w` tile-rows, column by column inside a group.
                self.line(format!(
                    "{{ const u32 id = kt_tile, e0 = (u32)({}), e1 = (u32)({}), per = {w}u * e1;",
                    ext[0], ext[1]
                ));
                self.line(format!("  const u32 first = id / per * {w}u, rows = min({w}u, e0 - first), r = id % per;"));
                self.line("  blk0 = (int)(first + r % rows); blk1 = (int)(r / rows); }");
            }
        }
        if clustered {
            self.line(format!("blk0 = {cluster} * blk0 + (int)kt_crank;"));
        }
        Ok(())
    }

    /// The role split, each role's body in a persistent loop over the grid's tiles.
    pub(super) fn roles(&mut self, r: &Roles) -> Result<(), CudaLowerError> {
        // Tiles, or with clusters groups of row tiles.
        let tiles = self.tile_extents();
        self.line(format!("const u32 kt_tiles = {};", tiles.join(" * ")));
        self.line(format!("if {} {{ // producer", self.cond(r.cond)));
        self.depth += 1;
        self.op(r.producer.0)?;
        // The producer role only loads (`check_roles`). With TMA alone one thread issues every
        // load: the others leave at once instead of spinning beside the consumers. `cp.async` fills
        // need all 128 (thread `kt_ptid == 0` issues the TMA loads, if any).
        if self.threaded {
            self.line("{ // every producer thread copies slots with cp.async");
            self.depth += 1;
            self.line("const u32 kt_ptid = threadIdx.x % 128u;");
        } else {
            self.line("if (threadIdx.x % 128 == 0) { // the thread that issues the TMA loads");
            self.depth += 1;
        }
        self.line("u32 kt_ppar = 0, kt_filled = 0; // per slot: parity of the next fill; filled at least once");
        self.role = Role::Producer;
        self.tile_loop(r.producer.1)?;
        self.line(format!("for (u32 i = 0; i < {}u; ++i)", self.nbars));
        if self.k.grid.cluster > 1 {
            // Every fill has been released by the consumers of every block of the cluster (the wait
            // before a next fill): no partner arrives on this block's barriers later, and every
            // multicast into it has landed and been read, so the block may exit — the producer's
            // tail CUTLASS uses instead of a cluster barrier at the end, which cost about 1.4 µs per
            // launch here (docs/performance.md, "gemm_bf16").
            self.line("    if ((kt_filled >> i) & 1u) kt::mbarrier_wait(KT_EMPTY(i), ((kt_ppar >> i) & 1u) ^ 1u);");
        } else {
            // Every fill has landed before the block may exit (each one is also consumed).
            self.line("    if ((kt_filled >> i) & 1u) kt::mbarrier_wait(KT_FULL(i), ((kt_ppar >> i) & 1u) ^ 1u);");
        }
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("} else { // consumers");
        self.depth += 1;
        self.op(r.consumer.0)?;
        self.line("// Per slot: parity of the fill to read next; read since the last barrier; releasable.");
        self.line("u32 kt_cpar = 0, kt_held = 0, kt_rel = 0;");
        if has_turns(r.consumer.1) && self.consumer_wgs() > 1 {
            // The turn token starts with the first consumer warpgroup: the last one hands it over.
            let n = self.consumer_wgs();
            self.line(format!(
                "const u32 kt_cwg = threadIdx.x / 128u - {}u; // consumer warpgroup",
                self.producers
            ));
            self.line(format!(
                "if (kt_cwg == {}u) kt::named_barrier_arrive(1u, 256u);",
                n - 1
            ));
        }
        if self.resident.iter().any(|&r| r) {
            self.line("u32 kt_res = 0; // slots of rings read for the whole tile");
        }
        self.role = Role::Consumer;
        self.tile_loop(r.consumer.1)?;
        self.line("kt::wgmma_wait<0>();");
        // A block may leave once its last TMA stores have read their slabs: the grid's completion
        // covers their writes (the CUDA C++ Programming Guide's TMA store waits with
        // `cp.async.bulk.wait_group.read` before the kernel returns), and waiting for the writes
        // themselves put an L2 round trip on every block's tail.
        self.line("if (threadIdx.x % 128 == 0) kt::tma_store_wait_read<0>();");
        self.role = Role::None;
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    pub(super) fn tile_loop(&mut self, body: &[Stmt]) -> Result<(), CudaLowerError> {
        // `kt_round` counts the block's tiles (`Expr::Round`); producer and consumers count alike.
        if self.k.grid.paired {
            // Launch ids 2u and 2u + 1 on one block in turn (`KernelBuilder::pair_long_short`),
            // where there are more tiles than blocks.
            self.line("const bool kt_pair = kt_tiles > gridDim.x;");
            self.line("for (u32 kt_round = 0;; ++kt_round) {");
            self.depth += 1;
            self.line("const u32 kt_tile = kt_pair ? 2u * (blockIdx.x + (kt_round >> 1) * gridDim.x) + (kt_round & 1u) : blockIdx.x + kt_round * gridDim.x;");
            self.line("if (kt_tile >= kt_tiles) break;");
        } else {
            // A cluster's blocks walk its groups of row tiles together (the launch is a whole number
            // of clusters, `Lowered::blocks`).
            let (first, step) = match self.k.grid.cluster {
                0 | 1 => ("blockIdx.x".to_string(), "gridDim.x".to_string()),
                c => (format!("blockIdx.x / {c}u"), format!("gridDim.x / {c}u")),
            };
            self.line(format!("for (u32 kt_tile = {first}, kt_round = 0; kt_tile < kt_tiles; kt_tile += {step}, ++kt_round) {{"));
            self.line("(void)kt_round;");
            self.depth += 1;
        }
        self.grid()?;
        self.waited.clear();
        self.stmts(body)?;
        self.settle();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}

/// Whether a body holds a compute cluster (a ping-pong turn).
fn has_turns(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Cluster {
            kind: ClusterKind::Compute,
            ..
        } => true,
        Stmt::For { body, .. } | Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
            has_turns(body)
        }
        Stmt::If { then, els, .. } => has_turns(then) || has_turns(els),
        _ => false,
    })
}
