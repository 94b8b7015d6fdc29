//! The matrix ops of the sm_90a lowering (`lower.rs`): each `mma` is one warpgroup's `wgmma` chain —
//! A and B from shared memory (bf16 `k16` or OCP e4m3 `k32` steps; A K-major, the four waves' 16-row
//! slices of A forming the warpgroup's 64 rows; B K-major, or N-major for bf16 only) or A from
//! registers (a bf16 fragment, `lower_frag.rs`) with B N-major or K-major. Consecutive
//! `mma` ops are one commit group; inside a compute cluster of a ping-pong consumer role the group's
//! wait moves past the end of the warpgroup's turn (`lower.rs`, `Stmt::Cluster`).

use kittens_ir::{Env, Expr, MmaForm, MmaOperand, Op, RegId, SharedView};
use kittens_tile::Swizzle;

use super::emit::{cname, unsupported, CudaLowerError, Emit};
use super::lower_tma::{column_atoms, swizzle_bytes};
use super::WgmmaInput;

impl Emit<'_> {
    /// Opens a chain: `wgmma.fence` orders the registers written before it, unless this `mma`
    /// continues the open commit group (nothing ran in between).
    fn chain_begin(&mut self) {
        if !self.group_open {
            self.line("kt::wgmma_fence();");
        }
    }

    /// Closes a chain: nothing while the next statement is another `mma` (same commit group); else the
    /// commit, then `wait_group 1` (the previous group has retired, its slots go back) — after the
    /// warpgroup's turn when inside one, else deferred ([`Emit::settle`]).
    fn chain_end(&mut self) {
        if self.group_continues {
            self.group_open = true;
            return;
        }
        self.group_open = false;
        self.line("kt::wgmma_commit();");
        self.commit_group();
        if self.in_turn {
            self.turn_wait = true;
        } else {
            self.owed_wait = true;
        }
    }

    /// `d (+)= a·bᵀ` for one warpgroup from shared memory: each wave's 16-row slice of A must be the
    /// next 16 rows after the previous wave's, so the four slices form wgmma's 64-row A.
    pub(super) fn mma(
        &mut self,
        form: MmaForm,
        d: RegId,
        a: &MmaOperand,
        b: &MmaOperand,
        c: Option<&RegId>,
    ) -> Result<(), CudaLowerError> {
        let (MmaOperand::Shared(av), MmaOperand::Shared(bv)) = (a, b) else {
            return unsupported("mma with a register operand (wgmma SS form only)");
        };
        // B is `N × K` (K-major, `mma_abt`) or `K × N` (N-major, `mma_ab`: wgmma's transposed B);
        // `mma_atb` and `mma_atbt` read A as `K × M` (M-major: the transposed-A immediate).
        let (m_major, n_major) = match form {
            MmaForm::Abt => (false, false),
            MmaForm::Ab => (false, true),
            MmaForm::Atb => (true, true),
            MmaForm::Atbt => (true, false),
        };
        let (acc, _) = self.acc(d);
        let n = self.k.reg(d).shape().1;
        let (kk, am) = if m_major {
            (av.rows, av.cols)
        } else {
            (av.cols, av.rows)
        };
        let (bk, bn) = if n_major {
            (bv.rows, bv.cols)
        } else {
            (bv.cols, bv.rows)
        };
        let (sa, sb) = (self.k.shared_decl(av.buf), self.k.shared_decl(bv.buf));
        // bf16 (k16) or e4m3 (k32) operands: 32 bytes of K per instruction either way.
        let input = match WgmmaInput::of(sa.tile.dtype) {
            Some(i) if sb.tile.dtype == sa.tile.dtype => i,
            _ => {
                return unsupported(format!(
                    "wgmma on {:?} x {:?} operands (bf16 or OCP e4m3, both the same)",
                    sa.tile.dtype, sb.tile.dtype
                ))
            }
        };
        // fp8 wgmma has no transpose immediates: both operands must be K-major (PTX ISA §9.7.15.5.1).
        if (n_major || m_major) && input != WgmmaInput::Bf16 {
            return unsupported(format!(
                "{} with {:?} operands: fp8 wgmma reads K-major operands only (A as M x K, B as N x K, mma_abt)",
                form.name(),
                sa.tile.dtype
            ));
        }
        let ik = input.k();
        if am != 16 || bn != n || bk != kk || kk % ik != 0 {
            return unsupported(format!(
                "mma shapes A {}x{}, B {}x{}, D 16x{n}",
                av.rows, av.cols, bv.rows, bv.cols
            ));
        }
        self.check_slices(av, bv, m_major)?;
        let accumulate = match c {
            Some(r) if *r == d => true,
            None => false,
            Some(_) => return unsupported("mma whose C differs from D"),
        };
        let desc = |t: &kittens_tile::SharedTile| -> Result<&'static str, CudaLowerError> {
            match swizzle_bytes(t.swizzle, t.cols * t.dtype.bytes())? {
                128 => Ok("kt::desc_kmajor_sw128"),
                64 => Ok("kt::desc_kmajor_sw64"),
                32 => Ok("kt::desc_kmajor_sw32"),
                _ => unsupported("wgmma operands without a swizzle"),
            }
        };
        // M-major A (bf16): one 128-byte-swizzled atom of 64 columns holds the warpgroup's 64 rows of
        // M (a tile of more columns is kept as column atoms, `column_atoms`, and the warpgroup's
        // slices must start on one); a K step moves `ik` rows of 128 bytes, as N-major B's does.
        let da = if m_major {
            let t = &sa.tile;
            let atoms = column_atoms(t).unwrap_or(1);
            if t.swizzle != kittens_tile::Swizzle::NV_128B
                || t.cols * t.dtype.bytes() != 128 * atoms
            {
                return unsupported(
                    "M-major A other than 128-byte swizzled atoms of 64 bf16 columns",
                );
            }
            if atoms > 1 && !self.slices_start_atoms(av) {
                return unsupported(
                    "M-major A whose warpgroup's 64 columns do not start a 64-column atom",
                );
            }
            format!("kt::desc_mnmajor_sw128(a0 + %o, {}u)", t.rows * 128)
        } else {
            format!("{}(a0 + %o)", desc(&sa.tile)?)
        };
        let a_step = if m_major { ik * 128 } else { 32 };
        // Per K step (32 bytes of K): A's (and K-major B's) descriptor start moves 32 bytes along the
        // row; N-major B's (bf16 only) moves `ik` rows of 128 bytes inside every atom, the atoms
        // `rows × 128` bytes apart.
        let b_desc = if n_major {
            let t = &sb.tile;
            let whole = (bv.rows, bv.cols) == (t.rows, t.cols);
            let atoms = match column_atoms(t) {
                Some(a) => a,
                None if t.swizzle == kittens_tile::Swizzle::NV_128B
                    && t.cols * t.dtype.bytes() == 128 =>
                {
                    1
                }
                None => {
                    return unsupported(
                        "N-major B other than 128-byte swizzled atoms of 64 bf16 columns",
                    )
                }
            };
            // A band of whole rows of a one-atom tile (8-row aligned, checked with the slices): the
            // descriptor starts at its first row.
            let band = atoms == 1 && bv.cols == t.cols && bv.rows % 8 == 0;
            if !(whole || band) || atoms * 64 != n {
                return unsupported(format!(
                    "N-major B {}x{} of a {}x{} slot (whole slots only)",
                    bv.rows, bv.cols, t.rows, t.cols
                ));
            }
            (
                format!("kt::desc_mnmajor_sw128(b0 + %o, {}u)", t.rows * 128),
                ik * 128,
            )
        } else {
            (format!("{}(b0 + %o)", desc(&sb.tile)?), 32)
        };
        let wrapper = if m_major && n_major {
            self.wgmma_ta_tb.insert(n);
            WgmmaInput::Bf16.wrapper_name_ta_tb(n)
        } else if m_major {
            self.wgmma_ta.insert(n);
            WgmmaInput::Bf16.wrapper_name_ta(n)
        } else if n_major {
            self.wgmma_tb.insert(n);
            WgmmaInput::Bf16.wrapper_name_tb(n)
        } else {
            self.wgmma_n.insert((input, n));
            input.wrapper_name(n)
        };
        self.line(format!("{{ // {} on the warpgroup's 64 rows", form.name()));
        self.depth += 1;
        // The slots' barrier indices, for the operands a producer fills.
        for (v, name) in [(av, "sa"), (bv, "sb")] {
            if !self.owned[v.buf.0 as usize] {
                self.line(format!(
                    "const u32 {name} = {}u + (u32)({});",
                    self.bars[v.buf.0 as usize],
                    self.ex_with(&v.index, "kt_wave0")
                ));
            }
        }
        let a0 = if m_major {
            self.atom_addr(av, "kt_wave0")
        } else {
            self.smem_addr(av, "kt_wave0")
        };
        self.line(format!(
            "const u32 a0 = {a0}, b0 = {};",
            self.smem_addr(bv, "kt_wave0")
        ));
        // A and B filled together share the slot's barrier: one wait. A tile the consumer stores
        // itself has no barrier: a warpgroup barrier ordered its stores (`lower.rs`).
        let filled: Vec<(&SharedView, &str)> = [(av, "sa"), (bv, "sb")]
            .into_iter()
            .filter(|(v, _)| !self.owned[v.buf.0 as usize])
            .collect();
        for &(v, name) in &filled {
            self.wait_full(v, name);
        }
        let held = self.hold(&filled);
        self.line(held);
        // The descriptors of the chain's first step, then per step their start field moved by the
        // step's bytes / 16 (`desc_step`).
        self.line(format!(
            "const u64 kt_da = {}, kt_db = {};",
            da.replace("%o", "0u"),
            b_desc.0.replace("%o", "0u")
        ));
        self.chain_begin();
        for s in 0..kk / ik {
            let flag = if accumulate || s > 0 { "1u" } else { "0u" };
            let db = desc_step("kt_db", s * b_desc.1);
            let da = desc_step("kt_da", s * a_step);
            self.line(format!("kt::{wrapper}({acc}, {da}, {db}, {flag});"));
        }
        self.chain_end();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Waits on the `full` barrier of `v`'s slot (named `name` in the emitted block) unless this epoch
    /// already waited on it (the same ring's barriers, the same slot expression).
    fn wait_full(&mut self, v: &SharedView, name: &str) {
        let key = (
            self.bars[v.buf.0 as usize],
            self.ex_with(&v.index, "kt_wave0"),
        );
        if self.waited.insert(key) {
            self.line(format!(
                "kt::mbarrier_wait(KT_FULL({name}), (kt_cpar >> {name}) & 1u);"
            ));
            // `cp.async` writes shared memory in the generic proxy and `wgmma` reads it in the
            // async proxy: a proxy fence after the barrier orders the two (PTX ISA §9.7.12.4).
            if self.cp_rings[v.buf.0 as usize] {
                self.line("kt::fence_proxy_async(); // cp.async filled the slot");
            }
        }
    }

    /// The bookkeeping line after waiting on the slots `sa` (and `sb`) of `views`: slots of
    /// tile-resident rings go to `kt_res`, the others to this epoch's `kt_held`.
    fn hold(&self, views: &[(&SharedView, &str)]) -> String {
        let mut held = Vec::new();
        let mut res = Vec::new();
        for &(v, n) in views {
            let bit = format!("(1u << {n})");
            if self.resident[v.buf.0 as usize] {
                res.push(bit);
            } else {
                held.push(bit);
            }
        }
        let mut out = String::new();
        if !held.is_empty() {
            out.push_str(&format!("kt_held |= {};", held.join(" | ")));
        }
        if !res.is_empty() {
            out.push_str(&format!(" kt_res |= {};", res.join(" | ")));
        }
        out
    }

    /// `d (+)= a·b` with A from registers (a bf16 fragment, the converted scores of attention) and B
    /// from shared memory: the warpgroup's register-A `wgmma` chain, `K/16` instructions. `mma_ab`
    /// reads B as `K × N` with N contiguous (N-major: the transposed-B descriptor), `mma_abt` as
    /// `N × K` (K-major).
    pub(super) fn mma_rs(
        &mut self,
        form: MmaForm,
        d: RegId,
        a: RegId,
        b: &MmaOperand,
        c: Option<&RegId>,
    ) -> Result<(), CudaLowerError> {
        use super::lower_frag::Frag;
        let MmaOperand::Shared(bv) = b else {
            return unsupported(
                "mma with both operands in registers (wgmma reads B from shared memory)",
            );
        };
        let (Frag::ABf16(kk), Frag::Acc(n)) = (self.frag(a)?, self.frag(d)?) else {
            return unsupported("a register-A mma whose A is not a bf16 16xK fragment");
        };
        let sb = self.k.shared_decl(bv.buf);
        let row_bytes = sb.tile.cols * sb.tile.dtype.bytes();
        let trans_b = match form {
            MmaForm::Ab => true,
            MmaForm::Abt => false,
            f => return unsupported(format!("{} with A from registers", f.name())),
        };
        let (bk, bn) = if trans_b {
            (bv.rows, bv.cols)
        } else {
            (bv.cols, bv.rows)
        };
        let whole = (bv.rows, bv.cols) == (sb.tile.rows, sb.tile.cols)
            && self.at_origin(&bv.row0, 4) == Some(0)
            && self.at_origin(&bv.col0, 4) == Some(0);
        if bk != kk || bn != n || !whole || kk % 16 != 0 {
            return unsupported(format!(
                "register-A mma shapes A 16x{kk}, B {}x{} of a {}x{} slot, D 16x{n}",
                bv.rows, bv.cols, sb.tile.rows, sb.tile.cols
            ));
        }
        let accumulate = match c {
            Some(r) if *r == d => true,
            None => false,
            Some(_) => return unsupported("mma whose C differs from D"),
        };
        let sw = swizzle_bytes(sb.tile.swizzle, row_bytes)?;
        // Per k16 step: the descriptor's start moves 16 rows (N-major) or 32 bytes (K-major).
        let (desc, step) = match (trans_b, sw) {
            (true, 128) => (
                format!("kt::desc_mnmajor_sw128(b0 + %o, {}u)", sb.tile.bytes()),
                16 * row_bytes,
            ),
            (false, 128) => ("kt::desc_kmajor_sw128(b0 + %o)".to_string(), 32),
            (false, 64) => ("kt::desc_kmajor_sw64(b0 + %o)".to_string(), 32),
            _ => {
                return unsupported(format!(
                    "register-A mma with B in a {sw}-byte swizzle (128, or 64 K-major)"
                ))
            }
        };
        if self.owned[bv.buf.0 as usize] {
            return unsupported("register-A mma with B in a tile the consumer stores");
        }
        self.wgmma_rs.insert((n, trans_b));
        let wrapper = super::rs_wrapper_name(n, trans_b);
        let (acc, _) = self.acc(d);
        let ar = format!("r_{}", cname(self.k.reg(a)));
        self.line(format!(
            "{{ // {} on the warpgroup's 64 rows, A from registers",
            form.name()
        ));
        self.depth += 1;
        self.line(format!(
            "const u32 sb = {}u + (u32)({});",
            self.bars[bv.buf.0 as usize],
            self.ex_with(&bv.index, "kt_wave0")
        ));
        self.line(format!(
            "const u32 b0 = {};",
            self.smem_addr(bv, "kt_wave0")
        ));
        self.wait_full(bv, "sb");
        let bit = if self.resident[bv.buf.0 as usize] {
            "kt_res |= 1u << sb;"
        } else {
            "kt_held |= 1u << sb;"
        };
        self.line(bit);
        self.line(format!("const u64 kt_db = {};", desc.replace("%o", "0u")));
        self.chain_begin();
        for st in 0..kk / 16 {
            let flag = if accumulate || st > 0 { "1u" } else { "0u" };
            let r = 4 * st;
            self.line(format!(
                "kt::{wrapper}({acc}, {ar}[{}], {ar}[{}], {ar}[{}], {ar}[{}], {}, {flag});",
                r,
                r + 1,
                r + 2,
                r + 3,
                desc_step("kt_db", st * step)
            ));
        }
        self.chain_end();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Two consecutive register-A `mma_ab` ops with the same A whose B operands are the same slot of
    /// two rings laid side by side (same shape, one 128-byte swizzle atom of 64 columns each) and
    /// whose accumulators are 16 × 64 each: one `wgmma` chain of N = 128 instead of two of N = 64,
    /// the second atom reached through the descriptor's leading byte offset (the distance between
    /// the rings). Attention's O += P·V at head dimension 128 is such a pair: P is read from registers
    /// once per k16 step instead of twice. Returns whether the pair was emitted; `more`: another
    /// `mma` follows the pair (same commit group).
    pub(super) fn mma_rs_pair(
        &mut self,
        op: &Op,
        next: &Op,
        more: bool,
    ) -> Result<bool, CudaLowerError> {
        use super::lower_frag::Frag;
        let (
            Op::Mma {
                form: MmaForm::Ab,
                d: d0,
                a: MmaOperand::Reg(a0),
                b: MmaOperand::Shared(b0),
                c: c0,
            },
            Op::Mma {
                form: MmaForm::Ab,
                d: d1,
                a: MmaOperand::Reg(a1),
                b: MmaOperand::Shared(b1),
                c: c1,
            },
        ) = (op, next)
        else {
            return Ok(false);
        };
        let acc = |d: &RegId, c: &Option<RegId>| match c {
            Some(r) if r == d => Some(true),
            None => Some(false),
            Some(_) => None,
        };
        let (t0, t1) = (self.k.shared_decl(b0.buf), self.k.shared_decl(b1.buf));
        let whole = |v: &SharedView, t: &kittens_tile::SharedTile| {
            (v.rows, v.cols) == (t.rows, t.cols)
                && self.at_origin(&v.row0, 4) == Some(0)
                && self.at_origin(&v.col0, 4) == Some(0)
        };
        let (o0, o1) = (
            self.offsets[b0.buf.0 as usize],
            self.offsets[b1.buf.0 as usize],
        );
        let ok = a0 == a1
            && d0 != d1
            && acc(d0, c0).is_some()
            && acc(d0, c0) == acc(d1, c1)
            && b0.index == b1.index
            && t0.tile == t1.tile
            && t0.count == t1.count
            && t0.tile.swizzle == Swizzle::NV_128B
            && t0.tile.cols * t0.tile.dtype.bytes() == 128
            && whole(b0, &t0.tile)
            && whole(b1, &t1.tile)
            && o1 > o0
            && (o1 - o0).is_multiple_of(16)
            && o1 - o0 < 1 << 18
            && self.frag(*d0)? == Frag::Acc(64)
            && self.frag(*d1)? == Frag::Acc(64)
            && self.frag(*a0)? == Frag::ABf16(t0.tile.rows);
        if !ok {
            return Ok(false);
        }
        if !self.group_open {
            self.settle();
        }
        let kk = t0.tile.rows;
        let flag0 = acc(d0, c0) == Some(true);
        self.wgmma_rs_split.insert((128, true));
        let wrapper = format!("{}_split", super::rs_wrapper_name(128, true));
        let (r0, r1) = (self.acc(*d0).0, self.acc(*d1).0);
        let ar = format!("r_{}", cname(self.k.reg(*a0)));
        self.line(
            "{ // mma_ab pair as one N = 128 chain on the warpgroup's 64 rows, A from registers",
        );
        self.depth += 1;
        for (v, name) in [(b0, "s0"), (b1, "s1")] {
            self.line(format!(
                "const u32 {name} = {}u + (u32)({});",
                self.bars[v.buf.0 as usize],
                self.ex_with(&v.index, "kt_wave0")
            ));
            self.wait_full(v, name);
            let bit = if self.resident[v.buf.0 as usize] {
                format!("kt_res |= 1u << {name};")
            } else {
                format!("kt_held |= 1u << {name};")
            };
            self.line(bit);
        }
        self.line(format!(
            "const u32 b0 = {};",
            self.smem_addr(b0, "kt_wave0")
        ));
        let row_bytes = t0.tile.cols * t0.tile.dtype.bytes();
        self.line(format!(
            "const u64 kt_db = kt::desc_mnmajor_sw128(b0, {}u);",
            o1 - o0
        ));
        self.chain_begin();
        for st in 0..kk / 16 {
            let flag = if flag0 || st > 0 { "1u" } else { "0u" };
            let r = 4 * st;
            self.line(format!(
                "kt::{wrapper}({r0}, {r1}, {ar}[{}], {ar}[{}], {ar}[{}], {ar}[{}], {}, {flag});",
                r,
                r + 1,
                r + 2,
                r + 3,
                desc_step("kt_db", st * 16 * row_bytes),
            ));
        }
        self.open_group.extend([*d0, *d1, *a0]);
        self.group_continues = more;
        self.chain_end();
        self.group_continues = false;
        self.depth -= 1;
        self.line("}");

        Ok(true)
    }

    /// `e` for `wave` with every parameter, loop variable and block index at 0: how the per-wave shape
    /// checks compare the views different waves use.
    pub(super) fn at_origin(&self, e: &Expr, wave: u32) -> Option<i64> {
        self.at_origin_in(e, wave, &kittens_ir::expr::no_memory)
    }

    /// [`Self::at_origin`] reading [`Expr::Elem`]'s elements with `read`.
    pub(super) fn at_origin_in(
        &self,
        e: &Expr,
        wave: u32,
        read: kittens_ir::expr::ReadElem,
    ) -> Option<i64> {
        let params = vec![0i64; self.k.params.len()];
        let vars = vec![0i64; self.k.vars.len()];
        let block = vec![0i64; self.k.grid.extents.len()];
        e.eval_in(
            &Env {
                params: &params,
                vars: &vars,
                block: &block,
                wave: wave as i64,
            },
            read,
        )
    }

    /// Checks, by evaluating the views for the waves of each warpgroup, that A's slices step by 16 rows
    /// per wave (16 columns for an M-major A, `m_major`) and B's view is the same for every wave of
    /// the warpgroup (at row 0, or an 8-row-aligned band of a tile). A tile the consumer stores
    /// itself must lie within the warpgroup's own 64 rows (the named barrier orders one warpgroup),
    /// unless the program has consumers barriers: the schedule analysis has then shown every wave's
    /// slice ordered after its writers, and a `wgmma` reads the union of its four waves' slices only
    /// once all four have issued it.
    /// Whether every consumer warpgroup's first wave views `av` (M-major A) from a column that
    /// starts a 64-column atom.
    fn slices_start_atoms(&self, av: &SharedView) -> bool {
        (0..self.k.waves)
            .step_by(4)
            .filter(|w0| w0 / 4 >= self.producers)
            .all(|w0| self.at_origin(&av.col0, w0).is_some_and(|c| c % 64 == 0))
    }

    /// The shared address of view `v`'s origin in a tile kept as 128-byte column atoms (64 bf16
    /// columns each, `column_atoms`): atom `col0 / 64` lies `rows × 128` bytes per atom into the slot.
    /// A tile of one atom gives [`Emit::smem_addr`]'s address.
    fn atom_addr(&self, v: &SharedView, wave: &str) -> String {
        let s = self.k.shared_decl(v.buf);
        if column_atoms(&s.tile).is_none() {
            return self.smem_addr(v, wave);
        }
        let per = 128 / s.tile.dtype.bytes();
        let col = self.ex_with(&v.col0, wave);
        format!(
            "(kt_smem + {}u + (u32)({}) * {}u + ((u32)({col}) / {per}u) * {}u + (u32)({}) * 128u + ((u32)({col}) % {per}u) * {}u)",
            self.offsets[v.buf.0 as usize],
            self.ex_with(&v.index, wave),
            s.tile.bytes(),
            s.tile.rows * 128,
            self.ex_with(&v.row0, wave),
            s.tile.dtype.bytes()
        )
    }

    fn check_slices(
        &self,
        av: &SharedView,
        bv: &SharedView,
        m_major: bool,
    ) -> Result<(), CudaLowerError> {
        let at = |e: &Expr, wave: u32| self.at_origin(e, wave);
        let (along, across) = if m_major {
            (&av.col0, &av.row0)
        } else {
            (&av.row0, &av.col0)
        };
        for w0 in (0..self.k.waves).step_by(4) {
            for i in 0..4.min(self.k.waves - w0) {
                let w = w0 + i;
                let across_ok = if m_major {
                    at(across, w) == at(across, w0)
                } else {
                    at(across, w) == Some(0)
                };
                let a_ok = at(along, w)
                    .zip(at(along, w0))
                    .is_some_and(|(r, r0)| r == r0 + 16 * i as i64)
                    && across_ok
                    && at(&av.index, w) == at(&av.index, w0);
                let b_row = at(&bv.row0, w);
                let b_ok = b_row == at(&bv.row0, w0)
                    && b_row.is_some_and(|r| r % 8 == 0)
                    && at(&bv.col0, w) == Some(0)
                    && at(&bv.index, w) == at(&bv.index, w0);
                let band = i64::from((w / 4).saturating_sub(self.producers)) * 64;
                let private = |v: &SharedView| {
                    self.consumers_exchange
                        || !self.owned[v.buf.0 as usize]
                        || at(&v.row0, w)
                            .is_some_and(|r| r >= band && r + i64::from(v.rows) <= band + 64)
                };
                let consumer = w / 4 >= self.producers;
                if consumer && (!private(av) || !private(bv)) {
                    return unsupported(
                        "an mma reading a consumer-stored tile outside the warpgroup's own 64 rows",
                    );
                }
                if !a_ok || !b_ok {
                    return unsupported(
                        "mma whose per-wave A slices are not consecutive 16-row blocks of one tile",
                    );
                }
            }
        }
        Ok(())
    }
}

/// The descriptor `base` with its start address moved `bytes` further (a multiple of 16): the start
/// field holds the shared address / 16 in its low 14 bits (PTX ISA §9.7.15.5.1, matrix descriptor),
/// and shared addresses stay below 2^18 on sm_90 (228 KiB per SM), so the sum never carries out of
/// the field. One descriptor per operand and chain, then an integer add per step: composing each
/// step's descriptor from its address cost about four instructions per `wgmma`.
fn desc_step(base: &str, bytes: u32) -> String {
    debug_assert!(bytes.is_multiple_of(16));
    if bytes == 0 {
        base.to_string()
    } else {
        format!("{base} + {}ull", bytes / 16)
    }
}
