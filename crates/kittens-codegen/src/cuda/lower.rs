//! Lowering a tile-IR kernel with the producer/consumer schedule to CUDA C++ for sm_90a (a plain
//! program goes through the strip emitter: `crate::strip::lower_plain`).
//!
//! The IR's execution model (docs/ir.md): every wave (here: warp) runs the body; register tiles are per
//! wave; an async load names the shared ring slot it writes; a `barrier` orders everything before it in
//! every wave against everything after it. The tile program says *what* flows (K step `t` in slot
//! `t % S`, handed over at a barrier); this lowering decides *how*, with the Hopper machinery of HipKittens
//! §3.3.1 (docs/performance.md, "gemm_bf16", has what each part measured):
//!
//! | IR | CUDA |
//! |---|---|
//! | the role split `if wave/4 < producers { setmaxnreg; P } else { setmaxnreg; C }` | the same branch; each role then runs a **persistent** loop over the grid's tiles (`blockIdx.x`, step `gridDim.x`; launch [`Lowered::blocks`]) so that the next tile's loads overlap this tile's epilogue |
//! | producer `load_async`s into ring slot `s` | one thread (the others leave) waits on `empty[s]`, arms `full[s]` with the bytes and issues one TMA 2-D box per load; consecutive loads into rings always filled together (A and B) share one full/empty pair per slot; from a global with `SlotFill::CpAsync`, all 128 threads copy 16-byte pieces into the same layout and each arrives on `full[s]` when its copies land (`lower_cpasync.rs`) |
//! | producer `wait_async`, producer `barrier` | nothing: the consumers wait on `full[s]` themselves (docs/ir.md "Hopper notes") |
//! | consumer `barrier` | the end of a hand-off epoch: every slot read since the previous barrier becomes releasable |
//! | consumer `mma_abt`, operands in shared | wait on the operands' `full` barriers, then the warpgroup's `wgmma m64nNk16` chain (four waves' 16-row A slices are one 64-row operand); commit; `wait_group 1`, which retires the previous chain, whose releasable slots then go back (`empty`, one arrival per consumer thread) |
//! | `fill` / `store` of the accumulator | `wait_group 0` first; `store` of a warpgroup's 64×N accumulator goes through a 128-byte-swizzled shared slab and TMA stores (clipped by TMA at C's edges) |
//! | `atomic_add` of the accumulator | the retire of its chain; a warpgroup's 64×N f32 box through the slab and TMA reductions (`lower_tma.rs`), else `red.global.add` per element |
//! | consumers `barrier` | the retire of the groups reading consumer-written tiles (`OWNED_READ`), the async-proxy fence, a named barrier of every consumer thread |
//! | `set_max_regs` | `setmaxnreg.dec` / `.inc` against the launch cap of `__launch_bounds__(threads, 1)` |
//!
//! Replacing the barriers by per-slot full/empty mbarriers is sound for programs of the shape checked in
//! [`check_roles`]: one producer role that only loads, a consumer role that reads shared memory only as
//! `mma` operands and only after a block barrier (in a loop that starts with one, or after one), every fill of a slot read before
//! the slot's next fill (the race-freedom the schedule analysis checks). Anything else is refused with
//! [`CudaLowerError::Unsupported`] — this is the subset the Hopper GEMM and attention tile
//! programs (`kittens_kernels::gemm_bf16` and `attn_fwd`, `producer_consumer.rs` each) use, not a
//! general CUDA backend. The consumers' register tiles are `wgmma` fragments (`lower_frag.rs`), the
//! matrix ops `wgmma` chains (`lower_mma.rs`), the loads TMA boxes (`lower_tma.rs`).
//!
//! Kernel arguments ([`Lowered::args`]): one `CUtensorMap` per TMA map, then the global tensors in
//! declaration order (pointers), then the integer parameters. Launch: [`Lowered::blocks`] blocks of
//! [`Lowered::threads`] threads with [`Lowered::dynamic_shared_bytes`].

