//! Running a decoded kernel: one workgroup at a time, its waves interleaved by a seeded random
//! scheduler on one clock (one tick per issued instruction), memory operations landing
//! asynchronously ([`pending`]), `s_barrier` across the workgroup's waves, `s_waitcnt` forcing the
//! operations it waits for. The same seed gives the same run; another seed another legal
//! interleaving and landing order.

mod memory;
mod mfma;
mod pending;
mod salu;
mod stats;
mod valu;
mod vmem;
mod wave;

pub use memory::Memory;
pub use stats::{DsStat, Stats};

use crate::code_object::Kernel;
use crate::decode::{Enc, Instr, Op};
use memory::Lds;
use pending::{Counter, Pending};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use wave::Wave;

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("memory fault: {len} bytes at {addr:#x} are in no allocated buffer")]
    Fault { addr: u64, len: u64 },
    #[error("LDS access of {len} bytes at {addr:#x} is outside the workgroup's {size} bytes")]
    LdsRange { addr: u32, len: u32, size: u32 },
    #[error("a {bytes}-byte buffer access at offset {offset} straddles the resource's NUM_RECORDS {num_records}")]
    Straddle {
        offset: u64,
        bytes: u32,
        num_records: u32,
    },
    #[error("operand code {0} is not readable or writable here")]
    Operand(u16),
    #[error("decoded but not executed by the emulator")]
    Unimplemented,
    #[error("at {offset:#x} `{text}`: {source}")]
    At {
        offset: u32,
        text: String,
        source: Box<ExecError>,
    },
    #[error("landing the memory operation issued at {offset:#x}: {source}")]
    Landing { offset: u32, source: Box<ExecError> },
    #[error("the program counter left the kernel code (byte {0:#x})")]
    Pc(i64),
    #[error("more than {0} instructions issued (the run's budget); an endless loop?")]
    Budget(u64),
    #[error("launch: {0}")]
    Launch(String),
}

impl ExecError {
    pub(crate) fn operand(i: &Instr, code: u16) -> ExecError {
        ExecError::At {
            offset: i.offset,
            text: i.text(),
            source: Box::new(ExecError::Operand(code)),
        }
    }

    fn at(i: &Instr, e: ExecError) -> ExecError {
        match e {
            ExecError::At { .. } | ExecError::Landing { .. } => e,
            e => ExecError::At {
                offset: i.offset,
                text: i.text(),
                source: Box::new(e),
            },
        }
    }
}

/// How a run is randomised and bounded.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// Latency ranges in clock ticks (issued instructions of the workgroup), inclusive.
    pub vm_latency: (u64, u64),
    pub lds_latency: (u64, u64),
    pub smem_latency: (u64, u64),
    /// Most instructions a wave issues before the scheduler may switch waves.
    pub max_burst: u32,
    /// Most instructions the whole dispatch may issue.
    pub max_instructions: u64,
    /// Write [`pending::POISON`] into a load's destination registers when it issues, so that an
    /// instruction reading them before the load lands (a wait missing, too weak, or one the
    /// compiler moved the read above) reads garbage under every landing order, not only under
    /// the orders in which the load happens to land late.
    pub poison_in_flight: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 0x5eed,
            vm_latency: (8, 600),
            lds_latency: (2, 64),
            smem_latency: (2, 200),
            max_burst: 12,
            max_instructions: 4_000_000_000,
            poison_in_flight: true,
        }
    }
}

/// The decoded kernel with its branch targets resolved.
pub struct Program<'k> {
    pub kernel: &'k Kernel,
    pub instrs: Vec<Instr>,
    /// Instruction index of each 4-byte code offset (usize::MAX inside an instruction).
    index: Vec<usize>,
}

