//! Kernel arguments read again where an epilogue uses them, instead of held in SGPRs across the loops.
//!
//! The compiler loads every kernel argument from the kernarg segment at the kernel's entry, and merges
//! adjacent ones into one `s_load_dwordx8`/`x16` (so an argument that only the epilogue needs arrives
//! with the loop's and stays live across the loop in its own SGPR; CDNA3 ISA guide, scalar memory
//! reads). A tensor in its own strides (`kittens_kernels::attn::strides`) brings three such arguments
//! and its pointer: the attention backward's key blocks write dK and dV only after their query loop,
//! and their 2 pointers and 6 strides, held across it, are what put gfx942's 8-wave ping-pong past
//! the wave's SGPRs (docs/attn_bwd_amd.md).
//!
//! So a tensor that (1) has stride parameters of its own (used by no other tensor's sizes or
//! strides) and (2) is touched only outside loops and after one, has its pointer, its own strides
//! and its span read again from the kernarg segment at each access (`kernarg_late`: scalar loads
//! there, through a pointer the compiler cannot see through, so they are neither hoisted nor merged
//! with the entry's). The explicit arguments sit in declaration order at their natural alignment
//! (AMDGPUUsage, the kernel argument layout of code object V5): the pointers of the globals, 8 bytes
//! each, then the 4-byte `int` parameters ([`super::lower`] declares them in that order).

use crate::cexpr::{ident, param_name};
use kittens_ir::{Expr, GlobalId, Kernel, Op, Stmt};
use std::collections::{BTreeSet, HashMap};

/// The tensors read late and, for each, the parameters its accesses read again.
#[derive(Debug, Default)]
pub(super) struct LateArgs {
    own: HashMap<u32, Vec<u32>>,
}

/// Parameters an expression mentions.
fn params(e: &Expr, out: &mut BTreeSet<u32>) {
    match e {
        Expr::Param(p) => {
            out.insert(p.0);
        }
        Expr::Bin(_, a, b) => {
            params(a, out);
            params(b, out);
        }
        Expr::Elem(_, i) => params(i, out),
        Expr::Const(_) | Expr::Var(_) | Expr::Block(_) | Expr::Wave | Expr::Round => {}
    }
}

/// The global tensor a memory op reads or writes.
pub(super) fn op_global(op: &Op) -> Option<GlobalId> {
    match op {
        Op::LoadAsync { src, .. } | Op::LoadGlobal { src, .. } => Some(src.tensor),
        Op::StoreGlobal { dst, .. } | Op::AtomicAdd { dst, .. } => Some(dst.tensor),
        _ => None,
    }
}

/// Per global: touched inside a loop, touched before any loop ended.
#[derive(Default, Clone, Copy)]
struct Uses {
    in_loop: bool,
    before_loop: bool,
    any: bool,
}

fn walk(body: &[Stmt], depth: usize, after_loop: &mut bool, uses: &mut HashMap<u32, Uses>) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                if let Some(g) = op_global(op) {
                    let u = uses.entry(g.0).or_default();
                    u.any = true;
                    u.in_loop |= depth > 0;
                    u.before_loop |= !*after_loop;
                }
            }
            Stmt::For { body, .. } => {
                walk(body, depth + 1, after_loop, uses);
                *after_loop = true;
            }
            Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => walk(body, depth, after_loop, uses),
            Stmt::If { then, els, .. } => {
                walk(then, depth, after_loop, uses);
                walk(els, depth, after_loop, uses);
            }
            Stmt::Roles { producer, consumer } => {
                walk(producer, depth, after_loop, uses);
                walk(consumer, depth, after_loop, uses);
            }
        }
    }
}

