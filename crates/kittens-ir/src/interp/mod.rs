//! The CPU interpreter: runs a kernel over its grid on host tensors with the storage numerics of every
//! tile (the `cpu` backend and the test oracle for every other backend).
//!
//! Semantics it fixes for all backends:
//! - **Numerics.** Every value a register tile, vector, shared tile or global tensor holds is rounded to
//!   its dtype when written (`crate::numerics::round`, with the op's rounding mode; RTNE unless the
//!   op names another). Arithmetic is f32; `mma` accumulates in f32 in `k` order, then rounds once.
//! - **Async loads.** [`crate::Op::LoadAsync`] reads global memory when issued but writes shared memory
//!   only when the issuing wave executes a covering [`crate::Op::Wait`] on the async queue (oldest
//!   first, vmcnt-style); a load never waited for never lands, so a missing wait reads stale data.
//!   `WaitCount::Auto` is executed as a full drain (the analysis computes the real count).
//! - **Bounds.** Global coordinates outside the tensor read as zero; stores to them are dropped.
//! - **Access.** A kernel with a store to a tensor declared [`Access::Read`] is refused before it runs
//!   ([`InterpError::WriteToReadOnly`]), and read-only tensors are never modified: where their values
//!   are not representable in the tensor's dtype, the run reads a rounded private copy.
//! - **Sizes.** Every length, offset and grid size is computed with checked arithmetic; an overflow is
//!   an [`InterpError::Overflow`], never a wrapped index.
//! - **Waves** of a block each follow their own path through the body (conditionals on the wave or
//!   warpgroup, warp-specialised roles, the ping-pong's stagger) and stop at every barrier until all live
//!   waves of its scope have arrived; barriers match by count (AMD `s_barrier`), and waves that have
//!   finished no longer count. Between two barriers the waves run one after another in wave order — one
//!   legal interleaving; whether others could differ (a race) is the schedule analysis's question.
//! - **Blocks** run independently (on all host cores); their global stores are applied in block order.

mod exec;
mod program;

use crate::expr::Env;
use crate::ir::{Access, GridOrder, Kernel, Op};
use kittens_hw::dtype::DType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum InterpError {
    #[error("kernel `{kernel}` takes {want} parameters, got {got}")]
    Params {
        kernel: String,
        want: usize,
        got: usize,
    },
    #[error("kernel `{kernel}` takes {want} tensors, got {got}")]
    Tensors {
        kernel: String,
        want: usize,
        got: usize,
    },
    #[error("tensor `{name}` needs at least {need} elements for its shape and strides, got {got}")]
    TensorSize {
        name: String,
        need: usize,
        got: usize,
    },
    #[error("cannot evaluate {what}: {expr}")]
    Eval { what: String, expr: String },
    #[error("grid remap {remap:?} needs {want} grid dimensions, the kernel has {got}")]
    Remap {
        remap: GridOrder,
        want: usize,
        got: usize,
    },
    #[error("{op}: {detail}")]
    Op { op: String, detail: String },
    /// The kernel stores to a tensor it declares read-only: its output would overwrite its input.
    #[error("kernel `{kernel}` op {op}: store to `{tensor}`, which is declared read-only (Access::Read)")]
    WriteToReadOnly {
        kernel: String,
        tensor: String,
        op: usize,
    },
    #[error("{what} overflows 64-bit arithmetic")]
    Overflow { what: String },
    /// The schedule analysis finds a hazard at these parameters: the one order the interpreter runs
    /// the waves in would give numbers a device need not (see [`run`]; [`run_unchecked`] runs anyway).
    #[error(
        "kernel `{kernel}` is racy at these parameters ({more} more hazard(s) found), so the interpreter \
         refuses it: {hazard} (block {block:?}; `kittens check` lists them, `--drop-op` shows what each \
         barrier and wait guards)"
    )]
    Race {
        kernel: String,
        hazard: Box<crate::analysis::Hazard>,
        block: Vec<i64>,
        more: usize,
    },
    /// The caller's cancel flag ([`with_cancel`]) was raised: the run stopped between blocks and
    /// wrote nothing.
    #[error("the run was cancelled")]
    Cancelled,
}

