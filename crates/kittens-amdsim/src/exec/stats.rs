//! What the emulator counts while it runs: instructions issued by class, `s_waitcnt`s and how many
//! of them stalled (had to land an operation before its time), and for every DS instruction the LDS
//! bank conflicts of its actual addresses by kittens-hw's bank model (HipKittens Table 5 phases).

use crate::decode::{Enc, Instr, Op};
use kittens_hw::lds::{conflicts, DsInstr};
use std::collections::BTreeMap;
use std::str::FromStr;

/// One DS instruction's executions and conflicts.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DsStat {
    pub offset: u32,
    pub text: String,
    pub executions: u64,
    /// Worst conflict degree of any phase of any execution (1 = conflict-free); `None` when the
    /// bank model has no entry for the instruction.
    pub worst_degree: Option<u32>,
    /// Sum over executions of the largest phase degree.
    pub degree_sum: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    pub instructions: BTreeMap<&'static str, u64>,
    pub waits: u64,
    pub stalled_waits: u64,
    /// Per `s_waitcnt` offset: how often it stalled.
    pub stalls_at: BTreeMap<u32, u64>,
    pub ds: BTreeMap<u32, DsStat>,
}

fn class(i: &Instr) -> &'static str {
    match i.enc {
        Enc::Sop1 | Enc::Sop2 | Enc::Sopc | Enc::Sopk => "salu",
        Enc::Sopp => match i.op {
            Op::SWaitcnt => "waitcnt",
            Op::SBarrier => "barrier",
            _ if super::is_branch(i.op) => "branch",
            _ => "other_scalar",
        },
        Enc::Smem => "smem",
        Enc::Vop3p if i.op.is_mfma() => "mfma",
        Enc::Ds => "ds",
        Enc::Mubuf if i.lds => "vmem_to_lds",
        Enc::Mubuf | Enc::Global if i.op.is_store() => "vmem_store",
        Enc::Mubuf | Enc::Global => "vmem_load",
        _ => "valu",
    }
}

impl Stats {
    pub(crate) fn count(&mut self, i: &Instr) {
        *self.instructions.entry(class(i)).or_default() += 1;
    }

    pub(crate) fn wait(&mut self, offset: u32, stalled: bool) {
        self.waits += 1;
        if stalled {
            self.stalled_waits += 1;
            *self.stalls_at.entry(offset).or_default() += 1;
        }
    }

    pub(crate) fn ds_access(&mut self, i: &Instr, exec: u64, addr: &[u32; 64]) {
        let e = self.ds.entry(i.offset).or_insert_with(|| DsStat {
            offset: i.offset,
            text: i.text(),
            ..DsStat::default()
        });
        e.executions += 1;
        let Ok(instr) = DsInstr::from_str(i.op.name()) else {
            return;
        };
        let lanes: Vec<Option<u32>> = (0..64)
            .map(|l| (exec >> l & 1 == 1).then_some(addr[l]))
            .collect();
        if let Ok(phases) = conflicts(instr, &lanes) {
            let worst = phases.iter().copied().max().unwrap_or(0);
            e.worst_degree = Some(e.worst_degree.unwrap_or(0).max(worst));
            e.degree_sum += worst as u64;
        }
    }

    /// Add another run's counts.
    pub fn merge(&mut self, o: &Stats) {
        for (k, v) in &o.instructions {
            *self.instructions.entry(k).or_default() += v;
        }
        self.waits += o.waits;
        self.stalled_waits += o.stalled_waits;
        for (k, v) in &o.stalls_at {
            *self.stalls_at.entry(*k).or_default() += v;
        }
        for (k, v) in &o.ds {
            let e = self.ds.entry(*k).or_insert_with(|| DsStat {
                offset: v.offset,
                text: v.text.clone(),
                ..DsStat::default()
            });
            e.executions += v.executions;
            e.degree_sum += v.degree_sum;
            e.worst_degree = match (e.worst_degree, v.worst_degree) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }
}
