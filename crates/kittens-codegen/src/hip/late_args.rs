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
