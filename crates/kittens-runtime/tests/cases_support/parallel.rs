//! Independent cases of one test (kernels to compile, programs to emulate) run on every core: a test
//! binary with one long test otherwise keeps one core busy while cargo runs the binaries one after
//! another. Each case still panics with its own message; the test fails if any case did.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `f` on every case, on as many threads as the machine has cores (at most one per case), and
/// panics after all have run if any panicked, naming how many.
pub fn each<T: Send>(cases: Vec<T>, f: impl Fn(T) + Sync) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(cases.len().max(1));
    let queue: Vec<Mutex<Option<T>>> = cases.into_iter().map(|c| Mutex::new(Some(c))).collect();
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = queue.get(i) else { break };
                let case = slot
                    .lock()
                    .unwrap()
                    .take()
                    .expect("each case is taken once");
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(case))).is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let failed = failed.into_inner();
    assert_eq!(
        failed, 0,
        "{failed} case(s) failed (their messages are above)"
    );
}

/// [`each`] over cases that return a value, in the cases' order.
pub fn map<T: Send, R: Send>(cases: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let out: Vec<Mutex<Option<R>>> = cases.iter().map(|_| Mutex::new(None)).collect();
    each(cases.into_iter().enumerate().collect(), |(i, c)| {
        *out[i].lock().unwrap() = Some(f(c));
    });
    out.into_iter()
        .map(|m| m.into_inner().unwrap().expect("every case ran"))
        .collect()
}