use std::collections::BTreeSet;

use kittens_hw::Target;
use kittens_ir::{
    ClusterKind, Kernel, MmaOperand, Op, RegId, Schedule, Scope, SharedView, Stmt, WaitQueue,
};

use super::emit::{cname, unsupported, CudaLowerError, Emit, Role, WG_BARRIER};
use super::lower_frame::{
    check_cluster, cp_async_rings, frame, full_barrier_init, global_ctype, Frame,
};
use super::lower_roles::{check_roles, consumer_owned, fill_chunks, resident_rings, ring_barriers};
use super::lower_wait::OWNED_READ;
use super::{prelude_with, WgmmaInput};
use crate::cexpr::{self, ident};
use crate::lowered::{GridRule, KernelArg, Lowered, SharedAlloc};

/// Lowers `k` (producer/consumer schedule) to CUDA for sm_90a: the source and its launch contract (a
/// persistent grid, one block per SM; dynamic shared memory; the tensor maps (the loads' first, then
/// the stored tensor's when the accumulator store goes through TMA), globals, parameters).
pub fn lower(k: &Kernel) -> Result<Lowered, CudaLowerError> {
    kittens_ir::analysis::verify(k)?;
    // A plain program (strips, or any register tiles with `mma.sync`) goes through the strip
    // emitter; the ping-pong and interleave schedules are AMD's.
    if matches!(k.schedule, Schedule::Plain { .. }) {
        if k.reads_indices() {
            return unsupported("index reads (Expr::Elem, per-block clips) in a plain program");
        }
        return crate::strip::lower_plain(k, crate::strip::CUDA)
            .map_err(|e| CudaLowerError::Unsupported(e.0));
    }
    let Schedule::ProducerConsumer { producers, .. } = k.schedule else {
        return unsupported(format!(
            "the {} schedule (Hopper takes plain and producer/consumer programs)",
            k.schedule.name()
        ));
    };
    let roles = check_roles(k)?;
    check_cluster(k, roles.producer.1)?;
    let sm = Target::Sm90a
        .gpu()
        .ok_or_else(|| CudaLowerError::Unsupported("no sm_90a GPU in the catalog".into()))?;
    let threads = sm.wave_width * k.waves;
    // `__launch_bounds__(threads, 1)` caps registers at this many per thread (multiple of 8).
    let cap = (sm.registers_per_cu() / threads) / 8 * 8;
    let (offsets, ring_bytes) = k.shared_offsets(1024);
    let (bar_first, nbars) = ring_barriers(k, roles.producer.1, roles.consumer.1);
    if nbars > 32 {
        return unsupported(format!(
            "{nbars} ring slots (the lowering tracks phases in a 32-bit mask)"
        ));
    }
    let consumer_wgs = k.waves / 4 - producers;
    let cp_rings = cp_async_rings(k);
    let full_init = full_barrier_init(k, &bar_first, nbars, &cp_rings);
    let slab = super::lower_tma::fit_slab(
        super::lower_tma::slab_bytes(k)?,
        consumer_wgs,
        ring_bytes + 16 * nbars + 1024,
        sm.shared_bytes_per_block,
    )?;
    let slabs_at = ring_bytes;
    let bars_at = slabs_at + consumer_wgs * slab;
    let mut e = Emit {
        k,
        out: String::new(),
        depth: 1,
        maps: Vec::new(),
        wgmma_n: BTreeSet::new(),
        wgmma_tb: BTreeSet::new(),
        wgmma_ta_tb: BTreeSet::new(),
        wgmma_ta: BTreeSet::new(),
        wgmma_rs: BTreeSet::new(),
        wgmma_rs_split: BTreeSet::new(),
        groups: Vec::new(),
        open_group: BTreeSet::new(),
        since_barrier: 0,
        reads_ahead: false,
        ring_ahead: vec![false; k.shared.len()],
        dirty: BTreeSet::new(),
        unknown: false,
        resident: resident_rings(k, roles.producer.1),
        owned: consumer_owned(k, roles.consumer.1),
        consumers_exchange: k.ops().iter().any(|r| {
            matches!(
                r.op,
                Op::Barrier {
                    scope: Scope::Consumers
                }
            )
        }),
        group_continues: false,
        group_open: false,
        in_turn: false,
        turn_wait: false,
        owed_wait: false,
        waited: BTreeSet::new(),
        cap,
        offsets,
        bars: bar_first,
        nbars,
        role: Role::None,
        loops: 0,
        producers,
        slab,
        store_map: None,
        threaded: cp_rings.iter().any(|&c| c),
        cp_rings,
    };
    e.declare_fragments()?;
    e.roles(&roles)?;
    let body = std::mem::take(&mut e.out);
    if let Some(m) = e.store_map {
        e.maps.push(m);
    }

    let name = format!("{}_sm90_lowered", ident(&k.name));
    let mut args: Vec<String> = (0..e.maps.len())
        .map(|i| format!("const __grid_constant__ CUtensorMap tma{i}"))
        .collect();
    for g in &k.globals {
        args.push(format!(
            "{} __restrict__ g_{}",
            global_ctype(g)?,
            ident(&g.name)
        ));
    }
    args.extend(k.params.iter().map(|p| format!("int {}", ident(&p.name))));
    let shapes: Vec<(WgmmaInput, u32)> = e.wgmma_n.iter().copied().collect();
    let mut src = prelude_with(&shapes);
    if !e.wgmma_rs.is_empty()
        || !e.wgmma_tb.is_empty()
        || !e.wgmma_ta_tb.is_empty()
        || !e.wgmma_ta.is_empty()
        || !e.wgmma_rs_split.is_empty()
    {
        src.push_str("namespace kt {\n");
        for &(n, tb) in &e.wgmma_rs {
            src.push_str(&super::wgmma_rs_wrapper(n, tb));
        }
        for &n in &e.wgmma_tb {
            src.push_str(&super::wgmma_wrapper_tb(n));
        }
        for &n in &e.wgmma_ta_tb {
            src.push_str(&super::wgmma_wrapper_ta_tb(n));
        }
        for &n in &e.wgmma_ta {
            src.push_str(&super::wgmma_wrapper_ta(n));
        }
        for &(n, tb) in &e.wgmma_rs_split {
            src.push_str(&super::wgmma_rs_wrapper_split(n, tb));
        }
        src.push_str("} // namespace kt\n");
    }
    src.push_str(&frame(&Frame {
        kernel: &k.name,
        entry: &name,
        args: args.join(", "),
        threads,
        nbars,
        empty: 128 * consumer_wgs,
        full_init,
        slabs_at,
        slab,
        bars_at,
        cluster: k.grid.cluster,
        body,
    }));
    let mut kargs: Vec<KernelArg> = e.maps.into_iter().map(KernelArg::TensorMap).collect();
    kargs.extend(k.globals.iter().map(|g| KernelArg::Global {
        name: g.name.clone(),
    }));
    kargs.extend(k.params.iter().map(|p| KernelArg::Param {
        name: p.name.clone(),
    }));
    Ok(Lowered {
        target: Target::Sm90a,
        source: src,
        entry: name,
        threads,
        shared_bytes: bars_at + 16 * nbars + 1024,
        shared_alloc: SharedAlloc::Dynamic,
        grid: GridRule::Persistent,
        cluster: k.grid.cluster.max(1),
        args: kargs,
        // The frame waits after its barrier setup (`lower_frame`).
        waits_for_previous_grid: true,
        ir: k.clone(),
    })
}

