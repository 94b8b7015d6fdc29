//! The one way any lowered kernel reaches device memory: tensors by name (address, shape, strides,
//! dtype) and parameters by name, checked against the tile program's own declarations before
//! anything reaches the driver, then packed in the lowering's argument order and enqueued.
//!
//! Why one path: a kernel declares everything a launch needs — its globals with their dtype, rank and
//! dims and strides as expressions over its parameters, its parameters, its grid rule — so a launcher
//! written per kernel only restates the declaration (docs/architecture.md, "the way out to users").
//! The checks here are the declaration read back: a tensor of the wrong dtype, shape or strides, a
//! parameter past the kernel's 32-bit range, a span past the 64-bit offsets of the generated code,
//! or a base the vector accesses cannot take is refused with the argument, what it got and the limit.
//!
//! The runner's `cuda` backend (`crate::runner::CudaGpu`) launches every registry kernel through
//! [`launch`]; a user's tile program goes through the same function.

use std::ffi::c_void;

use kittens_codegen::{KernelArg, LowerError, Lowered};
use kittens_hw::dtype::DType;
use kittens_ir::{Env, Kernel};

use super::args::PackedArgs;
use super::driver::{encode_tiled, Function, MapType, Stream};
use super::limits::check_tensor_map_nd;
use super::CudaError;

/// Why a launch was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("lowering for sm_90a: {0}")]
    Lower(#[from] LowerError),
    #[error("kernel `{kernel}`, tensor `{tensor}`: {why}")]
    Tensor {
        kernel: String,
        tensor: String,
        why: String,
    },
    #[error("kernel `{kernel}`, parameter `{param}`: {why}")]
    Param {
        kernel: String,
        param: String,
        why: String,
    },
    #[error(transparent)]
    Cuda(#[from] CudaError),
}

/// One tensor of a launch: where it is and how it is laid out (strides in elements, as the tile
/// program declares them).
#[derive(Debug, Clone, Copy)]
pub struct TensorArg<'a> {
    pub name: &'a str,
    pub ptr: u64,
    pub shape: &'a [u64],
    pub strides: &'a [u64],
    pub dtype: DType,
}

/// Where each of a kernel's globals lives, in declaration order: its address and the bytes its
/// declared layout spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub spans: Vec<(u64, u64)>,
}

/// Bases the generated code may read with 16-byte vectors (and TMA requires of every map).
pub const ALIGN: u64 = 16;