impl<'k> Program<'k> {
    pub fn new(kernel: &'k Kernel) -> Result<Program<'k>, crate::SimError> {
        let instrs = crate::decode::decode_all(&kernel.code, kernel.arch)?;
        let mut index = vec![usize::MAX; kernel.code.len() / 4 + 1];
        for (k, i) in instrs.iter().enumerate() {
            index[i.offset as usize / 4] = k;
        }
        Ok(Program {
            kernel,
            instrs,
            index,
        })
    }

    fn at(&self, offset: i64) -> Result<usize, ExecError> {
        usize::try_from(offset / 4)
            .ok()
            .filter(|_| offset % 4 == 0)
            .and_then(|k| self.index.get(k).copied())
            .filter(|&k| k != usize::MAX)
            .ok_or(ExecError::Pc(offset))
    }
}

/// The memory operations one wave has in flight, per counter.
#[derive(Default)]
struct Queues {
    vm: VecDeque<Pending>,
    lds: VecDeque<Pending>,
    smem: Vec<Pending>,
}

/// What an executed instruction asks of the scheduler.
pub(crate) enum Flow {
    Next,
    Jump(i64),
    Barrier,
    End,
    /// `s_waitcnt`: at most this many VM and LGKM operations may remain in flight.
    Wait {
        vm: u32,
        lgkm: u32,
    },
}

/// One workgroup in flight.
pub(crate) struct Group<'p, 'k, 'm> {
    prog: &'p Program<'k>,
    pub(crate) mem: &'m mut Memory,
    pub(crate) lds: Lds,
    pub(crate) waves: Vec<Wave>,
    queues: Vec<Queues>,
    clock: u64,
    rng: SmallRng,
    opts: &'p Options,
    pub(crate) stats: &'p mut Stats,
    issued: &'p mut u64,
}

/// A dispatch: the grid in workgroups and the workgroup size in work-items (1-D).
#[derive(Debug, Clone, Copy)]
pub struct Dispatch {
    pub workgroups: [u32; 3],
    pub workgroup_size: u32,
    pub kernarg: u64,
}

/// Run every workgroup of `d` to completion.
pub fn run(
    prog: &Program,
    mem: &mut Memory,
    d: Dispatch,
    opts: &Options,
    stats: &mut Stats,
) -> Result<(), ExecError> {
    let k = prog.kernel;
    let kd = &k.descriptor;
    if kd.private_segment_fixed_size != 0 {
        return Err(ExecError::Launch(format!(
            "the kernel uses {} bytes of scratch, which the emulator does not provide",
            kd.private_segment_fixed_size
        )));
    }
    if d.workgroup_size == 0 || d.workgroup_size > k.max_workgroup_size {
        return Err(ExecError::Launch(format!(
            "workgroup of {} work-items (the kernel allows 1..={})",
            d.workgroup_size, k.max_workgroup_size
        )));
    }
    if k.wavefront_size != 64 {
        return Err(ExecError::Launch(format!(
            "wavefront size {} (only wave64 is emulated)",
            k.wavefront_size
        )));
    }
    let kernarg_sgpr = kd
        .kernarg_sgpr()
        .ok_or_else(|| ExecError::Launch("the kernel takes no kernarg pointer".into()))?;
    let mut issued = 0u64;
    let mut rng = SmallRng::seed_from_u64(opts.seed);
    for z in 0..d.workgroups[2] {
        for y in 0..d.workgroups[1] {
            for x in 0..d.workgroups[0] {
                let n_waves = d.workgroup_size.div_ceil(64) as usize;
                let mut waves = Vec::with_capacity(n_waves);
                for wv in 0..n_waves {
                    let first = 64 * wv as u32;
                    let active = (d.workgroup_size - first).min(64);
                    let exec = if active == 64 {
                        u64::MAX
                    } else {
                        (1u64 << active) - 1
                    };
                    let mut w = Wave::new(exec);
                    w.sgpr[kernarg_sgpr as usize] = d.kernarg as u32;
                    w.sgpr[kernarg_sgpr as usize + 1] = (d.kernarg >> 32) as u32;
                    let mut s = kd.user_sgpr_count() as usize;
                    for (on, id) in kd.workgroup_id_enabled().into_iter().zip([x, y, z]) {
                        if on {
                            w.sgpr[s] = id;
                            s += 1;
                        }
                    }
                    // Work-item ids in v0 (packed X | Y << 10 | Z << 20 on gfx90a and later; the
                    // dispatch is 1-D, so X alone).
                    w.v[0] = std::array::from_fn(|l| first + l as u32);
                    waves.push(w);
                }
                let mut g = Group {
                    prog,
                    mem,
                    lds: Lds {
                        bytes: vec![0; k.group_segment_size as usize],
                    },
                    queues: (0..n_waves).map(|_| Queues::default()).collect(),
                    waves,
                    clock: 0,
                    rng: SmallRng::seed_from_u64(rng.gen()),
                    opts,
                    stats,
                    issued: &mut issued,
                };
                g.run()?;
            }
        }
    }
    Ok(())
}

