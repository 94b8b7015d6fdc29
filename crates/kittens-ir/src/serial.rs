//! Kernels as files: a [`Kernel`] written out as JSON ([`to_json`]) and read back ([`from_json`]).
//!
//! The document is `{"format": "kittens-kernel", "version": 1, "kernel": {...}}`, the kernel being the
//! IR's own serde form (`docs/ir.md`; the body is the schedule-expanded one, so a file holds exactly what
//! the interpreter, the analysis and the lowerings read). Non-finite constants (`neg_infty` fills, mask
//! values) are written as the strings `"inf"`, `"-inf"` and `"nan"`, which JSON numbers cannot hold.
//!
//! Reading is the trust boundary: a file may come from anyone, so [`from_json`] checks the structure
//! ([`check_structure`]: every id in range, every tile the tile layer would build, names that are
//! identifiers, grid orders that evaluate, sizes within the tile layer's limits) and then the IR's own
//! validation ([`crate::validate`]) before it hands a kernel out. Each failure is a typed
//! [`LoadError`] that names the declaration or the op and the limit; nothing in a file can make the
//! reader, the interpreter or a lowering panic.

use crate::error::BuildError;
use crate::expr::{Cond, Expr};
use crate::ir::*;
use kittens_hw::dtype::DType;
use kittens_tile::{RegTile, SharedTile, Swizzle, XorTerm};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The `format` field of a kernel file.
pub const FORMAT: &str = "kittens-kernel";
/// The version this build writes and reads.
pub const VERSION: u32 = 1;

/// Most waves a block may have (1024 threads of 32 lanes).
pub const MAX_WAVES: u32 = 32;
/// Most slots of one shared ring.
pub const MAX_RING: u32 = 64;
/// Most shared-memory bytes a kernel file may declare (every catalog GPU has less; the per-target
/// budget is checked at lowering).
pub const MAX_SHARED_BYTES: u64 = 1 << 22;
/// Most dimensions of a global tensor.
pub const MAX_DIMS: usize = 8;
/// Most grid dimensions.
pub const MAX_GRID_DIMS: usize = 3;
/// Longest name.
pub const MAX_NAME: usize = 64;

#[derive(Serialize)]
struct FileOut<'a> {
    format: &'static str,
    version: u32,
    kernel: &'a Kernel,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIn {
    format: String,
    version: u32,
    kernel: Kernel,
}

/// Why a kernel file was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LoadError {
    /// Not JSON, truncated, an unknown op or field, a value of the wrong type (serde's message names
    /// it, with the line and column).
    #[error("kernel file: {msg} (line {line}, column {column})")]
    Json {
        msg: String,
        line: usize,
        column: usize,
    },
    #[error("kernel file: format `{found}`, expected `{FORMAT}`")]
    Format { found: String },
    #[error("kernel file: version {found}; this build reads version {VERSION}")]
    Version { found: u32 },
    /// The kernel parsed but is not a valid program.
    #[error("kernel file: kernel `{kernel}`: {error}")]
    Invalid {
        kernel: String,
        error: Box<BuildError>,
    },
}

/// The kernel as a kernel-file JSON document (pretty-printed).
pub fn to_json(k: &Kernel) -> String {
    serde_json::to_string_pretty(&FileOut {
        format: FORMAT,
        version: VERSION,
        kernel: k,
    })
    .expect(
        "a kernel always serialises: no maps with non-string keys, non-finite floats as strings",
    )
}

/// Reads a kernel file: parses it, checks the format and version, the structure
/// ([`check_structure`]) and the IR's validation ([`crate::validate`]).
pub fn from_json(text: &str) -> Result<Kernel, LoadError> {
    let file: FileIn = serde_json::from_str(text).map_err(|e| LoadError::Json {
        msg: e.to_string(),
        line: e.line(),
        column: e.column(),
    })?;
    if file.format != FORMAT {
        return Err(LoadError::Format { found: file.format });
    }
    if file.version != VERSION {
        return Err(LoadError::Version {
            found: file.version,
        });
    }
    let k = file.kernel;
    let invalid = |error| LoadError::Invalid {
        kernel: k.name.clone(),
        error: Box::new(error),
    };
    check_structure(&k).map_err(invalid)?;
    crate::validate::validate(&k).map_err(invalid)?;
    Ok(k)
}

