//! Tying the registers an `s_waitcnt lgkmcnt` retires to the wait.
//!
//! An LDS read the prelude issues as inline asm (`ds_read_b128 %0, ...` with a `"=v"` output) is, to
//! the compiler, an instruction whose result exists as soon as it issues; the `s_waitcnt` after it is
//! another asm statement with a memory clobber, which orders memory accesses but not arithmetic on
//! registers. So the compiler may schedule a VALU instruction (a bf16 unpack, a multiply, a copy into
//! a pinned or AGPR register) that reads the destination between the read and the wait: it reads the
//! register before the data lands (CDNA3 ISA guide, "Data Dependency Resolution": the program must
//! wait on LGKM_CNT before using the data). MFMAs are asm statements too and stay in order; plain C
//! code does not.
//!
//! The fix: right after each wait, the lowering emits `regs_landed(x, y, ...)` for every register the
//! wait retires, an empty `asm volatile` that takes each as a `"+v"` operand. Volatile asm statements
//! keep their order, so the tie stays after the wait, and every later use reads the tie's output: no
//! use (nor copy) can be placed above the wait.
//!
//! Which registers a wait retires: `lgkmcnt(N)` retires all LDS operations but the `N` most recent. In
//! straight code "most recent" is emission order. In a loop, a wait near the top of the body may also
//! retire reads issued near the bottom of the previous iteration; those are found when the loop closes
//! (its body's reads are then known) and added to the wait's tie through a marker line. Vector-memory
//! waits need no tie: the only register-filling global loads are compiler builtins, whose waits the
//! compiler inserts itself.

use std::collections::BTreeSet;

/// One wait inside an open loop: its marker, the history length when it was emitted, and how many
/// LDS operations (IR ops) it leaves in flight.
struct LoopWait {
    marker: usize,
    at: usize,
    outstanding: usize,
}

struct OpenLoop {
    start: usize,
    /// Ops issued before the loop and still untied when it began.
    untied_at_entry: BTreeSet<usize>,
    waits: Vec<LoopWait>,
}

/// The LDS operations issued so far (in emission order) with the registers each fills by asm, and
/// which of them no unconditional wait has tied yet.
#[derive(Default)]
pub(super) struct LdsTies {
    /// Per LDS op (the IR op, as counted by `Outstanding(n)`): the register lvalues its asm reads fill
    /// (empty for writes and for reads the compiler issues itself).
    dests: Vec<Vec<String>>,
    /// Ops that may still be in flight on some path to the current point (no unconditional wait
    /// since them).
    untied: BTreeSet<usize>,
    loops: Vec<OpenLoop>,
    /// Per marker: the registers the back edges add to the wait's tie.
    extra: Vec<BTreeSet<String>>,
}

/// The marker line a wait inside a loop leaves for its back-edge ties.
pub(super) fn marker(id: usize) -> String {
    format!("@@kittens-landed-{id}@@")
}

/// `regs_landed(...)` calls for `regs`, at most 16 registers each.
pub(super) fn tie_lines(regs: &BTreeSet<String>) -> Vec<String> {
    let regs: Vec<&String> = regs.iter().collect();
    regs.chunks(16)
        .map(|c| {
            let names: Vec<&str> = c.iter().map(|s| s.as_str()).collect();
            format!("regs_landed({});", names.join(", "))
        })
        .collect()
}

impl LdsTies {
    /// An LDS op was issued; `dests` are the registers its asm reads fill.
    pub fn issued(&mut self, dests: Vec<String>) {
        if !dests.is_empty() {
            self.untied.insert(self.dests.len());
        }
        self.dests.push(dests);
    }

    /// A wait leaving the `outstanding` most recent LDS ops in flight: the registers to tie now, and,
    /// inside a loop, the marker id for the back-edge ties.
    pub fn wait(&mut self, outstanding: usize) -> (BTreeSet<String>, Option<usize>) {
        let upto = self.dests.len().saturating_sub(outstanding);
        let retired: Vec<usize> = self.untied.range(..upto).copied().collect();
        let now: BTreeSet<String> = retired
            .iter()
            .flat_map(|&k| self.dests[k].iter().cloned())
            .collect();
        for k in retired {
            self.untied.remove(&k);
        }
        let marker = (!self.loops.is_empty()).then(|| {
            let id = self.extra.len();
            self.extra.push(BTreeSet::new());
            for l in &mut self.loops {
                l.waits.push(LoopWait {
                    marker: id,
                    at: self.dests.len(),
                    outstanding,
                });
            }
            id
        });
        (now, marker)
    }

    /// The ops that may be in flight here, to start a branch from.
    pub fn snapshot(&self) -> BTreeSet<usize> {
        self.untied.clone()
    }

    /// Start the next branch of a conditional from `entry`; returns where the previous one ended.
    pub fn next_branch(&mut self, entry: BTreeSet<usize>) -> BTreeSet<usize> {
        std::mem::replace(&mut self.untied, entry)
    }

    /// After a conditional: an op may be in flight if it may be at the end of any branch.
    pub fn join(&mut self, other: BTreeSet<usize>) {
        self.untied.extend(other);
    }