thread_local! {
    static CANCEL: std::cell::RefCell<Option<Arc<AtomicBool>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `flag` as the cancel flag of every [`run`] it makes on this thread: once the flag is
/// set, each run stops before its next block with [`InterpError::Cancelled`] (an interrupted Python
/// call, for instance). Blocks already started finish; nothing is written to the tensors.
pub fn with_cancel<R>(flag: Arc<AtomicBool>, f: impl FnOnce() -> R) -> R {
    let old = CANCEL.with(|c| c.replace(Some(flag)));
    let r = f();
    CANCEL.with(|c| *c.borrow_mut() = old);
    r
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStats {
    pub blocks: u64,
    pub waves_per_block: u32,
    /// Ops executed, summed over waves and blocks.
    pub wave_ops: u64,
}

fn eval(e: &crate::Expr, params: &[i64], what: &str) -> Result<i64, InterpError> {
    e.eval(&Env {
        params,
        vars: &[],
        block: &[],
        wave: 0,
    })
    .ok_or_else(|| InterpError::Eval {
        what: what.into(),
        expr: e.to_string(),
    })
}

/// Elements a buffer for global `g` must hold: one past the largest offset its shape and strides reach.
pub fn required_len(k: &Kernel, params: &[i64], g: usize) -> Result<usize, InterpError> {
    let d = &k.globals[g];
    let overflow = || InterpError::Overflow {
        what: format!("the extent of tensor `{}`", d.name),
    };
    let mut last = 0i64;
    for (i, (dim, st)) in d.dims.iter().zip(&d.strides).enumerate() {
        let n = eval(dim, params, &format!("dim {i} of `{}`", d.name))?;
        if n <= 0 {
            return Ok(0);
        }
        let st = eval(st, params, &format!("stride {i} of `{}`", d.name))?;
        last = (n - 1)
            .checked_mul(st)
            .and_then(|x| last.checked_add(x))
            .ok_or_else(overflow)?;
    }
    usize::try_from(last)
        .ok()
        .and_then(|x| x.checked_add(1))
        .ok_or_else(overflow)
}

/// The first store to a read-only tensor, as an error.
fn check_access(k: &Kernel) -> Result<(), InterpError> {
    let mut bad = None;
    k.for_each_op(|r| {
        if let Op::StoreGlobal { dst, .. } | Op::AtomicAdd { dst, .. } = r.op {
            let g = &k.globals[dst.tensor.0 as usize];
            if g.access == Access::Read && bad.is_none() {
                bad = Some(InterpError::WriteToReadOnly {
                    kernel: k.name.clone(),
                    tensor: g.name.clone(),
                    op: r.index,
                });
            }
        }
    });
    bad.map_or(Ok(()), Err)
}

/// The grid's coordinates for launch id `id` (HipKittens Algorithm 1 / MI300X-attn §4.1 via `kittens_grid`).
pub fn block_coords(
    remap_kind: GridOrder,
    extents: &[i64],
    id: i64,
) -> Result<Vec<i64>, InterpError> {
    let u: Vec<u64> = extents.iter().map(|&x| x.max(0) as u64).collect();
    let coords = remap_kind
        .coords(id.max(0) as u64, &u)
        .ok_or(InterpError::Remap {
            remap: remap_kind,
            want: remap_kind.dims().unwrap_or(extents.len()),
            got: extents.len(),
        })?;
    Ok(coords.into_iter().map(|c| c as i64).collect())
}

/// Runs `k` with `params` over host tensors (one per global, in declaration order, values as f32 laid
/// out by the global's strides). Inputs are first rounded to their dtypes; outputs are written rounded.
///
/// The interpreter runs the waves between two barriers in one order, so a racy kernel would return
/// numbers a device need not: first the schedule analysis runs on the launch at `params`
/// ([`race_check`], cached per kernel and parameters), and a hazard is an [`InterpError::Race`] that
/// names it. [`run_unchecked`] skips the check (tests that show what a race does to the numbers).
pub fn run(k: &Kernel, params: &[i64], tensors: &mut [Vec<f32>]) -> Result<RunStats, InterpError> {
    if params.len() == k.params.len() {
        race_check(k, params)?;
    }
    run_unchecked(k, params, tensors)
}

/// The schedule analysis of `k`'s launch at `params` ([`crate::analysis::analyze_launch`]): the first
/// hazard as an [`InterpError::Race`]. An analysis that cannot run at these parameters (an empty or
/// too large problem, an expression it cannot evaluate) does not refuse the kernel: the interpreter
/// reports such problems itself. Verdicts are cached per kernel and parameters (the analysis of a
/// large launch takes longer than a small run).
pub fn race_check(k: &Kernel, params: &[i64]) -> Result<(), InterpError> {
    use std::collections::HashMap;
    use std::hash::{Hash, Hasher};
    use std::sync::{Mutex, OnceLock};
    type Verdict = Option<(crate::analysis::Hazard, Vec<i64>, usize)>;
    static CACHE: OnceLock<Mutex<HashMap<u64, Verdict>>> = OnceLock::new();
    let key = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{k:?}").hash(&mut h);
        params.hash(&mut h);
        h.finish()
    };
    let cache = CACHE.get_or_init(Default::default);
    let cached = cache.lock().ok().and_then(|c| c.get(&key).cloned());
    let verdict = match cached {
        Some(v) => v,
        None => {
            let opts = crate::analysis::Options {
                params: params.to_vec(),
                ..Default::default()
            };
            let v = match crate::analysis::analyze_launch(k, &opts) {
                Ok(launch) => {
                    let n = launch.hazards().count();
                    launch
                        .hazards()
                        .next()
                        .map(|(r, h)| (h.clone(), r.block.clone(), n - 1))
                }
                Err(_) => None,
            };
            if let Ok(mut c) = cache.lock() {
                if c.len() > 4096 {
                    c.clear();
                }
                c.insert(key, v.clone());
            }
            v
        }
    };
    match verdict {
        None => Ok(()),
        Some((hazard, block, more)) => Err(InterpError::Race {
            kernel: k.name.clone(),
            hazard: Box::new(hazard),
            block,
            more,
        }),
    }
}

/// The counters' hand-off ([`crate::Stmt::LastArrival`]): each counter element must have been zero
/// at launch and see as many arrivals as the program expects; the last of them (the highest launch
/// id) runs again, through the body, over the stores its element's arrivals released (its own
/// included) and the launch's inputs elsewhere, and its writes replace those of its first run.
/// Returns the wave-ops of the second runs.
fn run_last_arrivals(
    k: &Kernel,
    prog: &program::Program,
    params: &[i64],
    inputs: &[&[f32]],
    extents: &[i64],
    all: &mut [exec::Writes],
) -> Result<u64, InterpError> {
    use std::collections::{BTreeMap, HashMap, HashSet};
    // Per counter element: (block position in `all`, expected arrivals, stores released).
    type Arrived = Vec<(usize, i64, usize)>;
    let mut groups: BTreeMap<(usize, i64), Arrived> = BTreeMap::new();
    for (i, w) in all.iter().enumerate() {
        for a in &w.arrivals {
            groups
                .entry(a.key)
                .or_default()
                .push((i, a.expected, a.released));
        }
    }
    if groups.is_empty() {
        return Ok(0);
    }
    let bad = |detail: String| InterpError::Op {
        op: "last_arrival".into(),
        detail,
    };
    let mut last: BTreeMap<usize, Vec<(usize, i64)>> = BTreeMap::new();
    for (&(g, idx), arrived) in &groups {
        let name = &k.globals[g].name;
        let stride = eval(&k.globals[g].strides[0], params, "counter stride")?;
        let at = usize::try_from(idx * stride)
            .ok()
            .filter(|&o| o < inputs[g].len())
            .ok_or_else(|| bad(format!("counter {name}[{idx}] is outside the tensor")))?;
        if inputs[g][at] != 0.0 {
            return Err(bad(format!(
                "counter {name}[{idx}] is {} at launch (it must be zero, as the last arrival leaves it)",
                inputs[g][at]
            )));
        }
        let want = arrived[0].1;
        if arrived.iter().any(|a| a.1 != want) || arrived.len() as i64 != want {
            return Err(bad(format!(
                "counter {name}[{idx}]: {} blocks arrived where the program expects {want} (no block \
                 would run the body, or the counter would be left non-zero)",
                arrived.len()
            )));
        }
        let (pos, ..) = *arrived
            .iter()
            .max_by_key(|a| all[a.0].block)
            .expect("non-empty");
        last.entry(pos).or_default().push((g, idx));
    }
    let mut ops = 0;
    for (pos, keys) in last {
        let mut acquired = HashMap::new();
        for key in &keys {
            for &(i, _, released) in &groups[key] {
                for &(g, o, v) in &all[i].stores[..released] {
                    acquired.insert((g, o), v);
                }
            }
        }
        let keys: HashSet<(usize, i64)> = keys.into_iter().collect();
        let id = all[pos].block;
        let coords = block_coords(k.grid.remap, extents, id)?;
        let handoff = exec::Handoff {
            last: Some(&keys),
            acquired: Some(&acquired),
        };
        let (w, n) = exec::run_block(k, prog, params, inputs, &coords, id, handoff)?;
        all[pos] = w;
        ops += n;
    }
    Ok(ops)
}

/// [`run`] without the race check: the waves run in the interpreter's one order whatever the
/// schedule analysis would say (for tests that show what a missing barrier or wait does to the numbers).
pub fn run_unchecked(
    k: &Kernel,
    params: &[i64],
    tensors: &mut [Vec<f32>],
) -> Result<RunStats, InterpError> {
    if params.len() != k.params.len() {
        return Err(InterpError::Params {
            kernel: k.name.clone(),
            want: k.params.len(),
            got: params.len(),
        });
    }
    if tensors.len() != k.globals.len() {
        return Err(InterpError::Tensors {
            kernel: k.name.clone(),
            want: k.globals.len(),
            got: tensors.len(),
        });
    }
    check_access(k)?;
    let rnd = |x: f32, dt| crate::numerics::round(x, dt, crate::numerics::Rounding::Rtne);
    // Read-only tensors that need rounding are read through a rounded copy; the others are rounded
    // in place (the kernel owns them).
    let mut copies: Vec<Option<Vec<f32>>> = Vec::with_capacity(tensors.len());
    for (g, t) in tensors.iter_mut().enumerate() {
        let need = required_len(k, params, g)?;
        if t.len() < need {
            return Err(InterpError::TensorSize {
                name: k.globals[g].name.clone(),
                need,
                got: t.len(),
            });
        }
        let dt = k.globals[g].dtype;
        let exact = |x: f32| x.is_nan() || rnd(x, dt) == x;
        copies.push(None);
        if dt == DType::F32 || t.iter().all(|&x| exact(x)) {
            continue;
        }
        if k.globals[g].access == Access::Read {
            copies[g] = Some(t.iter().map(|&x| rnd(x, dt)).collect());
        } else {
            t.iter_mut().for_each(|x| *x = rnd(*x, dt));
        }
    }
    let extents: Vec<i64> = k
        .grid
        .extents
        .iter()
        .map(|e| eval(e, params, "grid extent"))
        .collect::<Result<_, _>>()?;
    let blocks: i64 = extents
        .iter()
        .try_fold(1i64, |n, e| n.checked_mul(*e.max(&0)))
        .ok_or_else(|| InterpError::Overflow {
            what: format!("the grid size of `{}` ({extents:?})", k.name),
        })?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(usize::try_from(blocks.max(1)).unwrap_or(usize::MAX));
    let inputs: Vec<&[f32]> = tensors
        .iter()
        .zip(&copies)
        .map(|(t, c)| c.as_deref().unwrap_or(t))
        .collect();
    let inputs = &inputs[..];
    let program = program::Program::new(&k.body);
    let prog = &program;
    let cancel = CANCEL.with(|c| c.borrow().clone());
    let cancelled = || cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed));
    let cancelled = &cancelled;
    let results: Vec<Result<(Vec<exec::Writes>, u64), InterpError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let extents = &extents;
                s.spawn(move || {
                    let mut out = Vec::new();
                    let mut ops = 0;
                    for id in (t as i64..blocks).step_by(threads) {
                        if cancelled() {
                            return Err(InterpError::Cancelled);
                        }
                        let coords = block_coords(k.grid.remap, extents, id)?;
                        let (w, n) = exec::run_block(
                            k,
                            prog,
                            params,
                            inputs,
                            &coords,
                            id,
                            exec::Handoff::default(),
                        )?;
                        out.push(w);
                        ops += n;
                    }
                    Ok((out, ops))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("interpreter thread panicked"))
            .collect()
    });
    let mut all = Vec::new();
    let mut wave_ops = 0;
    for r in results {
        let (w, n) = r?;
        all.extend(w);
        wave_ops += n;
    }
    all.sort_by_key(|w| w.block);
    wave_ops += run_last_arrivals(k, prog, params, inputs, &extents, &mut all)?;
    drop(copies);
    for w in all {
        for (g, off, v) in w.stores {
            tensors[g][off] = v;
        }
        // In f32, in launch order: one of the orders a device may take (`Op::AtomicAdd`).
        for (g, off, v) in w.adds {
            tensors[g][off] += v;
        }
    }
    Ok(RunStats {
        blocks: blocks as u64,
        waves_per_block: k.waves,
        wave_ops,
    })
}