fn bad(msg: impl Into<String>) -> BuildError {
    BuildError::Structure(msg.into())
}

/// A C identifier of at most [`MAX_NAME`] characters: names are printed into generated source.
fn ident(what: &str, name: &str) -> Result<(), BuildError> {
    let mut chars = name.chars();
    let ok = name.len() <= MAX_NAME
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} name `{}` must be an identifier ([A-Za-z_][A-Za-z0-9_]*, at most {MAX_NAME} characters)",
            name.escape_debug()
        )))
    }
}

/// A label printed in comments: printable, no comment delimiters, no line continuation.
fn label(what: &str, s: &str) -> Result<(), BuildError> {
    let ok = s.len() <= 256
        && !s.chars().any(|c| c.is_control() || c == '\\')
        && !s.contains("*/")
        && !s.contains("/*");
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} `{}`: at most 256 printable characters, without `\\`, `/*` or `*/`",
            s.escape_debug()
        )))
    }
}

#[derive(Clone, Copy)]
struct Ids<'a> {
    params: usize,
    vars: usize,
    grid: usize,
    /// Per global: whether [`Expr::Elem`] may read it (an `i32` tensor); empty where no expression
    /// may read memory (shapes, strides, grid extents: evaluated before any block runs).
    index: &'a [bool],
}

fn expr(ids: &Ids, where_: &dyn Fn() -> String, e: &Expr) -> Result<(), BuildError> {
    match e {
        Expr::Param(p) if p.0 as usize >= ids.params => Err(bad(format!(
            "{}: parameter id {} (the kernel declares {})",
            where_(),
            p.0,
            ids.params
        ))),
        Expr::Var(v) if v.0 as usize >= ids.vars => Err(bad(format!(
            "{}: loop variable id {} (the kernel declares {})",
            where_(),
            v.0,
            ids.vars
        ))),
        Expr::Block(i) if *i as usize >= ids.grid => Err(bad(format!(
            "{}: grid coordinate {i} (the grid has {} dimensions)",
            where_(),
            ids.grid
        ))),
        Expr::Bin(_, a, b) => {
            expr(ids, where_, a)?;
            expr(ids, where_, b)
        }
        Expr::Elem(g, i) => {
            if !ids.index.get(g.0 as usize).copied().unwrap_or(false) {
                return Err(bad(format!(
                    "{}: an index read of global id {} (it must be an i32 global, read where a \
                     block runs: not in a shape, stride or grid extent)",
                    where_(),
                    g.0
                )));
            }
            expr(ids, where_, i)
        }
        _ => Ok(()),
    }
}

fn cond(ids: &Ids, where_: &dyn Fn() -> String, c: &Cond) -> Result<(), BuildError> {
    match c {
        Cond::Eq(a, b) | Cond::Ne(a, b) | Cond::Lt(a, b) | Cond::Le(a, b) => {
            expr(ids, where_, a)?;
            expr(ids, where_, b)
        }
        Cond::And(a, b) | Cond::Or(a, b) => {
            cond(ids, where_, a)?;
            cond(ids, where_, b)
        }
        Cond::Not(a) => cond(ids, where_, a),
    }
}

/// Every expression an op holds.
fn sv(v: &SharedView) -> Vec<&Expr> {
    vec![&v.index, &v.row0, &v.col0]
}

fn op_exprs(op: &Op) -> Vec<&Expr> {
    match op {
        Op::LoadAsync { dst, src, .. } => sv(dst).into_iter().chain(&src.origin).collect(),
        Op::LoadShared { src, .. } => sv(src),
        Op::StoreShared { dst, .. } => sv(dst),
        Op::LoadGlobal { src: v, .. }
        | Op::StoreGlobal { dst: v, .. }
        | Op::AtomicAdd { dst: v, .. } => v.origin.iter().collect(),
        Op::Mma { a, b, .. } => [a, b]
            .into_iter()
            .flat_map(|o| match o {
                MmaOperand::Shared(v) => sv(v),
                MmaOperand::Reg(_) => vec![],
            })
            .collect(),
        Op::Random {
            seed,
            offset,
            index0,
            row_stride,
            ..
        } => seed
            .iter()
            .chain(offset)
            .chain([index0, row_stride])
            .collect(),
        Op::Mask {
            rule, row0, col0, ..
        } => {
            let r = match rule {
                MaskRule::Causal { offset }
                | MaskRule::CausalT { offset }
                | MaskRule::WindowStart { offset }
                | MaskRule::WindowStartT { offset } => offset,
                MaskRule::ColsBelow(e) | MaskRule::RowsBelow(e) => e,
            };
            vec![r, row0, col0]
        }
        Op::Alibi { row0, col0, .. } => vec![row0, col0],
        _ => vec![],
    }
}

