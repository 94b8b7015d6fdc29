//! Binding a launch to the caller's layout: each tensor a tile program declares matched to the caller's
//! (or to scratch), parameters put in declaration order, free parameters checked to shape nothing, and
//! the launch's arguments, tensor-map geometry and grid fixed ([`bind`]) — the shape-only work that
//! [`super::Prepared::new`] does once so that [`super::Prepared::launch`] takes addresses only.

use std::sync::{Arc, Mutex};

use kittens_codegen::KernelArg;
use kittens_ir::Kernel;

use super::{Arg, Bound, MapSlot, StageSpec, TensorSpec, MAP_CACHE};
use crate::cuda::args::{map_geometry, param};
use crate::cuda::caller::Loaded;
use crate::cuda::driver::MapType;
use crate::cuda::launch::{check_args, LaunchError, TensorArg, ALIGN};
use crate::cuda::limits::check_tensor_map_nd;
use crate::cuda::{invalid, CudaError};

/// The declared dims and strides of `kernel`'s global `name` at `params` (a scratch tensor's layout).
pub(super) fn declared(
    kernel: &Kernel,
    name: &str,
    params: &[i64],
) -> Result<(Vec<u64>, Vec<u64>), CudaError> {
    let g = kernel
        .globals
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| invalid(format!("no tensor `{name}` in `{}`", kernel.name)))?;
    let env = kittens_ir::Env {
        params,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let eval = |e: &kittens_ir::Expr| {
        e.eval(&env)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| invalid(format!("tensor `{name}`: `{e}` does not evaluate")))
    };
    Ok((
        g.dims.iter().map(eval).collect::<Result<_, _>>()?,
        g.strides.iter().map(eval).collect::<Result<_, _>>()?,
    ))
}

/// A layout's dimensions that address distinct elements: those of more than one element and a
/// non-zero stride, as (size, stride) in order.
pub(super) fn essential(shape: &[u64], strides: &[u64]) -> Vec<(u64, u64)> {
    shape
        .iter()
        .zip(strides)
        .filter(|&(&d, &s)| d > 1 && s != 0)
        .map(|(&d, &s)| (d, s))
        .collect()
}

/// The offsets a layout covers, canonical whatever the order or split of its dimensions: the
/// essential dimensions by decreasing stride, each merged into the one before it where that one's
/// stride is this one's extent times stride (a contiguous run), e.g. `[G, b, hk, g, d]` and
/// `[G, b, h, d]` (h = hk·g), both dense, are one run.
pub(super) fn offsets_set(shape: &[u64], strides: &[u64]) -> Vec<(u64, u64)> {
    let mut dims = essential(shape, strides);
    dims.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(dims.len());
    for (d, s) in dims {
        match out.last_mut() {
            Some(last) if last.1 == d * s => *last = (last.0 * d, s),
            _ => out.push((d, s)),
        }
    }
    out
}

/// At most this many free parameters (a dropout seed and counter take four 32-bit words).
const MAX_FREE: usize = 8;

/// Every name in `free` is a parameter of some launch, read by no tensor layout and no grid extent.
pub(super) fn check_free(stages: &[StageSpec], free: &[&str]) -> Result<(), LaunchError> {
    if free.len() > MAX_FREE {
        return Err(invalid(format!(
            "{} free parameters (at most {MAX_FREE})",
            free.len()
        ))
        .into());
    }
    for name in free {
        let mut found = false;
        for s in stages {
            let Some(i) = s.kernel.params.iter().position(|p| p.name == *name) else {
                continue;
            };
            found = true;
            let id = kittens_ir::ParamId(i as u32);
            let layout = s
                .kernel
                .globals
                .iter()
                .find(|g| g.dims.iter().chain(&g.strides).any(|e| e.reads_param(id)));
            let grid = s.kernel.grid.extents.iter().any(|e| e.reads_param(id));
            if let Some(g) = layout {
                return Err(LaunchError::Param {
                    kernel: s.kernel.name.clone(),
                    param: name.to_string(),
                    why: format!(
                        "the layout of `{}` reads it, so it cannot vary per launch",
                        g.name
                    ),
                });
            }
            if grid {
                return Err(LaunchError::Param {
                    kernel: s.kernel.name.clone(),
                    param: name.to_string(),
                    why: "the grid reads it, so it cannot vary per launch".into(),
                });
            }
        }
        if !found {
            return Err(
                invalid(format!("free parameter `{name}` is no launch's parameter")).into(),
            );
        }
    }
    Ok(())
}

/// `params` in `kernel`'s declaration order; a missing or unknown name is an error.
pub(super) fn ordered_params(
    kernel: &Kernel,
    params: &[(String, i64)],
) -> Result<Vec<i64>, LaunchError> {
    for (name, _) in params {
        if !kernel.params.iter().any(|p| &p.name == name) {
            return Err(LaunchError::Param {
                kernel: kernel.name.clone(),
                param: name.clone(),
                why: "the kernel takes no such parameter".into(),
            });
        }
    }
    kernel
        .params
        .iter()
        .map(|p| {
            params
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|&(_, v)| v)
                .ok_or_else(|| LaunchError::Param {
                    kernel: kernel.name.clone(),
                    param: p.name.clone(),
                    why: "missing".into(),
                })
        })
        .collect()
}