#[cfg(test)]
mod cancel_tests {
    use super::*;
    use crate::{Access, KernelBuilder, Schedule};
    use kittens_hw::dtype::DType::F32;
    use kittens_tile::{BaseShape, Layout};

    /// A raised flag stops a run before its first block and leaves the tensors as they were; the
    /// flag applies only inside `with_cancel`.
    #[test]
    fn a_raised_flag_stops_the_run_and_writes_nothing() {
        let mut k = KernelBuilder::new("exp2", Schedule::Plain { waves: 1 });
        let n = k.param("n");
        let x = k.global(
            "x",
            F32,
            &[("r", n.clone()), ("c", n.clone())],
            Access::Read,
        );
        let y = k.global("y", F32, &[("r", n.clone()), ("c", n)], Access::Write);
        let t = k.tile("t", F32, 16, 16, Layout::Row, BaseShape::S16X16);
        k.load_global(t, k.gtile(x, 16, 16, 0, 0));
        k.exp2(t, t);
        k.store(k.gtile(y, 16, 16, 0, 0), t);
        let kernel = k.finish().unwrap();
        let mut tensors = vec![vec![1.0; 16 * 16], vec![0.0; 16 * 16]];
        let flag = Arc::new(AtomicBool::new(true));
        let r = with_cancel(flag.clone(), || run(&kernel, &[16], &mut tensors));
        assert_eq!(r, Err(InterpError::Cancelled));
        assert!(tensors[1].iter().all(|&v| v == 0.0));
        // Outside `with_cancel` the flag is not consulted.
        run(&kernel, &[16], &mut tensors).unwrap();
        assert!(tensors[1].iter().all(|&v| v == 2.0));
    }
}