fn body(ids: &Ids, stmts: &[Stmt], next: &mut usize) -> Result<(), BuildError> {
    for s in stmts {
        match s {
            Stmt::Op { op, .. } => {
                let i = *next;
                *next += 1;
                let at = || format!("op #{i} ({})", op.name());
                for e in op_exprs(op) {
                    expr(ids, &at, e)?;
                }
                if let Op::Hint(h) = op {
                    let n = match *h {
                        SchedHint::Fence => 0,
                        SchedHint::Pairs { mma, other, groups } => mma.max(other).max(groups),
                        SchedHint::MmaReads { mma, reads, groups } => mma.max(reads).max(groups),
                        SchedHint::MmaExp { mma, exp, groups } => mma.max(exp).max(groups),
                    };
                    if n > 1024 {
                        return Err(bad(format!("{}: a count of {n} (at most 1024)", at())));
                    }
                }
                if let Op::SetMaxRegs { regs } = op {
                    if !(24..=256).contains(regs) {
                        return Err(bad(format!("{}: {regs} registers (24 to 256)", at())));
                    }
                }
            }
            Stmt::For {
                var,
                start,
                end,
                body: b,
            } => {
                let at = || format!("loop before op #{next}");
                if var.0 as usize >= ids.vars {
                    return Err(bad(format!(
                        "{}: loop variable id {} (the kernel declares {})",
                        at(),
                        var.0,
                        ids.vars
                    )));
                }
                expr(ids, &at, start)?;
                expr(ids, &at, end)?;
                body(ids, b, next)?;
            }
            Stmt::If { cond: c, then, els } => {
                let at = || format!("conditional before op #{next}");
                cond(ids, &at, c)?;
                body(ids, then, next)?;
                body(ids, els, next)?;
            }
            Stmt::Cluster { label: l, body: b, .. } => {
                label("cluster label", l)?;
                body(ids, b, next)?;
            }
            Stmt::Staggered { body: b } => body(ids, b, next)?,
            Stmt::LastArrival {
                counter,
                index,
                arrivals,
                body: b,
                ..
            } => {
                let at = || format!("last arrival before op #{next}");
                if !ids.index.get(counter.0 as usize).copied().unwrap_or(false) {
                    return Err(bad(format!(
                        "{}: counter global id {} (it must be an i32 global)",
                        at(),
                        counter.0
                    )));
                }
                expr(ids, &at, index)?;
                expr(ids, &at, arrivals)?;
                body(ids, b, next)?;
            }
            Stmt::Roles { .. } => {
                return Err(bad(format!(
                    "roles before op #{next}: a kernel's body is stored after schedule expansion, which \
                     turns roles into a conditional on the warpgroup"
                )))
            }
        }
    }
    Ok(())
}

fn swizzle(name: &str, s: Swizzle) -> Result<(), BuildError> {
    let term =
        |t: XorTerm| t.bits >= 1 && t.bits <= 8 && t.shift >= 1 && t.base + t.shift + t.bits <= 31;
    let ok = match s {
        Swizzle::None => true,
        Swizzle::Xor { bits, base, shift } => term(XorTerm { bits, base, shift }),
        Swizzle::Xor2 { first, second } => term(first) && term(second),
    };
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "shared buffer `{name}`: swizzle {s:?} (each XOR term flips 1 to 8 bits with shift ≥ 1 within bit 31)"
        )))
    }
}

