//! Shared-memory swizzles chosen per kernel and target: every access a kernel makes to each shared
//! buffer, the instruction the AMD lowering issues for it, and the swizzle the bank solver
//! (`kittens_tile::solve`) picks so that all of them are conflict-free, or least conflicted (HipKittens
//! §3.2.2, Appendix D.1-D.2).
//!
//! The HIP lowering applies [`with_chosen_swizzles`] before it emits anything, so the code, the
//! emulation and `kittens check --banks` all see the same swizzles. A swizzle changes where bytes sit
//! in LDS, never which value an op reads: the interpreter's semantics do not depend on it.
//!
//! Async global→LDS fills constrain the choice: the lowering swizzles their *global* address, which
//! needs an involution whose period divides the filled region, keeping the fill's vector width whole
//! (16 bytes on CDNA4, 4 on CDNA3).

use crate::ir::{Kernel, Op, SharedId, Stmt};
use kittens_hw::lds::DsInstr;
use kittens_hw::Arch;
use kittens_tile::{amd_instr, solve, Constraints, RegTile, Swizzle, TileAccess};
use serde::Serialize;

/// One op's access to a shared buffer.
#[derive(Debug, Clone, Serialize)]
pub struct BankAccess {
    /// `#op kind reg <-> buffer`, e.g. `#14 load a_r <- a_s0`.
    pub access: String,
    pub op: usize,
    /// True inside a loop (the hot loop of every shipped kernel).
    pub hot_loop: bool,
    /// The instruction the lowering issues; `None` when the bank model has none for it.
    pub instr: Option<&'static str>,
    pub swizzle: String,
    /// Worst conflict degree over the access's phases under the chosen swizzle (`None`: unmodelled).
    pub max_conflict: Option<u32>,
}

/// The solver's answer for one shared buffer.
#[derive(Debug, Clone, Serialize)]
pub struct TileBanks {
    pub buffer: String,
    #[serde(skip)]
    pub id: SharedId,
    pub declared: String,
    pub chosen: String,
    #[serde(skip)]
    pub swizzle: Swizzle,
    pub accesses: Vec<BankAccess>,
}

/// Every shared buffer of a kernel with its chosen swizzle and accesses.
#[derive(Debug, Clone, Serialize)]
pub struct BankPlan {
    pub kernel: String,
    pub target: &'static str,
    pub tiles: Vec<TileBanks>,
}

impl BankPlan {
    /// Every access of the hot loop (inside a loop), in op order.
    pub fn hot(&self) -> Vec<&BankAccess> {
        let mut v: Vec<&BankAccess> = self
            .tiles
            .iter()
            .flat_map(|t| &t.accesses)
            .filter(|a| a.hot_loop)
            .collect();
        v.sort_by_key(|a| a.op);
        v
    }
}

/// Why a kernel's swizzles cannot be chosen for a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BankError {
    #[error("bank solver: {0} is not an AMD target")]
    NotAmd(&'static str),
    #[error("bank solver, shared buffer `{buffer}`: {source}")]
    Tile {
        buffer: String,
        source: kittens_tile::TileError,
    },
}

struct Found {
    op: usize,
    hot: bool,
    buf: SharedId,
    reg: String,
    tile: RegTile,
    store: bool,
}

