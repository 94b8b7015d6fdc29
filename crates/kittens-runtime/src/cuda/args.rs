//! A lowered kernel's arguments from the tile program itself, for any memory: each `TmaMap` names a
//! global tensor whose dims and element strides (expressions over the parameters) give the map's
//! shape in the order `TmaMap::dim_order` fixes, and `Lowered::args` fixes the order and kind of every
//! argument (tensor maps by value, 64-bit device pointers, 32-bit parameters). The benchmark's buffers
//! ([`super::attn`]), one-off launches ([`super::launch`]) and prepared calls ([`super::dispatch`]) read
//! the same geometry.

use std::ffi::c_void;

use cudarc::driver::sys as cu;
use kittens_codegen::cuda::TmaMap;
use kittens_codegen::{KernelArg, Lowered};

use super::driver::Swizzle;
use super::{invalid, CudaError};

/// The parameter named `name` among `values`.
pub fn param(values: &[(&str, i64)], name: &str) -> Result<i64, CudaError> {
    values
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, v)| v)
        .ok_or_else(|| invalid(format!("unknown parameter `{name}`")))
}

/// The shape of one tensor map at given parameter values (CUDA driver API `cuTensorMapEncodeTiled`'s
/// arguments less the address): `dims` innermost first, byte `strides` of the outer dimensions, `boxes`
/// in elements.
#[derive(Debug, Clone, PartialEq)]
pub struct MapGeometry {
    /// The global tensor's name in the tile program.
    pub tensor: String,
    pub dims: Vec<u64>,
    pub strides: Vec<u64>,
    pub boxes: Vec<u32>,
    pub swizzle: Swizzle,
    /// The element type (the map's data type and the unit of `dims` and `boxes`).
    pub dtype: kittens_hw::dtype::DType,
}

/// The geometry of map `t` of `l` at parameter values `values`.
pub fn map_geometry(
    l: &Lowered,
    t: &TmaMap,
    values: &[(&str, i64)],
) -> Result<MapGeometry, CudaError> {
    let ir = &l.ir;
    let g = ir
        .globals
        .get(t.global as usize)
        .ok_or_else(|| invalid("a tensor map of an undeclared tensor"))?;
    let ordered: Vec<i64> = ir
        .params
        .iter()
        .map(|p| param(values, &p.name))
        .collect::<Result<_, _>>()?;
    let env = kittens_ir::Env {
        params: &ordered,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let eval = |e: &kittens_ir::Expr| -> Result<u64, CudaError> {
        e.eval(&env)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| invalid(format!("`{}` of tensor `{}`", e, g.name)))
    };
    let order = TmaMap::dim_order(g.dims.len(), t.row_dim, t.col_dim);
    let dims: Vec<u64> = order
        .iter()
        .map(|&i| eval(&g.dims[i]))
        .collect::<Result<_, _>>()?;
    let elem = u64::from(g.dtype.bytes());
    let strides: Vec<u64> = order[1..]
        .iter()
        .map(|&i| {
            eval(&g.strides[i])?
                .checked_mul(elem)
                .ok_or_else(|| invalid(format!("stride of tensor `{}` overflows", g.name)))
        })
        .collect::<Result<_, _>>()?;
    let mut boxes = vec![1u32; order.len()];
    boxes[0] = t.box_cols;
    if let Some(b) = boxes.get_mut(1) {
        *b = t.box_rows;
    }
    Ok(MapGeometry {
        tensor: g.name.clone(),
        dims,
        strides,
        boxes,
        swizzle: Swizzle::from_bytes(t.swizzle_bytes)?,
        dtype: g.dtype,
    })
}

/// A kernel's arguments in the lowering's order, each in its own storage; [`PackedArgs::pointers`]
/// gives the `void**` array `cuLaunchKernel` takes.
#[derive(Default)]
pub struct PackedArgs {
    maps: Vec<cu::CUtensorMap>,
    ptrs: Vec<u64>,
    ints: Vec<i32>,
    slots: Vec<(Slot, usize)>,
}

#[derive(Clone, Copy)]
enum Slot {
    Map,
    Ptr,
    Int,
}

impl PackedArgs {
    /// Packs `l.args`: tensor maps from `map` (given each map and its geometry at `values`), device
    /// addresses from `address` by tensor name, parameters from `values` (32-bit in the kernel).
    pub fn pack(
        l: &Lowered,
        values: &[(&str, i64)],
        mut map: impl FnMut(&MapGeometry) -> Result<cu::CUtensorMap, CudaError>,
        address: impl Fn(&str) -> Result<u64, CudaError>,
    ) -> Result<PackedArgs, CudaError> {
        let mut p = PackedArgs::default();
        for arg in &l.args {
            match arg {
                KernelArg::TensorMap(t) => {
                    p.maps.push(map(&map_geometry(l, t, values)?)?);
                    p.slots.push((Slot::Map, p.maps.len() - 1));
                }
                KernelArg::Global { name } => {
                    p.ptrs.push(address(name)?);
                    p.slots.push((Slot::Ptr, p.ptrs.len() - 1));
                }
                KernelArg::Param { name } => {
                    let v = param(values, name)?;
                    p.ints
                        .push(i32::try_from(v).map_err(|_| invalid(format!("{name} = {v}")))?);
                    p.slots.push((Slot::Int, p.ints.len() - 1));
                }
            }
        }
        Ok(p)
    }

