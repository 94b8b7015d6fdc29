//! Lowering a tile-IR kernel to readable HIP for gfx942 / gfx950.
//!
//! The output is one self-contained translation unit: the prelude, then one `extern "C"` kernel whose
//! arguments are the global tensors in declaration order (pointers) followed by the integer parameters.
//! The launch is a 1-d grid of `∏ grid.extents` blocks of `64 · waves` threads; the grid remap turns the
//! launch id into the block's tile coordinates `blk0, blk1, ...` (HipKittens Algorithm 1).
//!
//! Structure is kept: loops stay loops, clusters become commented blocks, conditionals on the wave
//! become scalar branches (the wave index is `readfirstlane`d). Register tiles become arrays of base
//! tiles (`b16x8 r_a[4][2]` — 4×2 base tiles of 16×32 bf16), so the compiler allocates them; every
//! instruction that matters goes through one prelude wrapper (MI300X-attn §2.1). Op lowering is in
//! [`super::ops`]; lane maps come from [`super::layout`].

use super::layout::{lane_map, LaneMap};
use super::reg_maps::{scratch_bytes, vec_map, VecMap};
use super::LowerError;
use crate::cexpr::{cond, expr, ident, param_name, var_name};
use crate::lowered::{GridRule, KernelArg, Lowered, SharedAlloc};
use kittens_hw::{dtype::DType, Arch, Target};
use kittens_ir::{Access, GridOrder, Kernel, Op, RegKind, Stmt};
use std::collections::HashMap;

/// Lower `k` to HIP for `arch` (gfx942 or gfx950): the source, prelude included, and its launch
/// contract (one block per tile, `64 · waves` threads, static LDS, globals then parameters).
///
/// Every shared buffer gets the swizzle the bank solver chooses for `arch` over all of the kernel's
/// accesses to it (`kittens_ir::banks`, HipKittens D.1); the declared swizzle only breaks ties.
pub fn lower(k: &Kernel, arch: Arch) -> Result<Lowered, LowerError> {
    kittens_ir::analysis::verify(k)?;
    if !arch.is_amd() {
        return Err(LowerError::Unsupported(format!(
            "HIP lowering targets gfx942/gfx950, not {}",
            arch.target()
        )));
    }
    if crate::strip::is_strip_program(k) {
        return crate::strip::lower_strip(k, crate::strip::hip(arch))
            .map_err(|e| LowerError::Unsupported(e.0));
    }
    let solved = kittens_ir::banks::with_chosen_swizzles(k, arch)
        .map_err(|e| LowerError::Unsupported(e.to_string()))?;
    let k = &solved;
    // Shared memory per block on every GPU of the target (the catalog, through `Target`).
    let budget = Target::from(arch).shared_bytes_per_block().unwrap_or(0);
    let mut e = Emitter::new(k, arch)?;
    let shared = k.shared_bytes() + e.scratch_per_wave * k.waves;
    if shared > budget {
        return Err(LowerError::Unsupported(format!(
            "`{}` allocates {shared} B of shared memory (register remap scratch included); {} has {budget} B \
             per block (on gfx942 stage the next K tile in registers instead of a second LDS buffer, HipKittens E.1)",
            k.name,
            arch.target()
        )));
    }
    e.kernel()?;
    let mut args: Vec<KernelArg> = k
        .globals
        .iter()
        .map(|g| KernelArg::Global {
            name: g.name.clone(),
        })
        .collect();
    args.extend(k.params.iter().map(|p| KernelArg::Param {
        name: p.name.clone(),
    }));
    Ok(Lowered {
        target: Target::from(arch),
        source: super::translation_unit(&e.lds_ties.resolve(&e.out)),
        entry: ident(&k.name),
        threads: 64 * k.waves,
        shared_bytes: shared,
        shared_alloc: SharedAlloc::Static,
        grid: GridRule::PerTile,
        cluster: 1,
        args,
        waits_for_previous_grid: false,
        ir: k.clone(),
    })
}

