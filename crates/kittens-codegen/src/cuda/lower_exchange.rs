//! The consumers barrier of a two-warpgroup exchange, split (the IR's `Scope::Consumers`, which the
//! attention backward's atomic form meets once per step: each warpgroup stores its keys' dSᵀ, both
//! wait, each reads both halves).
//!
//! As one `bar.sync` of the 256 consumer threads, the warpgroup that stored first waits there until the
//! other has not only stored but also issued its products up to the barrier, every step: the
//! turns that offset the two warpgroups on the tensor cores are undone each step (ncu: 7% of the atomic
//! key blocks' stall samples at that barrier, bench/NOTES.md). Split, a warpgroup *arrives* on its own
//! named barrier as soon as its store is fenced (`bar.arrive`, PTX ISA §9.7.13.1) and *waits* at the
//! IR's barrier on the other's (`bar.sync` of its 128 threads and the other's 128 arrivals): it waits
//! only for the other's store.
//!
//! What the split keeps of the barrier's meaning, and when it applies ([`splits`]):
//! - the stores before the barrier are visible after it: each warpgroup's stores precede its arrive
//!   (with `fence.proxy.async` for the `wgmma`s that read them), the other's sync follows it; its own
//!   threads meet at the sync too;
//! - no warpgroup overwrites what the other still reads: between the store and the barrier a
//!   warpgroup only issues `mma`s on tiles it does not store (the check), and its reads of stored tiles
//!   retire before its next store (`lower.rs`, `OWNED_READ`), hence before its next arrive;
//! - a barrier instance is never reused early: the pair of IDs alternates by generation (`kt_xpar`),
//!   and a warpgroup arrives for generation g + 2 only after its sync of g + 1, which needs the other's
//!   arrive for g + 1, which follows the other's sync of g in its program.
//!
//! Applies to exactly two consumer warpgroups whose role holds exactly one consumers barrier and one
//! store into a consumer-stored tile, the store earlier in the same statement list with nothing but
//! such `mma`s (and waits, hints, compute clusters of them) between; anything else keeps the barrier
//! whole.

use kittens_ir::{Kernel, MmaOperand, Op, Scope, Stmt};

use super::lower::{CudaLowerError, Emit};

/// Whether the consumers barrier of `consumer` (the consumer role's body) splits; `owned` per shared
/// tile: stored by the consumers (`lower_roles::consumer_owned`).
pub(super) fn splits(consumer: &[Stmt], owned: &[bool], consumer_wgs: u32) -> bool {
    let (mut barriers, mut stores) = (0, 0);
    count(consumer, owned, &mut barriers, &mut stores);
    consumer_wgs == 2 && barriers == 1 && stores == 1 && adjacent(consumer, owned)
}

fn owned_store(op: &Op, owned: &[bool]) -> bool {
    matches!(op, Op::StoreShared { dst, .. } if owned[dst.buf.0 as usize])
}

fn consumers_barrier(op: &Op) -> bool {
    matches!(
        op,
        Op::Barrier {
            scope: Scope::Consumers
        }
    )
}

fn count(body: &[Stmt], owned: &[bool], barriers: &mut u32, stores: &mut u32) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                *barriers += u32::from(consumers_barrier(op));
                *stores += u32::from(owned_store(op, owned));
            }
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::Roles {
                consumer: body, ..
            } => count(body, owned, barriers, stores),
            Stmt::If { then, els, .. } => {
                count(then, owned, barriers, stores);
                count(els, owned, barriers, stores);
            }
        }
    }
}

/// Whether some statement list holds the store, then only quiet statements, then the barrier.
fn adjacent(body: &[Stmt], owned: &[bool]) -> bool {
    let at = |f: &dyn Fn(&Op) -> bool| {
        body.iter()
            .position(|s| matches!(s, Stmt::Op { op, .. } if f(op)))
    };
    if let (Some(i), Some(j)) = (
        at(&|op| owned_store(op, owned)),
        at(&|op| consumers_barrier(op)),
    ) {
        return i < j && body[i + 1..j].iter().all(|s| quiet(s, owned));
    }
    body.iter().any(|s| match s {
        Stmt::For { body, .. } | Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
            adjacent(body, owned)
        }
        Stmt::If { then, els, .. } => adjacent(then, owned) || adjacent(els, owned),
        _ => false,
    })
}

/// An `mma` on tiles the consumers do not store, a wait, a hint, or a compute cluster of those.
fn quiet(s: &Stmt, owned: &[bool]) -> bool {
    let free = |o: &MmaOperand| !matches!(o, MmaOperand::Shared(v) if owned[v.buf.0 as usize]);
    match s {
        Stmt::Op { op, .. } => match op {
            Op::Mma { a, b, .. } => free(a) && free(b),
            Op::Wait { .. } | Op::Priority(_) | Op::Hint(_) => true,
            _ => false,
        },
        Stmt::Cluster { body, .. } => body.iter().all(|s| quiet(s, owned)),
        _ => false,
    }
}

/// The named barrier IDs of the split: after the whole barrier's (`lower_roles::consumers_barrier`),
/// two per generation parity, one per warpgroup.
fn first_id(waves: u32) -> Result<u32, CudaLowerError> {
    let id = 5 + waves / 4;
    if id + 3 > 15 {
        return super::lower::unsupported(format!(
            "a split consumers barrier in a block of {waves} warps (named barriers {id}-{} of 0-15)",
            id + 3
        ));
    }
    Ok(id)
}

/// Whether the program has consumers barriers: consumer warpgroups may read each other's stored
/// tiles (the schedule analysis has shown those reads ordered).
pub(super) fn exchanges(k: &Kernel) -> bool {
    k.ops().iter().any(|r| consumers_barrier(r.op))
}

impl Emit<'_> {
    /// The IR's consumers barrier: whole (`lower_roles::consumers_barrier`, after fencing this
    /// thread's stores for the other warpgroups' `wgmma`s), or the wait of the split.
    pub(super) fn consumers_barrier(&mut self) -> Result<(), CudaLowerError> {
        if self.split_exchange {
            return self.exchange_sync();
        }
        let bar = super::lower_roles::consumers_barrier(self.k.waves, self.consumer_wgs())?;
        self.line("kt::fence_proxy_async(); // the stores above before any warpgroup's wgmmas read them");
        self.line(bar);
        Ok(())
    }

    /// After the store into a consumer-stored tile: this warpgroup's stores fenced, then its arrival.
    pub(super) fn exchange_arrive(&mut self) -> Result<(), CudaLowerError> {
        let id = first_id(self.k.waves)?;
        self.line("kt::fence_proxy_async(); // the store above before the other warpgroup's wgmmas read it");
        self.line(format!(
            "kt::named_barrier_arrive({id}u + 2u * kt_xpar + kt_cwg, 256u); // stored: the other may read"
        ));
        Ok(())
    }

    /// At the consumers barrier: wait for the other warpgroup's arrival (and this one's threads).
    pub(super) fn exchange_sync(&mut self) -> Result<(), CudaLowerError> {
        let id = first_id(self.k.waves)?;
        self.line(format!(
            "kt::named_barrier({id}u + 2u * kt_xpar + (1u - kt_cwg), 256u); kt_xpar ^= 1u; // the other's store landed"
        ));
        Ok(())
    }
}