    /// One pointer per argument, valid while `self` is neither moved nor dropped.
    pub fn pointers(&mut self) -> Vec<*mut c_void> {
        let (maps, ptrs, ints) = (
            self.maps.as_mut_ptr(),
            self.ptrs.as_mut_ptr(),
            self.ints.as_mut_ptr(),
        );
        self.slots
            .iter()
            .map(|&(kind, i)| {
                // SAFETY: `i` indexes the vector `kind` names (pushed together in `pack`).
                unsafe {
                    match kind {
                        Slot::Map => maps.add(i).cast::<c_void>(),
                        Slot::Ptr => ptrs.add(i).cast::<c_void>(),
                        Slot::Int => ints.add(i).cast::<c_void>(),
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kittens_kernels::attn::{AttnArgs, AttnLayout, AttnShape};
    use kittens_kernels::attn_fwd::problem::AttnProblem;
    use kittens_kernels::attn_fwd::split::KvSplits;

    /// The registry's attention for sm_90a at B2 H6/2 N77 (causal, unsplit), lowered, and its
    /// parameters by name.
    fn lowered(dim: usize, layout: AttnLayout) -> (Lowered, Vec<(String, i64)>) {
        let p = AttnProblem {
            args: AttnArgs {
                attn: AttnShape {
                    batch: 2,
                    heads: 6,
                    heads_kv: 2,
                    seq: 77,
                    dim,
                    layout,
                },
                causal: true,
                ..Default::default()
            },
            kv_splits: KvSplits::Fixed(1),
            ..AttnProblem::default()
        };
        let entry = kittens_kernels::registry::by_name("attn_fwd").unwrap();
        let st = crate::cuda::dispatch::registry_stages(entry, &p).unwrap();
        let l = kittens_codegen::lower(&st[0].kernel, kittens_hw::Target::Sm90a).unwrap();
        (l, st[0].params.clone())
    }

    fn by_name(v: &[(String, i64)]) -> Vec<(&str, i64)> {
        v.iter().map(|(n, x)| (n.as_str(), *x)).collect()
    }

    /// The maps of the lowered attention: rows of D contiguous elements, one row per position, the
    /// row pitch H·D (BSHD) or D (BHSD) elements, head counts of q and k as the shape says.
    #[test]
    fn attention_maps_follow_the_layout() {
        for dim in [64usize, 128] {
            for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
                let (l, named) = lowered(dim, layout);
                let values = by_name(&named);
                let mut seen = Vec::new();
                for t in l.tma_maps() {
                    let g = map_geometry(&l, &t, &values).unwrap();
                    let heads = if g.tensor == "k" || g.tensor == "v" {
                        2
                    } else {
                        6
                    };
                    assert_eq!(g.dims[0], dim as u64, "{g:?}");
                    assert_eq!(g.dims[1], 77, "{g:?}");
                    let pitch = match layout {
                        AttnLayout::Bshd => heads * dim as u64 * 2,
                        AttnLayout::Bhsd => dim as u64 * 2,
                    };
                    assert_eq!(g.strides[0], pitch, "{g:?}");
                    let mut rest = g.dims[2..].to_vec();
                    rest.sort();
                    assert_eq!(rest, [2, heads], "{g:?}");
                    seen.push(g.tensor);
                }
                seen.sort();
                seen.dedup();
                // The output is stored through its address (a `Global` argument), not a map.
                assert_eq!(seen, ["k", "q", "v"]);
            }
        }
    }

    /// Every argument of the lowering gets a slot; a tensor the caller lacks is an error.
    #[test]
    fn packs_every_argument_and_refuses_unknown_names() {
        let (l, named) = lowered(64, AttnLayout::Bshd);
        let values = by_name(&named);
        // SAFETY: an all-zero CUtensorMap is plain bytes; it is never launched.
        let blank = || Ok(unsafe { std::mem::zeroed::<cu::CUtensorMap>() });
        let mut asked = Vec::new();
        let mut p = PackedArgs::pack(
            &l,
            &values,
            |_| blank(),
            |name| {
                assert!(["q", "k", "v", "o"].contains(&name), "{name}");
                Ok(0x1000)
            },
        )
        .unwrap();
        asked.extend(
            l.args
                .iter()
                .filter(|a| matches!(a, KernelArg::Global { .. })),
        );
        assert!(!asked.is_empty(), "the output's address is an argument");
        assert_eq!(p.pointers().len(), l.args.len());
        let e = PackedArgs::pack(&l, &values[..2], |_| blank(), |_| Ok(0x1000));
        assert!(e.is_err());
        let e = PackedArgs::pack(&l, &values, |_| Err(invalid("no q here")), |_| Ok(0));
        assert!(e.err().unwrap().to_string().contains("no q here"));
    }
}