impl Emit<'_> {
    pub(super) fn stmts(&mut self, body: &[Stmt]) -> Result<(), CudaLowerError> {
        let mut run: Vec<&Op> = Vec::new();
        let mut fused = false;
        let outer_reads = self.reads_ahead;
        let outer_rings = self.ring_ahead.clone();
        for (i, s) in body.iter().enumerate() {
            // The second `mma` of a pair emitted as one instruction (`lower_mma.rs`).
            if std::mem::take(&mut fused) {
                continue;
            }
            self.reads_ahead = outer_reads || super::lower_wait::reads_shared(&body[i + 1..]);
            self.ring_ahead.clone_from(&outer_rings);
            super::lower_wait::rings_read(&body[i + 1..], &mut self.ring_ahead);
            // A run of consecutive loads (the producer's only loads, `check_roles`) becomes fills.
            if let Stmt::Op {
                op: op @ Op::LoadAsync { .. },
                ..
            } = s
            {
                run.push(op);
                if !matches!(
                    body.get(i + 1),
                    Some(Stmt::Op {
                        op: Op::LoadAsync { .. },
                        ..
                    })
                ) {
                    for chunk in fill_chunks(self.k, &std::mem::take(&mut run)) {
                        self.fills(&chunk)?;
                    }
                }
                continue;
            }
            match s {
                Stmt::Op { op, .. } => {
                    if let Some(Stmt::Op { op: next, .. }) = body.get(i + 1) {
                        let more = matches!(body.get(i + 2), Some(Stmt::Op { op: after, .. }) if super::lower_wait::chained(next, after));
                        if self.role == Role::Consumer && self.mma_rs_pair(op, next, more)? {
                            fused = true;
                            continue;
                        }
                    }
                    self.group_continues = self.role == Role::Consumer
                        && matches!(body.get(i + 1), Some(Stmt::Op { op: next, .. }) if super::lower_wait::chained(op, next));
                    self.op(op)?;
                    self.group_continues = false;
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let v = cexpr::var_name(self.k, var.0);
                    self.settle();
                    self.waited.clear();
                    self.line(format!(
                        "for (int {v} = {}; {v} < {}; ++{v}) {{",
                        self.ex(start),
                        self.ex(end)
                    ));
                    self.loops += 1;
                    // Whatever the previous iteration left in flight is pending at the head: the
                    // fixpoint of the body's effect when there is one (`lower_wait.rs`), else unknown.
                    let head = self.loop_head(body)?;
                    self.enter_head(&head);
                    self.depth += 1;
                    self.stmts(body)?;
                    // The back edge: the next iteration may open another epoch.
                    self.settle();
                    self.depth -= 1;
                    self.waited.clear();
                    // The loop leaves at its head's test.
                    self.enter_head(&head);
                    self.loops -= 1;
                    self.line("}");
                }
                Stmt::If { cond, then, els } => {
                    // A deferred wait goes into the branches only when they hold register work
                    // alone: a barrier, loop or `mma` on one path must find it emitted.
                    if !then.iter().chain(els).all(plain_op) {
                        self.settle();
                    } else if self.role == Role::Consumer {
                        // The waits the branches' register work needs, before the branch: ptxas
                        // serialised every wgmma when a partial wait sat inside it (C7514).
                        let mut regs = Vec::new();
                        super::lower_wait::stmt_regs(then, &mut regs);
                        super::lower_wait::stmt_regs(els, &mut regs);
                        self.retire_for(&regs);
                    }
                    // After the branch, a chain is pending (a wait owed) if it is on either path;
                    // a barrier waited on inside a branch is not waited on along the other.
                    let (before, unknown, owed) =
                        (self.groups.clone(), self.unknown, self.owed_wait);
                    let waited = self.waited.clone();
                    self.line(format!("if {} {{", self.cond(cond)));
                    self.nested(then)?;
                    let (then_groups, then_unknown, then_owed) =
                        (self.groups.clone(), self.unknown, self.owed_wait);
                    self.groups = before;
                    self.unknown = unknown;
                    self.owed_wait = owed;
                    self.waited = waited.clone();
                    if !els.is_empty() {
                        self.line("} else {");
                        self.nested(els)?;
                    }
                    self.line("}");
                    self.merge_groups(then_groups);
                    self.unknown |= then_unknown;
                    self.owed_wait |= then_owed;
                    self.waited = waited;
                }
                Stmt::Cluster {
                    kind: ClusterKind::Compute,
                    label,
                    body,
                } if self.role == Role::Consumer && self.consumer_wgs() > 1 => {
                    self.settle();
                    self.turn(label, body)?
                }
                Stmt::Cluster { label, body, .. } => {
                    self.line(format!("// cluster: {label}"));
                    self.stmts(body)?;
                }
                Stmt::Staggered { body } => self.stmts(body)?,
                Stmt::LastArrival {
                    counter,
                    index,
                    arrivals,
                    scope,
                    body,
                } => self.last_arrival(*counter, index, arrivals, *scope, body)?,
                Stmt::Roles { .. } => {
                    return unsupported("unexpanded roles (build the kernel with KernelBuilder)")
                }
            }
        }
        self.reads_ahead = outer_reads;
        self.ring_ahead = outer_rings;
        Ok(())
    }

    /// A last arrival ([`Stmt::LastArrival`]), in the consumer role over its waves (the barrier over
    /// them is the op before): the first consumer thread makes the one `atom.acq_rel.gpu` increment,
    /// which releases every store the consumers made before the barrier (a release is cumulative
    /// over what the barrier ordered before it) and, in the last block, acquires the other blocks';
    /// it resets the counter there and hands the verdict to the other threads through shared
    /// memory and a second barrier, as CUTLASS's stream-K fixup (docs/references.md).
    fn last_arrival(
        &mut self,
        counter: kittens_ir::GlobalId,
        index: &kittens_ir::Expr,
        arrivals: &kittens_ir::Expr,
        scope: Scope,
        body: &[Stmt],
    ) -> Result<(), CudaLowerError> {
        if self.role != Role::Consumer || scope != Scope::Consumers {
            return unsupported(format!(
                "a last arrival over {scope:?} outside the consumer role (the consumers' arrival only)"
            ));
        }
        self.settle();
        self.retire_all();
        let bar = super::lower_roles::consumers_barrier(self.k.waves, self.consumer_wgs())?;
        let g = format!("g_{}", ident(&self.k.global(counter).name));
        let (idx, n) = (self.ex(index), self.ex(arrivals));
        self.line("{ // last arrival: the tile's last block runs the body");
        self.depth += 1;
        self.line("__shared__ int kt_last;");
        self.line(format!("if (threadIdx.x == {}) {{", 128 * self.producers));
        self.line(format!("    int* kt_ctr = {g} + ({idx});"));
        self.line("    int kt_old;");
        self.line(
            "    asm volatile(\"atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;\" : \"=r\"(kt_old) : \"l\"(kt_ctr) : \"memory\");",
        );
        self.line(format!("    kt_last = kt_old == ({n}) - 1;"));
        self.line("    if (kt_last) *kt_ctr = 0; // left zero for the next launch");
        self.line("}");
        self.line(bar);
        self.line("if (kt_last) {");
        self.nested(body)?;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    pub(super) fn consumer_wgs(&self) -> u32 {
        self.k.waves / 4 - self.producers
    }

    /// A compute cluster of the consumer role: this warpgroup's turn on the tensor cores. The consumer
    /// warpgroups pass one token around a ring of named barriers (FlashAttention-3's warp-scheduler
    /// barriers): warpgroup `w` waits on barrier `1 + w`, issues its `wgmma` groups, and arrives on
    /// the next one's, so one warpgroup's softmax runs while the other's matrix work does. The wait
    /// for the previous group comes after the turn (deferred, [`Emit::settle`]). Values and memory effects are the cluster's body.
    fn turn(&mut self, label: &str, body: &[Stmt]) -> Result<(), CudaLowerError> {
        let n = self.consumer_wgs();
        if n > 3 {
            return unsupported(format!(
                "turns among {n} consumer warpgroups (named barriers 1-3 hold the ring of at most 3)"
            ));
        }
        self.line(format!("// cluster: {label} — this warpgroup's turn"));
        self.line(format!("kt::named_barrier(1u + kt_cwg, {}u);", 128 * 2));
        self.in_turn = true;
        let r = self.stmts(body);
        self.in_turn = false;
        r?;
        self.line(format!(
            "kt::named_barrier_arrive(1u + (kt_cwg + 1u) % {n}u, {}u);",
            128 * 2
        ));
        if std::mem::take(&mut self.turn_wait) {
            self.owed_wait = true;
        }
        Ok(())
    }

    fn nested(&mut self, body: &[Stmt]) -> Result<(), CudaLowerError> {
        self.depth += 1;
        let r = self.stmts(body);
        self.depth -= 1;
        r
    }

    pub(super) fn op(&mut self, op: &Op) -> Result<(), CudaLowerError> {
        match (op, self.role) {
            (
                Op::Wait {
                    queue: WaitQueue::Async,
                    ..
                },
                Role::Producer,
            ) => {
                self.line(
                    "// wait_async: the consumers wait on the slots' full barriers themselves",
                );
                Ok(())
            }
            (
                Op::Barrier {
                    scope: Scope::Block,
                },
                Role::Producer,
            ) => {
                self.line("// barrier: hand-off through full[] (and empty[] before the next fill)");
                Ok(())
            }
            (
                Op::Barrier {
                    scope: Scope::Block,
                },
                Role::Consumer,
            ) => {
                // The deferred wait releases slots of the epoch before this one only.
                self.settle();
                self.waited.clear();
                self.since_barrier = 0;
                self.line("// barrier: the slots read so far go back once their wgmmas retire");
                self.line("kt_rel |= kt_held; kt_cpar ^= kt_held; kt_held = 0;");
                Ok(())
            }
            // ld.shared completes in order for the issuing thread: nothing to wait for.
            (
                Op::Wait {
                    queue: WaitQueue::Shared,
                    ..
                }
                | Op::Priority(_)
                | Op::Hint(_),
                _,
            ) => Ok(()),
            (Op::SetMaxRegs { regs }, _) => {
                if *regs < self.cap {
                    self.line(format!("kt::setmaxnreg_dec<{regs}>();"));
                } else if *regs > self.cap {
                    self.line(format!("kt::setmaxnreg_inc<{regs}>();"));
                }
                Ok(())
            }
            (Op::Fill { dst, .. }, Role::Consumer) => {
                // A register that no `wgmma` writes or reads needs no wait (the running max and
                // sum restarted beside a `P·V` in flight); an accumulator retires every chain.
                let mma_reg = self.k.ops().iter().any(|r| {
                    matches!(r.op, Op::Mma { d, a, .. }
                        if d == dst || matches!(a, MmaOperand::Reg(x) if x == dst))
                });
                if mma_reg || self.unknown {
                    self.retire_all();
                } else {
                    self.dirty.insert(*dst);
                }
                self.reg_op(op)
            }
            (Op::Mma { form, d, a, b, c }, Role::Consumer) => {
                if !self.group_open {
                    self.settle();
                }
                // The chain's registers join its group before the commit closes it, and the
                // marker of a read of a tile the consumers write themselves.
                self.open_group.insert(*d);
                let owned = |o: &MmaOperand| matches!(o, MmaOperand::Shared(v) if self.owned[v.buf.0 as usize]);
                if owned(a) || owned(b) {
                    self.open_group.insert(OWNED_READ);
                }
                if let MmaOperand::Reg(ar) = a {
                    self.open_group.insert(*ar);
                }
                match a {
                    MmaOperand::Reg(ar) => self.mma_rs(*form, *d, *ar, b, c.as_ref())?,
                    MmaOperand::Shared(_) => self.mma(*form, *d, a, b, c.as_ref())?,
                }
                Ok(())
            }
            (Op::StoreGlobal { dst, src, rounding }, Role::Consumer) => {
                self.retire_all();
                if self.k.reg(*src).vec().is_some() {
                    self.store_vec(dst, *src)
                } else if self.k.global(dst.tensor).dims.len() == 2 {
                    self.store(dst, *src, *rounding)
                } else {
                    self.store_direct(dst, *src, *rounding, false)
                }
            }
            (Op::StoreShared { dst, src, rounding }, Role::Consumer) => {
                // Every wgmma of this thread that reads a consumer-written tile (or the stored
                // registers) is retired, so after the warpgroup's barrier no wgmma of the
                // warpgroup still reads the tile (write after read); chains on the producer's
                // slots stay in flight.
                self.retire_for(&[*src, OWNED_READ]);
                self.store_shared_frag(dst, *src, *rounding)
            }
            (
                Op::Barrier {
                    scope: Scope::WarpGroup,
                },
                Role::Consumer,
            ) => {
                self.line("kt::fence_proxy_async(); // the stores above before the wgmmas below read them");
                self.line(WG_BARRIER);
                Ok(())
            }
            (
                Op::Barrier {
                    scope: Scope::Consumers,
                },
                Role::Consumer,
            ) => {
                // The IR's shared reads by `mma` complete at issue: every wgmma of this thread that
                // reads a consumer-written tile is retired before the others may overwrite it.
                self.retire_for(&[OWNED_READ]);
                let bar = super::lower_roles::consumers_barrier(self.k.waves, self.consumer_wgs())?;
                self.line("kt::fence_proxy_async(); // the stores above before any warpgroup's wgmmas read them");
                self.line(bar);
                Ok(())
            }
            (Op::AtomicAdd { dst, src }, Role::Consumer) => {
                self.retire_for(&[*src]);
                if super::lower_tma::reduces_through_slab(self.k, dst, *src) {
                    self.reduce_add(dst, *src)
                } else {
                    self.store_direct(dst, *src, kittens_ir::Rounding::Rtne, true)
                }
            }
            (Op::LoadGlobal { dst, src }, Role::Consumer) => {
                self.retire_for(&[*dst]);
                self.dirty.insert(*dst);
                self.load_broadcast(*dst, src)
            }
            (
                op @ (Op::Map { .. } | Op::Reduce { .. } | Op::Mask { .. } | Op::Alibi { .. }),
                Role::Consumer,
            ) => {
                self.retire_for(&op.regs());
                self.dirty.extend(op.regs());
                self.reg_op(op)
            }
            (other, role) => unsupported(format!("op `{}` in role {role:?}", other.name())),
        }
    }

    /// Name and float count of an accumulator register.
    pub(super) fn acc(&self, r: RegId) -> (String, u32) {
        let d = self.k.reg(r);
        (format!("r_{}", cname(d)), d.shape().1 / 2)
    }

    /// Shared address of a view (row pitch = the tile's row bytes).
    pub(super) fn smem_addr(&self, v: &SharedView, wave: &str) -> String {
        let s = self.k.shared_decl(v.buf);
        let row_bytes = s.tile.cols * s.tile.dtype.bytes();
        format!(
            "(kt_smem + {}u + (u32)({}) * {}u + (u32)({}) * {row_bytes}u + (u32)({}) * {}u)",
            self.offsets[v.buf.0 as usize],
            self.ex_with(&v.index, wave),
            s.tile.bytes(),
            self.ex_with(&v.row0, wave),
            self.ex_with(&v.col0, wave),
            s.tile.dtype.bytes()
        )
    }
}

/// A statement that is register work only (no barrier, `mma`, loop or cluster): a wait deferred
/// past it cannot release a slot too early.
fn plain_op(s: &Stmt) -> bool {
    match s {
        Stmt::Op { op, .. } => !matches!(op, Op::Barrier { .. } | Op::Mma { .. }),
        Stmt::If { then, els, .. } => then.iter().chain(els).all(plain_op),
        _ => false,
    }
}