/// Emission state: output text, indentation, the lane map of every register tile, and the instruction
/// counts of recently issued async and LDS ops (to turn the IR's op-counted waits into `vmcnt` and
/// `lgkmcnt` instruction counts).
pub(super) struct Emitter<'k> {
    pub k: &'k Kernel,
    pub arch: Arch,
    pub out: String,
    indent: usize,
    pub maps: HashMap<u32, LaneMap>,
    /// Lane maps of the register vectors.
    pub vmaps: HashMap<u32, VecMap>,
    /// Bytes of LDS each wave gets for register remaps (0: none needed).
    pub scratch_per_wave: u32,
    pub async_issued: Vec<u32>,
    pub lds_issued: Vec<u32>,
    /// The registers asm LDS reads fill, to tie to the waits that retire them ([`super::landed`]).
    pub lds_ties: super::landed::LdsTies,
    /// Synchronous global loads go through the compiler, whose own loads share `vmcnt`: async waits
    /// then drain fully instead of counting.
    pub has_global_loads: bool,
    /// MFMAs (and 16-byte LDS reads) go to the compiler's scheduler instead of fixed `asm volatile`:
    /// the 4-wave interleave, and any kernel that asks for an MFMA interleave pattern
    /// (`SchedHint::Pairs` / `MmaReads` / `MmaExp`), which only a movable MFMA can follow.
    pub compiler_scheduled: bool,
    /// The tensors whose arguments are read again at their accesses ([`super::late_args`]).
    late: super::late_args::LateArgs,
}

impl<'k> Emitter<'k> {
    fn new(k: &'k Kernel, arch: Arch) -> Result<Self, LowerError> {
        let (mut maps, mut vmaps) = (HashMap::new(), HashMap::new());
        for (i, r) in k.regs.iter().enumerate() {
            match &r.kind {
                RegKind::Tile(t) => {
                    maps.insert(i as u32, lane_map(arch, t.dtype, t.layout, t.base)?);
                }
                RegKind::Vec(v) => {
                    vmaps.insert(i as u32, vec_map(arch, v)?);
                }
            }
        }
        let (mut has_global_loads, mut scratch_per_wave) = (false, 0);
        let mut compiler_scheduled = k.schedule == kittens_ir::Schedule::Interleave4;
        kittens_ir_walk(&k.body, &mut |op| {
            has_global_loads |= matches!(op, Op::LoadGlobal { .. });
            compiler_scheduled |= matches!(
                op,
                Op::Hint(
                    kittens_ir::SchedHint::Pairs { .. }
                        | kittens_ir::SchedHint::MmaReads { .. }
                        | kittens_ir::SchedHint::MmaExp { .. }
                )
            );
            scratch_per_wave = scratch_per_wave.max(scratch_bytes(k, &maps, op));
        });
        Ok(Emitter {
            k,
            arch,
            out: String::new(),
            indent: 0,
            maps,
            vmaps,
            scratch_per_wave,
            async_issued: vec![],
            lds_issued: vec![],
            lds_ties: Default::default(),
            has_global_loads,
            compiler_scheduled,
            late: super::late_args::LateArgs::of(k),
        })
    }