fn collect(
    k: &Kernel,
    body: &[Stmt],
    hot: bool,
    next: &mut usize,
    out: &mut Vec<Found>,
    fills: &mut Vec<(SharedId, u32)>,
) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                let mut push = |reg: &crate::ir::RegId, buf: SharedId, store: bool| {
                    let d = k.reg(*reg);
                    if let Some(t) = d.tile() {
                        out.push(Found {
                            op: *next,
                            hot,
                            buf,
                            reg: d.name.clone(),
                            tile: *t,
                            store,
                        });
                    }
                };
                match op {
                    Op::LoadShared { dst, src } => push(dst, src.buf, false),
                    Op::StoreShared { dst, src, .. } => push(src, dst.buf, true),
                    Op::LoadAsync { dst, .. } => {
                        let t = k.shared_decl(dst.buf).tile;
                        fills.push((dst.buf, dst.rows * t.row_bytes()));
                    }
                    _ => {}
                }
                *next += 1;
            }
            Stmt::For { body, .. } => collect(k, body, true, next, out, fills),
            Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                collect(k, body, hot, next, out, fills)
            }
            Stmt::If { then, els, .. } => {
                collect(k, then, hot, next, out, fills);
                collect(k, els, hot, next, out, fills);
            }
            Stmt::LastArrival { body, .. } => collect(k, body, hot, next, out, fills),
            Stmt::Roles { producer, consumer } => {
                collect(k, producer, hot, next, out, fills);
                collect(k, consumer, hot, next, out, fills);
            }
        }
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The swizzle of every shared buffer of `k` for `arch`, solved over all its accesses (module docs).
pub fn plan(k: &Kernel, arch: Arch) -> Result<BankPlan, BankError> {
    if !arch.is_amd() {
        return Err(BankError::NotAmd(arch.target()));
    }
    let (mut found, mut fills) = (Vec::new(), Vec::new());
    collect(k, &k.body, false, &mut 0, &mut found, &mut fills);
    let mut tiles = Vec::new();
    for (i, sd) in k.shared.iter().enumerate() {
        let id = SharedId(i as u32);
        let mine: Vec<&Found> = found.iter().filter(|f| f.buf == id).collect();
        let instrs: Vec<Option<DsInstr>> = mine
            .iter()
            .map(|f| amd_instr(&f.tile, arch, f.store).filter(|_| f.tile.dtype == sd.tile.dtype))
            .collect();
        let modelled: Vec<TileAccess> = mine
            .iter()
            .zip(&instrs)
            .filter_map(|(f, i)| i.map(|instr| TileAccess { reg: f.tile, instr }))
            .collect();
        let region = fills
            .iter()
            .filter(|(b, _)| *b == id)
            .fold(0, |g, (_, r)| gcd(g, *r));
        let c = Constraints {
            granule: if region > 0 && arch == Arch::Cdna4 {
                16
            } else if region > 0 {
                4
            } else {
                0
            },
            involution: region > 0,
            period_divides: region,
        };
        let t = sd.tile;
        let choice =
            solve(t.dtype, t.rows, t.cols, t.swizzle, &modelled, &c).map_err(|source| {
                BankError::Tile {
                    buffer: sd.name.clone(),
                    source,
                }
            })?;
        let mut conf = choice.max_conflict.iter();
        let accesses = mine
            .iter()
            .zip(&instrs)
            .map(|(f, i)| {
                let arrow = if f.store { "->" } else { "<-" };
                BankAccess {
                    access: format!(
                        "#{} {} {} {arrow} {}",
                        f.op,
                        if f.store { "store" } else { "load" },
                        f.reg,
                        sd.name
                    ),
                    op: f.op,
                    hot_loop: f.hot,
                    instr: i.map(|i| i.name()),
                    swizzle: choice.swizzle.name(),
                    max_conflict: i.and_then(|_| conf.next().copied()),
                }
            })
            .collect();
        tiles.push(TileBanks {
            buffer: sd.name.clone(),
            id,
            declared: t.swizzle.name(),
            chosen: choice.swizzle.name(),
            swizzle: choice.swizzle,
            accesses,
        });
    }
    Ok(BankPlan {
        kernel: k.name.clone(),
        target: arch.target(),
        tiles,
    })
}

/// `k` with every shared buffer's swizzle replaced by the one [`plan`] chooses for `arch`.
pub fn with_chosen_swizzles(k: &Kernel, arch: Arch) -> Result<Kernel, BankError> {
    let p = plan(k, arch)?;
    let mut out = k.clone();
    for t in &p.tiles {
        let sd = &mut out.shared[t.id.0 as usize];
        sd.tile = kittens_tile::SharedTile::with_swizzle(
            sd.tile.dtype,
            sd.tile.rows,
            sd.tile.cols,
            t.swizzle,
        )
        .map_err(|source| BankError::Tile {
            buffer: sd.name.clone(),
            source,
        })?;
    }
    Ok(out)
}
