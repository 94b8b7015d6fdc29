//! The matrix ops of the sm_90a lowering (`lower.rs`): each `mma` is one warpgroup's `wgmma` chain —
//! A and B from shared memory (K-major, the four waves' 16-row slices of A forming the warpgroup's 64
//! rows) or A from registers (a bf16 fragment, `lower_frag.rs`) with B N-major or K-major. Consecutive
//! `mma` ops are one commit group; inside a compute cluster of a ping-pong consumer role the group's
//! wait moves past the end of the warpgroup's turn (`lower.rs`, `Stmt::Cluster`).

use kittens_ir::{Env, Expr, MmaForm, MmaOperand, RegId, SharedView};

use super::lower::{cname, column_atoms, swizzle_bytes, unsupported, CudaLowerError, Emit};
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
    /// warpgroup's turn when inside one.
    fn chain_end(&mut self) {
        if self.group_continues {
            self.group_open = true;
            return;
        }
        self.group_open = false;
        self.line("kt::wgmma_commit();");
        if self.in_turn {
            self.turn_wait = true;
        } else {
            self.line(
                "kt::wgmma_wait<1>(); // the previous group has retired: its slots can go back",
            );
            self.line("kt_release(kt_bars, kt_rel); kt_rel = 0;");
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
        // B is `N × K` (K-major, `mma_abt`) or `K × N` (N-major, `mma_ab`: wgmma's transposed B).
        let n_major = match form {
            MmaForm::Abt => false,
            MmaForm::Ab => true,
            f => return unsupported(format!("{} (A K-major, B either way)", f.name())),
        };
        let (acc, _) = self.acc(d);
        let n = self.k.reg(d).shape().1;
        let kk = av.cols;
        let (bk, bn) = if n_major {
            (bv.rows, bv.cols)
        } else {
            (bv.cols, bv.rows)
        };
        if av.rows != 16 || bn != n || bk != kk || kk % 16 != 0 {
            return unsupported(format!(
                "mma shapes A {}x{}, B {}x{}, D 16x{n}",
                av.rows, av.cols, bv.rows, bv.cols
            ));
        }
        self.check_slices(av, bv)?;
        let accumulate = match c {
            Some(r) if *r == d => true,
            None => false,
            Some(_) => return unsupported("mma whose C differs from D"),
        };
        let (sa, sb) = (self.k.shared_decl(av.buf), self.k.shared_decl(bv.buf));
        let desc = |t: &kittens_tile::SharedTile| -> Result<&'static str, CudaLowerError> {
            match swizzle_bytes(t.swizzle, t.cols * t.dtype.bytes())? {
                128 => Ok("kt::desc_kmajor_sw128"),
                64 => Ok("kt::desc_kmajor_sw64"),
                32 => Ok("kt::desc_kmajor_sw32"),
                _ => unsupported("wgmma operands without a swizzle"),
            }
        };
        let da = desc(&sa.tile)?;
        // Per k16 step: A's (and K-major B's) descriptor start moves 32 bytes along the row; N-major
        // B's moves 16 rows of 128 bytes inside every atom, the atoms `rows × 128` bytes apart.
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
            if !whole || atoms * 64 != n {
                return unsupported(format!(
                    "N-major B {}x{} of a {}x{} slot (whole slots only)",
                    bv.rows, bv.cols, t.rows, t.cols
                ));
            }
            (
                format!("kt::desc_mnmajor_sw128(b0 + %o, {}u)", t.rows * 128),
                16 * 128,
            )
        } else {
            (format!("{}(b0 + %o)", desc(&sb.tile)?), 32)
        };
        let wrapper = if n_major {
            self.wgmma_tb.insert(n);
            WgmmaInput::Bf16.wrapper_name_tb(n)
        } else {
            self.wgmma_n.insert(n);
            WgmmaInput::Bf16.wrapper_name(n)
        };
        self.line(format!("{{ // {} on the warpgroup's 64 rows", form.name()));
        self.depth += 1;
        self.line(format!(
            "const u32 sa = {}u + (u32)({}), sb = {}u + (u32)({});",
            self.bars[av.buf.0 as usize],
            self.ex_with(&av.index, "kt_wave0"),
            self.bars[bv.buf.0 as usize],
            self.ex_with(&bv.index, "kt_wave0")
        ));
        self.line(format!(
            "const u32 a0 = {}, b0 = {};",
            self.smem_addr(av, "kt_wave0"),
            self.smem_addr(bv, "kt_wave0")
        ));
        self.line("kt::mbarrier_wait(KT_FULL(sa), (kt_cpar >> sa) & 1u);");
        // A and B filled together share the slot's barrier: one wait.
        if self.bars[av.buf.0 as usize] != self.bars[bv.buf.0 as usize] || av.index != bv.index {
            self.line("kt::mbarrier_wait(KT_FULL(sb), (kt_cpar >> sb) & 1u);");
        }
        let held = self.hold(&[av, bv]);
        self.line(held);
        self.chain_begin();
        for s in 0..kk / 16 {
            let flag = if accumulate || s > 0 { "1u" } else { "0u" };
            let db = b_desc.0.replace("%o", &format!("{}u", s * b_desc.1));
            self.line(format!(
                "kt::{wrapper}({acc}, {da}(a0 + {o}u), {db}, {flag});",
                o = s * 32
            ));
        }
        self.chain_end();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// The bookkeeping line after waiting on the slots `sa` (and `sb`) of `views`: slots of
    /// tile-resident rings go to `kt_res`, the others to this epoch's `kt_held`.
    fn hold(&self, views: &[&SharedView]) -> String {
        let names = ["sa", "sb"];
        let mut held = Vec::new();
        let mut res = Vec::new();
        for (v, n) in views.iter().zip(names) {
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
        self.line("kt::mbarrier_wait(KT_FULL(sb), (kt_cpar >> sb) & 1u);");
        let bit = if self.resident[bv.buf.0 as usize] {
            "kt_res |= 1u << sb;"
        } else {
            "kt_held |= 1u << sb;"
        };
        self.line(bit);
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
                desc.replace("%o", &format!("{}u", st * step))
            ));
        }
        self.chain_end();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// `e` for `wave` with every parameter, loop variable and block index at 0: how the per-wave shape
    /// checks compare the views different waves use.
    pub(super) fn at_origin(&self, e: &Expr, wave: u32) -> Option<i64> {
        let params = vec![0i64; self.k.params.len()];
        let vars = vec![0i64; self.k.vars.len()];
        let block = vec![0i64; self.k.grid.extents.len()];
        e.eval(&Env {
            params: &params,
            vars: &vars,
            block: &block,
            wave: wave as i64,
        })
    }

    /// Checks, by evaluating the views for the waves of each warpgroup, that A's slices step by 16 rows
    /// per wave and B's view is the same for every wave.
    fn check_slices(&self, av: &SharedView, bv: &SharedView) -> Result<(), CudaLowerError> {
        let at = |e: &Expr, wave: u32| self.at_origin(e, wave);
        for w0 in (0..self.k.waves).step_by(4) {
            for i in 0..4.min(self.k.waves - w0) {
                let w = w0 + i;
                let a_ok = at(&av.row0, w)
                    .zip(at(&av.row0, w0))
                    .is_some_and(|(r, r0)| r == r0 + 16 * i as i64)
                    && at(&av.col0, w) == Some(0)
                    && at(&av.index, w) == at(&av.index, w0);
                let b_ok = at(&bv.row0, w) == Some(0)
                    && at(&bv.col0, w) == Some(0)
                    && at(&bv.index, w) == at(&bv.index, w0);
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