/// Checks `params` and `tensors` against `ir`'s declarations (see the module documentation); returns
/// each global's address and byte span in declaration order.
pub fn check_args(
    ir: &Kernel,
    params: &[(&str, i64)],
    tensors: &[TensorArg],
) -> Result<Placed, LaunchError> {
    let kernel = || ir.name.clone();
    let perr = |param: &str, why: String| LaunchError::Param {
        kernel: kernel(),
        param: param.to_string(),
        why,
    };
    let terr = |tensor: &str, why: String| LaunchError::Tensor {
        kernel: kernel(),
        tensor: tensor.to_string(),
        why,
    };
    let declared: Vec<&str> = ir.params.iter().map(|p| p.name.as_str()).collect();
    for (i, (name, v)) in params.iter().enumerate() {
        if !declared.contains(name) {
            return Err(perr(
                name,
                format!("the kernel takes no such parameter (it takes {declared:?})"),
            ));
        }
        if params[..i].iter().any(|(n, _)| n == name) {
            return Err(perr(name, "given twice".into()));
        }
        if i32::try_from(*v).is_err() {
            return Err(perr(
                name,
                format!("{v} is outside the kernel's 32-bit parameter range"),
            ));
        }
    }
    let ordered: Vec<i64> = declared
        .iter()
        .map(|d| {
            params
                .iter()
                .find(|(n, _)| n == d)
                .map(|&(_, v)| v)
                .ok_or_else(|| perr(d, "missing".into()))
        })
        .collect::<Result<_, _>>()?;
    let env = Env {
        params: &ordered,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let names: Vec<&str> = ir.globals.iter().map(|g| g.name.as_str()).collect();
    for (i, t) in tensors.iter().enumerate() {
        if !names.contains(&t.name) {
            return Err(terr(
                t.name,
                format!("the kernel takes no such tensor (it takes {names:?})"),
            ));
        }
        if tensors[..i].iter().any(|u| u.name == t.name) {
            return Err(terr(t.name, "given twice".into()));
        }
    }
    let mut spans = Vec::with_capacity(ir.globals.len());
    for g in &ir.globals {
        let t = tensors
            .iter()
            .find(|t| t.name == g.name)
            .ok_or_else(|| terr(&g.name, "missing".into()))?;
        if t.dtype != g.dtype {
            return Err(terr(
                &g.name,
                format!("dtype {:?}, the kernel takes {:?}", t.dtype, g.dtype),
            ));
        }
        let eval = |e: &kittens_ir::Expr, what: &str| {
            e.eval(&env)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| {
                    terr(
                        &g.name,
                        format!("its {what} `{e}` is negative or overflows at {params:?}"),
                    )
                })
        };
        let want_shape: Vec<u64> = g
            .dims
            .iter()
            .map(|e| eval(e, "dimension"))
            .collect::<Result<_, _>>()?;
        let want_strides: Vec<u64> = g
            .strides
            .iter()
            .map(|e| eval(e, "stride"))
            .collect::<Result<_, _>>()?;
        if t.shape != want_shape.as_slice() {
            return Err(terr(
                &g.name,
                format!(
                    "shape {:?}, the kernel at {params:?} takes {want_shape:?} ({})",
                    t.shape,
                    g.dim_names.join(", ")
                ),
            ));
        }
        if t.strides.len() != want_strides.len() {
            return Err(terr(
                &g.name,
                format!(
                    "{} strides for {} dimensions",
                    t.strides.len(),
                    want_strides.len()
                ),
            ));
        }
        // A dimension of one element has no stride that matters.
        let differs =
            (0..want_shape.len()).any(|d| want_shape[d] > 1 && t.strides[d] != want_strides[d]);
        if differs {
            return Err(terr(
                &g.name,
                format!(
                    "strides {:?} (elements), the kernel reads {want_strides:?}",
                    t.strides
                ),
            ));
        }
        let elem = u64::from(g.dtype.bytes());
        let span = if want_shape.contains(&0) {
            Some(0)
        } else {
            want_shape
                .iter()
                .zip(&want_strides)
                .try_fold(1u64, |acc, (&d, &s)| {
                    (d - 1).checked_mul(s).and_then(|x| acc.checked_add(x))
                })
                .and_then(|n| n.checked_mul(elem))
        };
        let span = span.filter(|&b| i64::try_from(b).is_ok()).ok_or_else(|| {
            terr(
                &g.name,
                "its layout spans more than 2^63 bytes, past the generated code's offsets"
                    .to_string(),
            )
        })?;
        if ir.grid.index32 && span / elem > kittens_ir::INDEX32_MAX_SPAN {
            return Err(terr(
                &g.name,
                format!(
                    "its layout spans {} elements, over the {} a kernel built for 32-bit offsets \
                     addresses (kittens_ir::Grid::index32: build it for this size, which gives the \
                     64-bit form)",
                    span / elem,
                    kittens_ir::INDEX32_MAX_SPAN
                ),
            ));
        }
        if span > 0 && t.ptr % ALIGN != 0 {
            return Err(terr(
                &g.name,
                format!(
                    "base {:#x} is not {ALIGN}-byte aligned (vector loads and TMA need it)",
                    t.ptr
                ),
            ));
        }
        if span > 0 && t.ptr.checked_add(span).is_none() {
            return Err(terr(&g.name, format!("{span} bytes at {:#x} wrap", t.ptr)));
        }
        spans.push((t.ptr, span));
    }
    Ok(Placed { spans })
}