impl Group<'_, '_, '_> {
    fn run(&mut self) -> Result<(), ExecError> {
        loop {
            let runnable: Vec<usize> = (0..self.waves.len())
                .filter(|&w| !self.waves[w].done && !self.waves[w].at_barrier)
                .collect();
            if runnable.is_empty() {
                let live: Vec<usize> = (0..self.waves.len())
                    .filter(|&w| !self.waves[w].done)
                    .collect();
                if live.is_empty() {
                    // Everything issued lands before the workgroup retires.
                    for w in 0..self.waves.len() {
                        self.drain(w, 0, 0)?;
                    }
                    return Ok(());
                }
                // Every live wave waits at the barrier: release it (waves that ended no longer count).
                for &w in &live {
                    self.waves[w].at_barrier = false;
                }
                continue;
            }
            let w = runnable[self.rng.gen_range(0..runnable.len())];
            let burst = self.rng.gen_range(1..=self.opts.max_burst.max(1));
            for _ in 0..burst {
                if self.waves[w].done || self.waves[w].at_barrier {
                    break;
                }
                self.step(w)?;
            }
        }
    }

    /// Land what is due on the clock, for every wave.
    fn land_due(&mut self) -> Result<(), ExecError> {
        let now = self.clock;
        for w in 0..self.waves.len() {
            while self.queues[w].vm.front().is_some_and(|p| p.due <= now) {
                let p = self.queues[w].vm.pop_front().expect("front exists");
                pending::land(p, &mut self.waves[w], self.mem, &mut self.lds)?;
            }
            while self.queues[w].lds.front().is_some_and(|p| p.due <= now) {
                let p = self.queues[w].lds.pop_front().expect("front exists");
                pending::land(p, &mut self.waves[w], self.mem, &mut self.lds)?;
            }
            while let Some(k) = self.queues[w].smem.iter().position(|p| p.due <= now) {
                let p = self.queues[w].smem.swap_remove(k);
                pending::land(p, &mut self.waves[w], self.mem, &mut self.lds)?;
            }
        }
        Ok(())
    }

    /// Land wave `w`'s operations until at most `vm` VM and `lgkm` LGKM ones remain; true when one
    /// had to land before its due time (the wait stalled).
    fn drain(&mut self, w: usize, vm: u32, lgkm: u32) -> Result<bool, ExecError> {
        let mut stalled = false;
        while self.queues[w].vm.len() > vm as usize {
            let p = self.queues[w].vm.pop_front().expect("non-empty");
            stalled |= p.due > self.clock;
            pending::land(p, &mut self.waves[w], self.mem, &mut self.lds)?;
        }
        while self.queues[w].lds.len() + self.queues[w].smem.len() > lgkm as usize {
            let q = &mut self.queues[w];
            let smem_min = (0..q.smem.len()).min_by_key(|&k| q.smem[k].due);
            let take_lds = match (q.lds.front(), smem_min) {
                (Some(l), Some(s)) => l.due <= q.smem[s].due,
                (Some(_), None) => true,
                _ => false,
            };
            let p = if take_lds {
                q.lds.pop_front().expect("non-empty")
            } else {
                q.smem.swap_remove(smem_min.expect("non-empty"))
            };
            stalled |= p.due > self.clock;
            pending::land(p, &mut self.waves[w], self.mem, &mut self.lds)?;
        }
        Ok(stalled)
    }

    /// Put an operation in flight for wave `w`.
    pub(crate) fn issue(&mut self, w: usize, i: &Instr, counter: Counter, effect: pending::Effect) {
        let (lo, hi) = match counter {
            Counter::Vm => self.opts.vm_latency,
            Counter::Lds => self.opts.lds_latency,
            Counter::Smem => self.opts.smem_latency,
        };
        if self.opts.poison_in_flight {
            pending::poison(&effect, &mut self.waves[w]);
        }
        let mut due = self.clock + self.rng.gen_range(lo..=hi.max(lo));
        let q = &mut self.queues[w];
        // In-order counters: an operation never lands before one issued earlier on the same counter.
        match counter {
            Counter::Vm => due = due.max(q.vm.back().map_or(0, |p| p.due)),
            Counter::Lds => due = due.max(q.lds.back().map_or(0, |p| p.due)),
            Counter::Smem => {}
        }
        let p = Pending {
            due,
            effect,
            offset: i.offset,
        };
        match counter {
            Counter::Vm => q.vm.push_back(p),
            Counter::Lds => q.lds.push_back(p),
            Counter::Smem => q.smem.push(p),
        }
    }

    fn step(&mut self, w: usize) -> Result<(), ExecError> {
        *self.issued += 1;
        if *self.issued > self.opts.max_instructions {
            return Err(ExecError::Budget(self.opts.max_instructions));
        }
        self.clock += 1;
        self.land_due()?;
        let prog = self.prog;
        let pc = self.waves[w].pc;
        let i = prog
            .instrs
            .get(pc)
            .ok_or(ExecError::Pc(prog.kernel.code.len() as i64))?;
        self.stats.count(i);
        let flow = self.exec(w, i).map_err(|e| ExecError::at(i, e))?;
        let wave = &mut self.waves[w];
        match flow {
            Flow::Next => wave.pc = pc + 1,
            Flow::Jump(target) => wave.pc = prog.at(target).map_err(|e| ExecError::at(i, e))?,
            Flow::Barrier => {
                wave.pc = pc + 1;
                wave.at_barrier = true;
            }
            Flow::End => wave.done = true,
            Flow::Wait { vm, lgkm } => {
                wave.pc = pc + 1;
                let stalled = self.drain(w, vm, lgkm)?;
                self.stats.wait(i.offset, stalled);
            }
        }
        Ok(())
    }

    fn exec(&mut self, w: usize, i: &Instr) -> Result<Flow, ExecError> {
        match i.enc {
            Enc::Sop1 | Enc::Sop2 | Enc::Sopc | Enc::Sopk => {
                salu::exec(&mut self.waves[w], i)?;
                Ok(Flow::Next)
            }
            Enc::Sopp => salu::sopp(&self.waves[w], i),
            Enc::Smem => {
                vmem::smem(self, w, i)?;
                Ok(Flow::Next)
            }
            Enc::Ds => {
                vmem::ds(self, w, i)?;
                Ok(Flow::Next)
            }
            Enc::Mubuf => {
                vmem::mubuf(self, w, i)?;
                Ok(Flow::Next)
            }
            Enc::Global => {
                vmem::global(self, w, i)?;
                Ok(Flow::Next)
            }
            Enc::Vop3p if i.op.is_mfma() => {
                mfma::exec(&mut self.waves[w], i, self.prog.kernel.arch)?;
                Ok(Flow::Next)
            }
            _ => {
                valu::exec(&mut self.waves[w], i)?;
                Ok(Flow::Next)
            }
        }
    }
}

/// Whether `op` is handled by the scalar unit's branch logic.
pub(crate) fn is_branch(op: Op) -> bool {
    matches!(
        op,
        Op::SBranch
            | Op::SCbranchScc0
            | Op::SCbranchScc1
            | Op::SCbranchVccz
            | Op::SCbranchVccnz
            | Op::SCbranchExecz
            | Op::SCbranchExecnz
    )
}