/// The checks the builder's declarations make by construction, made again on a kernel that did not
/// come from the builder (a file): names, ids, tiles, grid, schedule, sizes. [`crate::validate`] then
/// checks every op.
pub fn check_structure(k: &Kernel) -> Result<(), BuildError> {
    ident("kernel", &k.name)?;
    if k.waves == 0 || k.waves > MAX_WAVES {
        return Err(bad(format!(
            "{} waves per block (1 to {MAX_WAVES})",
            k.waves
        )));
    }
    match k.schedule {
        Schedule::Plain { waves } if waves == 0 || waves > MAX_WAVES => {
            return Err(bad(format!(
                "plain schedule of {waves} waves (1 to {MAX_WAVES})"
            )))
        }
        Schedule::ProducerConsumer {
            producers,
            consumers,
            producer_regs,
            consumer_regs,
        } => {
            if producers == 0 || consumers == 0 || producers + consumers > MAX_WAVES / 4 {
                return Err(bad(format!(
                    "producer/consumer schedule of {producers} + {consumers} warpgroups (at least one \
                     each, at most {} together)",
                    MAX_WAVES / 4
                )));
            }
            for r in [producer_regs, consumer_regs] {
                if !(24..=256).contains(&r) {
                    return Err(bad(format!("producer/consumer registers {r} (24 to 256)")));
                }
            }
        }
        _ => {}
    }
    let mut names = std::collections::HashSet::new();
    let mut unique = |what: &str, n: &str| -> Result<(), BuildError> {
        ident(what, n)?;
        if names.insert((what.to_string(), n.to_string())) {
            Ok(())
        } else {
            Err(bad(format!("{what} `{n}` is declared twice")))
        }
    };
    for p in &k.params {
        unique("parameter", &p.name)?;
    }
    for v in &k.vars {
        ident("loop variable", &v.name)?;
    }
    let index: Vec<bool> = k.globals.iter().map(|g| g.dtype == DType::I32).collect();
    let ids = Ids {
        params: k.params.len(),
        vars: k.vars.len(),
        grid: k.grid.extents.len(),
        index: &index,
    };
    // Grid.
    if k.grid.extents.is_empty() || k.grid.extents.len() > MAX_GRID_DIMS {
        return Err(bad(format!(
            "a grid of {} dimensions (1 to {MAX_GRID_DIMS})",
            k.grid.extents.len()
        )));
    }
    for (i, e) in k.grid.extents.iter().enumerate() {
        let at = || format!("grid extent {i}");
        expr(
            &Ids {
                vars: 0,
                grid: 0,
                index: &[],
                ..ids
            },
            &at,
            e,
        )?;
    }
    let remap_ok = match k.grid.remap {
        GridOrder::RowMajor => true,
        GridOrder::XcdSwizzle {
            xcds,
            window,
            chunk,
        } => xcds >= 1 && window >= 1 && chunk >= 1,
        GridOrder::GroupM { window } => window >= 1,
        GridOrder::HeadFirst { xcds } => xcds >= 1,
    };
    if !remap_ok
        || k.grid
            .remap
            .dims()
            .is_some_and(|d| d != k.grid.extents.len())
    {
        return Err(bad(format!(
            "grid order {:?} on a grid of {} dimensions (its sizes must be at least 1 and its \
             dimensions match the grid)",
            k.grid.remap,
            k.grid.extents.len()
        )));
    }
    if !matches!(k.grid.cluster, 1 | 2 | 4) {
        return Err(bad(format!(
            "clusters of {} blocks (1, 2 or 4)",
            k.grid.cluster
        )));
    }
    // Globals.
    for g in &k.globals {
        unique("global", &g.name)?;
        let n = g.dims.len();
        if n == 0 || n > MAX_DIMS || g.strides.len() != n || g.dim_names.len() != n {
            return Err(bad(format!(
                "global `{}`: {n} dims, {} strides, {} dim names (1 to {MAX_DIMS}, all equal)",
                g.name,
                g.strides.len(),
                g.dim_names.len()
            )));
        }
        for d in &g.dim_names {
            ident("dimension", d)?;
        }
        let at = || format!("global `{}`", g.name);
        for e in g.dims.iter().chain(&g.strides) {
            // Shapes and strides are read before any block runs: parameters only.
            expr(
                &Ids {
                    vars: 0,
                    grid: 0,
                    index: &[],
                    ..ids
                },
                &at,
                e,
            )?;
        }
        if let Some(c) = &g.clip {
            if c.dim as usize >= n {
                return Err(bad(format!(
                    "global `{}`: a clip of dimension {} (it has {n})",
                    g.name, c.dim
                )));
            }
            // A clip is evaluated at each access (docs/ir.md): it may name the loop variables of
            // loops around the tensor's accesses (a paged cache's page end per key step); one
            // named outside its loop is an evaluation error there, not a crash.
            expr(&ids, &at, &c.end)?;
        }
    }
    // Shared buffers.
    let mut shared_total = 0u64;
    for s in &k.shared {
        unique("shared buffer", &s.name)?;
        swizzle(&s.name, s.tile.swizzle)?;
        let t = &s.tile;
        let decl = |error| BuildError::Decl {
            name: s.name.clone(),
            error,
        };
        let rebuilt = SharedTile::with_swizzle(t.dtype, t.rows, t.cols, t.swizzle).map_err(decl)?;
        debug_assert_eq!(&rebuilt, t);
        if s.count == 0 || s.count > MAX_RING {
            return Err(bad(format!(
                "shared buffer `{}`: a ring of {} slots (1 to {MAX_RING})",
                s.name, s.count
            )));
        }
        shared_total += u64::from(s.bytes());
    }
    if shared_total > MAX_SHARED_BYTES {
        return Err(bad(format!(
            "{shared_total} bytes of shared memory declared (a kernel file may declare at most \
             {MAX_SHARED_BYTES}; each target's budget is smaller and checked at lowering)"
        )));
    }
    // Registers.
    for r in &k.regs {
        unique("register", &r.name)?;
        let decl = |error| BuildError::Decl {
            name: r.name.clone(),
            error,
        };
        let (base, what) = match r.kind {
            RegKind::Tile(t) => {
                if t.base.rows == 0 || t.base.cols == 0 || t.base.rows > 64 || t.base.cols > 256 {
                    return Err(bad(format!(
                        "register tile `{}`: base shape {} (rows 1 to 64, columns 1 to 256)",
                        r.name, t.base
                    )));
                }
                RegTile::new(t.dtype, t.rows, t.cols, t.layout, t.base).map_err(decl)?;
                if let Some(p) = t.pin {
                    if p.first > p.last || p.last >= 512 {
                        return Err(bad(format!(
                            "register tile `{}`: pinned range {}..={} (first ≤ last < 512)",
                            r.name, p.first, p.last
                        )));
                    }
                }
                (t.base, "tile")
            }
            RegKind::Vec(v) => {
                let bytes = u64::from(v.len) * u64::from(v.dtype.bytes());
                if v.len == 0 || bytes > u64::from(kittens_tile::shared::MAX_TILE_BYTES) {
                    return Err(bad(format!(
                        "register vector `{}`: {} elements (1 to {})",
                        r.name,
                        v.len,
                        kittens_tile::shared::MAX_TILE_BYTES / v.dtype.bytes()
                    )));
                }
                (v.base, "vector")
            }
        };
        if base.rows == 0 || base.cols == 0 {
            return Err(bad(format!(
                "register {what} `{}`: base shape {base} has a zero side",
                r.name
            )));
        }
    }
    let mut next = 0;
    body(&ids, &k.body, &mut next)
}

/// Serde for an `f32` that may be infinite or NaN: finite values as JSON numbers, the others as the
/// strings `"inf"`, `"-inf"`, `"nan"` (serde_json would write them as `null`, which reads back as
/// nothing).
pub mod any_f32 {
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f32(*v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Num(f64),
        Str(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Num(x) => {
                let v = x as f32;
                if x.is_finite() && !v.is_finite() {
                    return Err(de::Error::custom(format!("{x} does not fit an f32")));
                }
                Ok(v)
            }
            Repr::Str(s) => match s.as_str() {
                "inf" | "+inf" => Ok(f32::INFINITY),
                "-inf" => Ok(f32::NEG_INFINITY),
                "nan" => Ok(f32::NAN),
                other => Err(de::Error::custom(format!(
                    "`{other}` is not a number (finite numbers, or \"inf\", \"-inf\", \"nan\")"
                ))),
            },
        }
    }
}
