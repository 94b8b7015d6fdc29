//! A readable listing of a kernel (`Display for Kernel`): declarations, then the expanded body with op
//! indices, implied ops marked `*`. Used by `kittens check`, in test failure messages, and as comments in
//! generated code.

use crate::expr::Expr;
use crate::ir::*;
use std::fmt::{self, Write};

struct Printer<'k> {
    k: &'k Kernel,
    next: usize,
}

fn reg(k: &Kernel, r: RegId) -> &str {
    k.regs.get(r.0 as usize).map_or("?", |d| d.name.as_str())
}

impl Printer<'_> {
    fn expr(&self, e: &Expr) -> String {
        let params: Vec<&str> = self.k.params.iter().map(|p| p.name.as_str()).collect();
        let vars: Vec<&str> = self.k.vars.iter().map(|v| v.name.as_str()).collect();
        e.show(&params, &vars)
    }
    fn cond(&self, c: &crate::expr::Cond) -> String {
        use crate::expr::Cond::*;
        match c {
            Eq(a, b) => format!("{} == {}", self.expr(a), self.expr(b)),
            Ne(a, b) => format!("{} != {}", self.expr(a), self.expr(b)),
            Lt(a, b) => format!("{} < {}", self.expr(a), self.expr(b)),
            Le(a, b) => format!("{} <= {}", self.expr(a), self.expr(b)),
            And(a, b) => format!("({}) && ({})", self.cond(a), self.cond(b)),
            Or(a, b) => format!("({}) || ({})", self.cond(a), self.cond(b)),
            Not(a) => format!("!({})", self.cond(a)),
        }
    }
    fn sview(&self, v: &SharedView) -> String {
        let name = self
            .k
            .shared
            .get(v.buf.0 as usize)
            .map_or("?", |d| d.name.as_str());
        let (r0, c0, i) = (self.expr(&v.row0), self.expr(&v.col0), self.expr(&v.index));
        format!("{name}[{i}][{r0}+{}, {c0}+{}]", v.rows, v.cols)
    }
    fn gview(&self, v: &GlobalView) -> String {
        let name = self
            .k
            .globals
            .get(v.tensor.0 as usize)
            .map_or("?", |d| d.name.as_str());
        let o: Vec<String> = v.origin.iter().map(|e| self.expr(e)).collect();
        format!(
            "{name}[{}] {}x{} (dims {},{})",
            o.join(", "),
            v.rows,
            v.cols,
            v.row_dim,
            v.col_dim
        )
    }
    fn arg(&self, a: &Arg) -> String {
        match a {
            Arg::Reg(r) => reg(self.k, *r).into(),
            Arg::RowBcast(r) => format!("{}[row]", reg(self.k, *r)),
            Arg::ColBcast(r) => format!("{}[col]", reg(self.k, *r)),
            Arg::Scalar(s) => format!("{s}"),
        }
    }
    fn operand(&self, o: &MmaOperand) -> String {
        match o {
            MmaOperand::Reg(r) => reg(self.k, *r).into(),
            MmaOperand::Shared(v) => self.sview(v),
        }
    }
    fn op(&self, op: &Op) -> String {
        let k = self.k;
        match op {
            Op::LoadAsync { dst, src, scope } => format!(
                "load_async[{scope:?}] {} <- {}",
                self.sview(dst),
                self.gview(src)
            ),
            Op::LoadShared { dst, src } => format!("load {} <- {}", reg(k, *dst), self.sview(src)),
            Op::LoadGlobal { dst, src } => format!("load {} <- {}", reg(k, *dst), self.gview(src)),
            Op::StoreShared { dst, src, .. } => {
                format!("store {} <- {}", self.sview(dst), reg(k, *src))
            }
            Op::StoreGlobal { dst, src, .. } => {
                format!("store {} <- {}", self.gview(dst), reg(k, *src))
            }
            Op::AtomicAdd { dst, src } => {
                format!("atomic_add {} += {}", self.gview(dst), reg(k, *src))
            }
            Op::Mma { form, d, a, b, c } => {
                let c = c.map_or("0".to_string(), |c| reg(k, c).to_string());
                format!(
                    "{} {} <- {}, {}, {c}",
                    form.name(),
                    reg(k, *d),
                    self.operand(a),
                    self.operand(b)
                )
            }
            Op::Map {
                dst,
                f,
                args,
                rounding,
            } => {
                let a: Vec<String> = args.iter().map(|a| self.arg(a)).collect();
                format!(
                    "{} {} <- {} ({})",
                    f.name(),
                    reg(k, *dst),
                    a.join(", "),
                    rounding.name()
                )
            }
            Op::Reduce { dst, src, acc, .. } => {
                let acc = acc.map_or(String::new(), |a| format!(", acc {}", reg(k, a)));
                format!("{} {} <- {}{acc}", op.name(), reg(k, *dst), reg(k, *src))
            }
            Op::Fill { dst, value } => format!("fill {} <- {value}", reg(k, *dst)),
            Op::Random {
                dst,
                seed,
                offset,
                index0,
                row_stride,
            } => format!(
                "random {} <- philox(seed [{}, {}], offset [{}, {}]) at {} + i*{} + j",
                reg(k, *dst),
                self.expr(&seed[0]),
                self.expr(&seed[1]),
                self.expr(&offset[0]),
                self.expr(&offset[1]),
                self.expr(index0),
                self.expr(row_stride)
            ),
            Op::Transpose { dst, src } | Op::SwapLayout { dst, src } => {
                format!("{} {} <- {}", op.name(), reg(k, *dst), reg(k, *src))
            }
            Op::Mask {
                dst,
                rule,
                row0,
                col0,
                value,
            } => {
                format!(
                    "mask {} {rule:?} at ({}, {}) else {value}",
                    reg(k, *dst),
                    self.expr(row0),
                    self.expr(col0)
                )
            }
            Op::Alibi {
                dst,
                slope,
                row0,
                col0,
            } => format!(
                "alibi {} += {}·|r - c| at ({}, {})",
                reg(k, *dst),
                reg(k, *slope),
                self.expr(row0),
                self.expr(col0)
            ),
            _ => op.name(),
        }
    }
    fn body(&mut self, out: &mut String, body: &[Stmt], depth: usize) -> fmt::Result {
        let pad = "  ".repeat(depth);
        for s in body {
            match s {
                Stmt::Op { op, implied } => {
                    let mark = if *implied { "*" } else { " " };
                    writeln!(out, "{:4}{mark} {pad}{}", self.next, self.op(op))?;
                    self.next += 1;
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let name = self
                        .k
                        .vars
                        .get(var.0 as usize)
                        .map_or("?", |v| v.name.as_str());
                    writeln!(
                        out,
                        "      {pad}for {name} in {}..{} {{",
                        self.expr(start),
                        self.expr(end)
                    )?;
                    self.body(out, body, depth + 1)?;
                    writeln!(out, "      {pad}}}")?;
                }
                Stmt::If { cond, then, els } => {
                    writeln!(out, "      {pad}if {} {{", self.cond(cond))?;
                    self.body(out, then, depth + 1)?;
                    if !els.is_empty() {
                        writeln!(out, "      {pad}}} else {{")?;
                        self.body(out, els, depth + 1)?;
                    }
                    writeln!(out, "      {pad}}}")?;
                }
                Stmt::Cluster { kind, label, body } => {
                    writeln!(out, "      {pad}{kind:?} cluster \"{label}\" {{")?;
                    self.body(out, body, depth + 1)?;
                    writeln!(out, "      {pad}}}")?;
                }
                Stmt::LastArrival {
                    counter,
                    index,
                    arrivals,
                    scope,
                    body,
                } => {
                    let name = &self.k.global(*counter).name;
                    writeln!(
                        out,
                        "      {pad}last of {arrivals} arrivals ({scope:?}) on {name}[{index}] {{"
                    )?;
                    self.body(out, body, depth + 1)?;
                    writeln!(out, "      {pad}}}")?;
                }
                Stmt::Staggered { body } => {
                    writeln!(out, "      {pad}staggered {{")?;
                    self.body(out, body, depth + 1)?;
                    writeln!(out, "      {pad}}}")?;
                }
                Stmt::Roles { producer, consumer } => {
                    writeln!(out, "      {pad}producer {{")?;
                    self.body(out, producer, depth + 1)?;
                    writeln!(out, "      {pad}}} consumer {{")?;
                    self.body(out, consumer, depth + 1)?;
                    writeln!(out, "      {pad}}}")?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer { k: self, next: 0 };
        let mut out = String::new();
        writeln!(
            out,
            "kernel {} — {}, {} waves",
            self.name,
            self.schedule.name(),
            self.waves
        )?;
        let params: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        writeln!(out, "params {}", params.join(", "))?;
        for g in &self.globals {
            let dims: Vec<String> = g.dims.iter().map(|e| p.expr(e)).collect();
            writeln!(
                out,
                "global {} {} [{}] {:?}",
                g.name,
                g.dtype,
                dims.join(", "),
                g.access
            )?;
        }
        for s in &self.shared {
            let t = s.tile;
            writeln!(
                out,
                "shared {} {} {}x{} x{} swizzle {}",
                s.name,
                t.dtype,
                t.rows,
                t.cols,
                s.count,
                t.swizzle.name()
            )?;
        }
        for r in &self.regs {
            let (rows, cols) = r.shape();
            let what = match r.kind {
                RegKind::Tile(t) => format!("{:?} base {}", t.layout, t.base),
                RegKind::Vec(v) => format!("vec over {:?}", v.axis),
            };
            writeln!(out, "reg {} {} {rows}x{cols} {what}", r.name, r.dtype())?;
        }
        let ext: Vec<String> = self.grid.extents.iter().map(|e| p.expr(e)).collect();
        let paired = if self.grid.paired { " paired" } else { "" };
        let cluster = match self.grid.cluster {
            0 | 1 => String::new(),
            n => format!(" clusters of {n}"),
        };
        writeln!(
            out,
            "grid [{}] {:?}{paired}{cluster}",
            ext.join(", "),
            self.grid.remap
        )?;
        p.body(&mut out, &self.body, 0)?;
        f.write_str(&out)
    }
}