/// The arguments of `l` packed in its order (tensor maps encoded from the declared layouts at the
/// placed addresses, checked against each span), and the number of blocks on a device where
/// `resident` blocks of it fit at once (persistent grids).
pub fn pack(
    l: &Lowered,
    params: &[(&str, i64)],
    placed: &Placed,
    resident: u32,
) -> Result<(PackedArgs, u32), LaunchError> {
    let at = |name: &str| -> Result<(u64, u64), CudaError> {
        l.ir.globals
            .iter()
            .position(|g| g.name == name)
            .and_then(|i| placed.spans.get(i).copied())
            .ok_or_else(|| super::invalid(format!("no tensor `{name}` was placed")))
    };
    let args = PackedArgs::pack(
        l,
        params,
        |g| {
            let (ptr, bytes) = at(&g.tensor)?;
            let bytes = usize::try_from(bytes).map_err(super::invalid)?;
            let ty = MapType::of(g.dtype)?;
            check_tensor_map_nd(&g.dims, &g.strides, &g.boxes, ty.bytes(), bytes)?;
            encode_tiled(ptr, ty, &g.dims, &g.strides, &g.boxes, g.swizzle)
        },
        |name| Ok(at(name)?.0),
    )?;
    let grid = l.blocks(params, resident).ok_or_else(|| {
        super::invalid(format!(
            "the grid of `{}` does not evaluate at {params:?}",
            l.entry
        ))
    })?;
    Ok((args, grid))
}

/// A lowered kernel loaded on a device: the function and how many of its blocks fit at once.
pub struct LoadedKernel {
    pub lowered: Lowered,
    pub function: Function,
    pub resident: u32,
    pub compile: super::CudaCompileReport,
}

impl LoadedKernel {
    /// Compiles `lowered` (NVRTC, through the checked disk cache) and loads it on `dev`.
    pub fn load(
        dev: &std::rc::Rc<super::Device>,
        lowered: Lowered,
    ) -> Result<LoadedKernel, LaunchError> {
        let shared = lowered.dynamic_shared_bytes();
        let image = super::compile(
            &lowered.source,
            &lowered.entry,
            lowered.target.name(),
            shared,
        )?;
        let function = dev
            .load_module(&image.cubin)?
            .function(&lowered.entry, shared)?
            .with_cluster(lowered.cluster);
        let resident = function.resident_blocks(dev.multiprocessors, lowered.threads)?;
        Ok(LoadedKernel {
            lowered,
            function,
            resident,
            compile: image.report,
        })
    }

    /// Checks the arguments against the tile program, packs them and enqueues the launch on
    /// `stream`; a grid of no blocks enqueues nothing.
    ///
    /// # Safety
    /// Every tensor's span (as checked) must be live device memory of this kernel's context until the
    /// launch has run on `stream`; outputs must not overlap inputs unless the kernel reads each
    /// element before writing it.
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        params: &[(&str, i64)],
        tensors: &[TensorArg],
    ) -> Result<u32, LaunchError> {
        let placed = check_args(&self.lowered.ir, params, tensors)?;
        let (mut args, grid) = pack(&self.lowered, params, &placed, self.resident)?;
        if grid == 0 {
            return Ok(0);
        }
        let mut pointers: Vec<*mut c_void> = args.pointers();
        debug_assert_eq!(pointers.len(), self.lowered.args.len());
        debug_assert!(self
            .lowered
            .args
            .iter()
            .all(|a| !matches!(a, KernelArg::Global { name } if name.is_empty())));
        // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`), alive
        // until the call returns; the caller keeps the memory and the stream alive.
        unsafe {
            self.function.launch(
                (grid, 1, 1),
                (self.lowered.threads, 1, 1),
                stream,
                &mut pointers,
            )?
        };
        Ok(grid)
    }
}

#[cfg(test)]
mod tests;