/// Checks `tensors` against `s`'s declarations (as a one-off launch would, at a stand-in aligned
/// address) and fixes the launch's arguments, tensor-map geometry and grid.
pub(super) fn bind(
    kernel: Arc<Loaded>,
    s: &StageSpec,
    tensors: &[TensorSpec],
    spans: &mut [u64],
    free: &[&str],
    callers: usize,
) -> Result<Bound, LaunchError> {
    let l = &kernel.lowered;
    let params: Vec<(&str, i64)> = s.params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let index = |name: &str| {
        tensors
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| invalid(format!("no tensor `{name}`")))
    };
    let ordered = ordered_params(&l.ir, &s.params)?;
    // Each launch declares its own view of a tensor: the attention backward's query blocks read the
    // log-sum-exp as `[b, h, s, d]` with a zero stride over d, its key blocks as `[b, h, 16, s]`. A
    // tensor matches a declaration when both are the same once broadcast (stride 0) and single
    // dimensions are left out — the same elements at the same offsets.
    let mut views = Vec::with_capacity(l.ir.globals.len());
    for g in &l.ir.globals {
        let t = &tensors[index(&g.name)?];
        let (shape, strides) = declared(&l.ir, &g.name, &ordered)?;
        let empty = shape.contains(&0) || t.shape.contains(&0);
        let same = if empty {
            shape.contains(&0) && t.shape.contains(&0)
        } else if index(&g.name)? >= callers {
            // Scratch is the launches' own: two launches may order its dimensions differently (the
            // RMSNorm backward writes dweight partials as `[part, col]` and sums them as `[col,
            // part]`) or split one differently (the GQA-packed paged decode writes the key split's
            // partials as `[.., heads_kv, group, ..]`, its merge reads `[.., heads, 1, ..]`); the
            // same offsets in any order are the same tensor.
            offsets_set(&shape, &strides) == offsets_set(&t.shape, &t.strides)
        } else {
            // The caller's: in order (a transposed tensor of a square shape has the same offsets).
            essential(&shape, &strides) == essential(&t.shape, &t.strides)
        };
        if t.dtype != g.dtype || !same {
            return Err(LaunchError::Tensor {
                kernel: l.ir.name.clone(),
                tensor: g.name.clone(),
                why: format!(
                    "{:?} of shape {:?} and strides {:?} (elements); the kernel at {params:?} reads \
                     {:?} of shape {shape:?} and strides {strides:?} ({})",
                    t.dtype,
                    t.shape,
                    t.strides,
                    g.dtype,
                    g.dim_names.join(", ")
                ),
            });
        }
        views.push((shape, strides));
    }
    let args: Vec<TensorArg> =
        l.ir.globals
            .iter()
            .zip(&views)
            .map(|(g, (shape, strides))| TensorArg {
                name: &g.name,
                ptr: ALIGN,
                shape,
                strides,
                dtype: g.dtype,
            })
            .collect();
    let placed = check_args(&l.ir, &params, &args)?;
    for (g, (_, span)) in l.ir.globals.iter().zip(&placed.spans) {
        let i = index(&g.name)?;
        spans[i] = spans[i].max(*span);
    }
    let mut ints = Vec::new();
    let mut maps = Vec::new();
    let mut slots = Vec::with_capacity(l.args.len());
    for a in &l.args {
        slots.push(match a {
            KernelArg::Param { name } => {
                let v = param(&params, name)?;
                ints.push(i32::try_from(v).map_err(|_| invalid(format!("{name} = {v}")))?);
                Arg::Int(ints.len() - 1)
            }
            KernelArg::Global { name } => Arg::Ptr(index(name)?),
            KernelArg::TensorMap(t) => {
                let geometry = map_geometry(l, t, &params)?;
                let tensor = index(&geometry.tensor)?;
                let bytes = usize::try_from(spans[tensor]).map_err(invalid)?;
                let ty = MapType::of(geometry.dtype)?;
                check_tensor_map_nd(
                    &geometry.dims,
                    &geometry.strides,
                    &geometry.boxes,
                    ty.bytes(),
                    bytes,
                )
                .map_err(|e| invalid(format!("tensor `{}`: {e}", geometry.tensor)))?;
                maps.push(MapSlot {
                    tensor,
                    geometry,
                    cache: Mutex::new(Vec::with_capacity(MAP_CACHE)),
                });
                Arg::Map(maps.len() - 1)
            }
        });
    }
    let grid = l.blocks(&params, kernel.resident);
    let grid = grid.ok_or_else(|| {
        invalid(format!(
            "the grid of `{}` does not evaluate at {params:?}",
            l.entry
        ))
    })?;
    let free = free
        .iter()
        .map(|f| {
            l.args
                .iter()
                .position(|a| matches!(a, KernelArg::Param { name } if name == f))
                .map(|pos| {
                    l.args[..pos]
                        .iter()
                        .filter(|a| matches!(a, KernelArg::Param { .. }))
                        .count()
                })
        })
        .collect();
    Ok(Bound {
        kernel,
        grid,
        ints,
        free,
        args: slots,
        maps,
    })
}