    /// Append one line at the current indentation.
    pub fn line(&mut self, text: impl AsRef<str>) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    /// `head {`, the body one level deeper, `}`.
    pub fn block(
        &mut self,
        head: impl AsRef<str>,
        body: impl FnOnce(&mut Self) -> Result<(), LowerError>,
    ) -> Result<(), LowerError> {
        let head = head.as_ref();
        self.line(if head.is_empty() {
            "{".to_string()
        } else {
            format!("{head} {{")
        });
        self.indent += 1;
        body(self)?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    pub fn ex(&self, e: &kittens_ir::Expr) -> String {
        expr(self.k, e)
    }

    fn kernel(&mut self) -> Result<(), LowerError> {
        let k = self.k;
        let threads = 64 * k.waves;
        let mut args: Vec<String> = k
            .globals
            .iter()
            .map(|g| format!("{} __restrict__ g_{}", ptr_type(g), ident(&g.name)))
            .collect();
        args.extend((0..k.params.len()).map(|p| format!("int {}", param_name(k, p as u32))));
        self.line(format!(
            "// {} — lowered from the tile IR ({} schedule, {} waves).",
            k.name,
            k.schedule.name(),
            k.waves
        ));
        self.line("using namespace kittens;");
        self.line(format!(
            "extern \"C\" __global__ KITTENS_LAUNCH_BOUNDS({threads})"
        ));
        self.block(
            format!("void {}({})", ident(&k.name), args.join(", ")),
            |e| {
                e.line("const int wave = __builtin_amdgcn_readfirstlane(thread_id() / 64);");
                // The lane from `v_mbcnt` (no register input: recomputed where needed) except in
                // the 4-wave interleave, whose fp8 GEMM clang 22 then spills 2 VGPRs; the 8-wave
                // kernels at 256 registers are the other way round (gfx942's causal attention
                // spilled the work-item id it held across the key loop).
                e.line(if e.k.schedule == kittens_ir::Schedule::Interleave4 {
                    "const int lane = thread_id() % 64;"
                } else {
                    "const int lane = lane_id();"
                });
                e.grid()?;
                e.declarations();
                e.stmts(&k.body)
            },
        )
    }

    /// Tile coordinates of this block from the launch id and the kernel's grid remap.
    fn grid(&mut self) -> Result<(), LowerError> {
        let ext: Vec<String> = self.k.grid.extents.iter().map(|x| self.ex(x)).collect();
        let n = ext.len();
        self.line(format!(
            "int {};",
            (0..n)
                .map(|i| format!("blk{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        match (self.k.grid.remap, n) {
            (GridOrder::RowMajor, _) => {
                self.line("u32 id = block_id_x();");
                for i in (0..n).rev() {
                    self.line(format!(
                        "blk{i} = (int)(id % (u32)({})); id /= (u32)({});",
                        ext[i], ext[i]
                    ));
                }
            }
            (GridOrder::GroupM { window }, 2) => self.line(format!(
                "group_m(block_id_x(), {}, {}, {window}, blk0, blk1);",
                ext[0], ext[1]
            )),
            (
                GridOrder::XcdSwizzle {
                    xcds,
                    window,
                    chunk,
                },
                2,
            ) => {
                self.line(format!("const u32 xy = xcd_chunk(block_id_x(), (u32)({0}) * (u32)({1}), {xcds}, {chunk});", ext[0], ext[1]));
                self.line(format!(
                    "group_m(xy, {}, {}, {window}, blk0, blk1);",
                    ext[0], ext[1]
                ));
            }
            (GridOrder::HeadFirst { xcds }, 3) => {
                let (b, h, q) = (&ext[0], &ext[1], &ext[2]);
                self.line(format!("const u32 qb = (u32)({q}) ? (u32)({q}) : 1u, hh = (u32)({h}) ? (u32)({h}) : 1u;"));
                self.line(format!("const u32 logical = xcd_chunk(block_id_x(), (u32)({b}) * hh * qb, {xcds}, qb);"));
                self.line("blk0 = (int)(logical / qb / hh); blk1 = (int)(logical / qb % hh); blk2 = (int)(logical % qb);");
            }
            (r, n) => {
                return Err(LowerError::Unsupported(format!(
                    "grid remap {r:?} over {n} extents"
                )))
            }
        }
        Ok(())
    }

    /// Shared buffers, buffer resources for the global tensors, register tiles.
    fn declarations(&mut self) {
        let k = self.k;
        for s in &k.shared {
            let n = ident(&s.name);
            self.line(format!(
                "__shared__ __attribute__((aligned(16))) unsigned char smem_{n}[{}];",
                s.bytes()
            ));
            self.line(format!("const u32 lds_{n} = lds_addr(smem_{n});"));
        }
        for g in &k.globals {
            // Bytes the tensor spans, 64-bit: (1 + Σ (dim - 1) · stride) · element bytes. Each load
            // builds its buffer resource at its tile's origin with what is left of this as the bound
            // (`tile_rsrc`, see super::global).
            self.line(format!(
                "const u64 span_{} = {};",
                ident(&g.name),
                self.span_init(g)
            ));
        }
        if self.scratch_per_wave > 0 {
            self.line(format!(
                "__shared__ __attribute__((aligned(16))) unsigned char smem_kittens_scratch[{}];",
                self.scratch_per_wave * k.waves
            ));
        }
        for (i, r) in k.regs.iter().enumerate() {
            if let (RegKind::Tile(t), Some(m)) = (&r.kind, self.maps.get(&(i as u32))) {
                let (gr, gc) = t.base_grid();
                let ty = reg_type(t.dtype, m.elems_per_lane()).unwrap_or("float");
                self.line(format!("{ty} r_{}[{gr}][{gc}];", ident(&r.name)));
            }
            if let Some(v) = self.vmaps.get(&(i as u32)) {
                self.line(format!("float r_{}[{}];", ident(&r.name), v.per_lane()));
            }
        }
    }

    /// `(1 + Σ (dim - 1) · stride) · element bytes`, the initializer of `span_<name>`.
    fn span_init(&self, g: &kittens_ir::GlobalDecl) -> String {
        let span: Vec<String> = g
            .dims
            .iter()
            .zip(&g.strides)
            .map(|(d, s)| format!("((u64)({}) - 1) * (u64)({})", self.ex(d), self.ex(s)))
            .collect();
        format!("(1 + {}) * {}", span.join(" + "), g.dtype.bytes())
    }

    pub fn stmts(&mut self, body: &[Stmt]) -> Result<(), LowerError> {
        body.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), LowerError> {
        match s {
            Stmt::Op { op, implied } => {
                if *implied && matches!(op, Op::Barrier { .. }) {
                    self.line("// implied by the schedule:");
                }
                let shadows = super::late_args::op_global(op).map_or_else(Vec::new, |g| {
                    let decl = &self.k.globals[g.0 as usize];
                    let span = self.span_init(decl);
                    self.late.shadows(self.k, g, &ptr_type(decl), &span)
                });
                if shadows.is_empty() {
                    return self.op(op);
                }
                self.block("", |e| {
                    shadows.into_iter().for_each(|l| e.line(l));
                    e.op(op)
                })
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                let v = var_name(self.k, var.0);
                let head = format!(
                    "for (int {v} = {}; {v} < {}; ++{v})",
                    self.ex(start),
                    self.ex(end)
                );
                self.lds_ties.open_loop();
                self.block(head, |e| e.stmts(body))?;
                self.lds_ties.close_loop();
                Ok(())
            }
            Stmt::If { cond: c, then, els } => {
                let c = cond(self.k, c);
                // A wait in one branch retires nothing on the other path.
                let entry = self.lds_ties.snapshot();
                self.block(format!("if {c}"), |e| e.stmts(then))?;
                let after_then = self.lds_ties.next_branch(entry);
                if !els.is_empty() {
                    self.block("else", |e| e.stmts(els))?;
                }
                self.lds_ties.join(after_then);
                Ok(())
            }
            Stmt::Cluster { kind, label, body } => {
                self.line(format!(
                    "// {} cluster: {label}",
                    format!("{kind:?}").to_lowercase()
                ));
                self.block("", |e| e.stmts(body))
            }
            Stmt::Staggered { body } => {
                self.line("// staggered region: the two warpgroups run one cluster apart");
                self.block("", |e| e.stmts(body))
            }
            Stmt::Roles { .. } => Err(LowerError::Unsupported(
                "producer/consumer roles on CDNA".into(),
            )),
            Stmt::LastArrival { .. } => Err(LowerError::Unsupported(
                "a last-arrival hand-off between blocks on CDNA".into(),
            )),
        }
    }
}

/// Every op of a body, nested statements included.
pub(super) fn kittens_ir_walk(body: &[Stmt], f: &mut dyn FnMut(&Op)) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => f(op),
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => kittens_ir_walk(body, f),
            Stmt::If { then, els, .. } => {
                kittens_ir_walk(then, f);
                kittens_ir_walk(els, f);
            }
            Stmt::Roles { producer, consumer } => {
                kittens_ir_walk(producer, f);
                kittens_ir_walk(consumer, f);
            }
        }
    }
}

/// C pointer type of a global tensor's argument (`const` when the kernel only reads it).
fn ptr_type(g: &kittens_ir::GlobalDecl) -> String {
    let c = if g.access == Access::Read {
        "const "
    } else {
        ""
    };
    format!("{c}{}*", c_elem(g.dtype))
}

/// C element type of a global tensor (16-bit floats travel as raw bits).
pub fn c_elem(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::Bf16 | DType::F16 => "unsigned short",
        DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Fp8E4m3Fnuz => "unsigned char",
        DType::I32 => "int",
    }
}

/// Every base tile of register tile `name` (`gr` × `gc` of them) as a C lvalue.
pub(super) fn base_tiles(name: &str, gr: u32, gc: u32) -> Vec<String> {
    (0..gr)
        .flat_map(|i| (0..gc).map(move |j| format!("{name}[{i}][{j}]")))
        .collect()
}

/// Prelude vector type of one base tile's per-lane elements.
pub(super) fn reg_type(d: DType, elems: u32) -> Option<&'static str> {
    Some(match (d, elems) {
        (DType::Bf16 | DType::F16, 4) => "b16x4",
        (DType::Bf16 | DType::F16, 8) => "b16x8",
        (DType::F32, 1) => "float",
        (DType::F32, 4) => "f32x4",
        (DType::F32, 8) => "f32x8",
        (DType::F32, 16) => "f32x16",
        (DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Fp8E4m3Fnuz, 8) => "fp8x8",
        (DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Fp8E4m3Fnuz, 32) => "fp8x32",
        _ => return None,
    })
}