    pub fn open_loop(&mut self) {
        self.loops.push(OpenLoop {
            start: self.dests.len(),
            untied_at_entry: self.untied.clone(),
            waits: vec![],
        });
    }

    /// The loop's body is emitted. On the back edge, the LDS ops in flight at a wait in the body are
    /// the previous iteration's ops no unconditional wait after them retired, then this iteration's
    /// before the wait; the wait retires all but its `outstanding` most recent. After the loop, the
    /// ops in flight at its entry may still be (it may run no iteration).
    pub fn close_loop(&mut self) {
        let l = self.loops.pop().expect("a loop is open");
        let body = l.start..self.dests.len();
        for w in l.waits {
            let before = w.at - l.start;
            let retired_prev = (body.len() + before)
                .saturating_sub(w.outstanding)
                .min(body.len());
            let regs: Vec<String> = self
                .untied
                .range(body.start..body.start + retired_prev)
                .flat_map(|&k| self.dests[k].iter().cloned())
                .collect();
            self.extra[w.marker].extend(regs);
        }
        self.untied.extend(l.untied_at_entry);
    }

    /// Replace every marker line of `out` with its back-edge ties, or remove it (a register tied twice
    /// costs nothing).
    pub fn resolve(&self, out: &str) -> String {
        let mut s = String::with_capacity(out.len());
        for line in out.lines() {
            let t = line.trim_start();
            let id = t
                .strip_prefix("@@kittens-landed-")
                .and_then(|r| r.strip_suffix("@@"))
                .and_then(|n| n.parse::<usize>().ok());
            match id {
                Some(id) => {
                    let indent = &line[..line.len() - t.len()];
                    let ties = tie_lines(&self.extra[id]);
                    if !ties.is_empty() {
                        s.push_str(indent);
                        s.push_str(
                            "// and, on the back edge, the previous iteration's last reads\n",
                        );
                    }
                    for tie in ties {
                        s.push_str(indent);
                        s.push_str(&tie);
                        s.push('\n');
                    }
                }
                None => {
                    s.push_str(line);
                    s.push('\n');
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_wait_ties_what_it_retires_once() {
        let mut t = LdsTies::default();
        t.issued(vec!["a[0][0]".into(), "a[0][1]".into()]);
        t.issued(vec![]); // an LDS write
        t.issued(vec!["b[0][0]".into()]);
        // lgkmcnt leaving one op in flight retires the first two.
        assert_eq!(t.wait(1), (set(&["a[0][0]", "a[0][1]"]), None));
        assert_eq!(t.wait(0), (set(&["b[0][0]"]), None));
        assert_eq!(t.wait(0), (set(&[]), None));
    }

    /// A read issued at the bottom of a loop body is in flight at the top of the next iteration:
    /// the top's wait ties it on the back edge, unless a wait later in the body retired it.
    #[test]
    fn back_edges_tie_the_previous_iterations_reads() {
        let mut t = LdsTies::default();
        t.open_loop();
        let (now, marker) = t.wait(0);
        assert!(now.is_empty());
        t.issued(vec!["next[0][0]".into()]);
        t.close_loop();
        assert_eq!(t.extra[marker.unwrap()], set(&["next[0][0]"]));
        let out = t.resolve(&format!(
            "  s_waitcnt_lgkmcnt<0>();\n  {}\n",
            marker_line(&t)
        ));
        // Kept as text: `resolve` is a text pass (markers to calls); the kernels that use it run on
        // the ISA emulator (kittens-runtime tests/amd_isa_emu.rs).
        assert!(out.contains("  regs_landed(next[0][0]);"), "{out}");
        assert!(!out.contains("@@"), "{out}");

        let mut t = LdsTies::default();
        t.open_loop();
        let (_, marker) = t.wait(0);
        t.issued(vec!["x[0][0]".into()]);
        assert_eq!(t.wait(0).0, set(&["x[0][0]"]));
        t.close_loop();
        assert!(t.extra[marker.unwrap()].is_empty());
    }

    fn marker_line(t: &LdsTies) -> String {
        marker(t.extra.len() - 1)
    }

    /// A wait in one branch of an `if` retires nothing on the other path: after the `if`, the next
    /// wait ties the read again. A loop that may run no iteration likewise.
    #[test]
    fn branches_and_empty_loops_keep_reads_in_flight() {
        let mut t = LdsTies::default();
        t.issued(vec!["q[0][0]".into()]);
        let entry = t.snapshot();
        assert_eq!(t.wait(0).0, set(&["q[0][0]"]));
        let then = t.next_branch(entry);
        t.join(then);
        assert_eq!(t.wait(0).0, set(&["q[0][0]"]));

        let mut t = LdsTies::default();
        t.issued(vec!["k[0][0]".into()]);
        t.open_loop();
        assert_eq!(t.wait(0).0, set(&["k[0][0]"]));
        t.close_loop();
        assert_eq!(t.wait(0).0, set(&["k[0][0]"]));
    }
}