impl LateArgs {
    pub fn of(k: &Kernel) -> LateArgs {
        let mut uses = HashMap::new();
        walk(&k.body, 0, &mut false, &mut uses);
        let mentioned: Vec<BTreeSet<u32>> = k
            .globals
            .iter()
            .map(|g| {
                let mut s = BTreeSet::new();
                g.dims
                    .iter()
                    .chain(&g.strides)
                    .for_each(|e| params(e, &mut s));
                s
            })
            .collect();
        let mut own = HashMap::new();
        for (i, g) in k.globals.iter().enumerate() {
            let u = uses.get(&(i as u32)).copied().unwrap_or_default();
            if !u.any || u.in_loop || u.before_loop || g.clip.is_some() {
                continue;
            }
            let mut s = BTreeSet::new();
            g.strides.iter().for_each(|e| params(e, &mut s));
            let mine: Vec<u32> = s
                .into_iter()
                .filter(|p| {
                    mentioned
                        .iter()
                        .enumerate()
                        .all(|(j, m)| j == i || !m.contains(p))
                })
                .collect();
            if !mine.is_empty() {
                own.insert(i as u32, mine);
            }
        }
        LateArgs { own }
    }

    /// The declarations that shadow tensor `g`'s pointer, own parameters and span at an access of
    /// it (empty when `g` is not read late); `span` is the span's initializer over the shadowed names.
    pub fn shadows(&self, k: &Kernel, g: GlobalId, ptr_ty: &str, span: &str) -> Vec<String> {
        let Some(own) = self.own.get(&g.0) else {
            return Vec::new();
        };
        let globals = 8 * k.globals.len() as u32;
        let n = ident(&k.globals[g.0 as usize].name);
        let mut out = vec![format!(
            "{ptr_ty} g_{n} = kernarg_late<{ptr_ty}>({}); // read here: see late_args.rs",
            8 * g.0
        )];
        out.extend(own.iter().map(|&p| {
            format!(
                "const int {} = kernarg_late<int>({});",
                param_name(k, p),
                globals + 4 * p
            )
        }));
        out.push(format!("const u64 span_{n} = {span};"));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kittens_hw::dtype::DType::Bf16;
    use kittens_ir::{Access, GridOrder, KernelBuilder, Schedule};
    use kittens_tile::{BaseShape, Layout};

    /// Only `late`, with a stride of its own and written after the loop, is read late: not `x` (read
    /// in the loop), `dense` (its stride is the shared `n`), nor `early` (written before the loop).
    #[test]
    fn only_an_epilogue_tensor_with_strides_of_its_own_is_read_late() {
        let mut k = KernelBuilder::new("late_args", Schedule::Plain { waves: 1 });
        let n = k.param("n");
        let tensor = |k: &mut KernelBuilder, name: &str, stride: Expr, access| {
            let dims = [("r", n.clone()), ("c", Expr::c(32))];
            k.global_strided(name, Bf16, &dims, vec![stride, Expr::c(1)], access)
        };
        let x_s = k.param("x_s");
        let x = tensor(&mut k, "x", x_s, Access::Read);
        let late_s = k.param("late_s");
        let late = tensor(&mut k, "late", late_s, Access::Write);
        let dense = tensor(&mut k, "dense", n.clone(), Access::Write);
        let early_s = k.param("early_s");
        let early = tensor(&mut k, "early", early_s, Access::Write);
        k.grid(vec![Expr::c(1)], GridOrder::RowMajor);
        let t = k.tile("t", Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
        let view = |k: &KernelBuilder, g, r0: Expr| k.gview(g, vec![r0, Expr::c(0)], 0, 1, 16, 32);
        k.load_global(t, view(&k, x, Expr::c(0)));
        k.store(view(&k, early, Expr::c(0)), t);
        k.for_range("i", 0, n.ceil_div(16), |k, i| {
            let v = view(k, x, i * 16);
            k.load_global(t, v);
        });
        k.store(view(&k, late, Expr::c(0)), t);
        k.store(view(&k, dense, Expr::c(0)), t);
        let kernel = k.finish().unwrap();
        let la = LateArgs::of(&kernel);
        assert_eq!(la.own.keys().copied().collect::<Vec<_>>(), [late.0]);
        assert_eq!(la.own[&late.0], [2]);
        let shadows = la.shadows(&kernel, late, "unsigned short*", "0");
        // 4 globals' pointers (32 bytes), then `late_s`, the third parameter, at 32 + 2·4.
        assert_eq!(
            shadows[..2],
            [
                "unsigned short* g_late = kernarg_late<unsigned short*>(8); // read here: see \
                 late_args.rs",
                "const int late_s = kernarg_late<int>(40);"
            ]
        );
        assert!(la
            .shadows(&kernel, x, "const unsigned short*", "0")
            .is_empty());
    }
}
