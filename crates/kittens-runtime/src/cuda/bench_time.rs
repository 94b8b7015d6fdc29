//! Timing several implementations of one problem in the same run (docs/performance.md, "Method", step 3):
//! CUDA events around every launch, warm-up launches first, the median of the timed ones; launches
//! interleaved implementation by implementation, or each implementation in its own block.

use serde::Serialize;

use super::bench_check::median;
use super::driver::{Event, Stream};
use super::CudaError;

/// How the implementations' launches are ordered while timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// Ours, cuBLAS, ours, cuBLAS, …: both see the same clocks and temperature, but each launch runs
    /// right after the other's, so the power one draws shapes the clock the other gets.
    Interleaved,
    /// All of one implementation (warm-up, then the timed launches), then the next: each in its own
    /// steady state.
    Blocked,
}

/// One launch of an implementation on input copy `i % copies`.
pub type Launch<'a> = &'a mut dyn FnMut(usize) -> Result<(), CudaError>;

/// The input copy launch `i` of implementation `w` (of `n`) reads: its own in every round, `i·n + w`.
/// Interleaved, the implementations of round `i` all reading copy `i` would time each one after the
/// first with the operands the one before it just brought into the L2 (cuBLASLt's FP8 GEMM timed after
/// ours gained 15-20% so at a decode step's M; docs/performance.md, "Method").
fn copy_of(i: usize, w: usize, n: usize) -> usize {
    i.saturating_mul(n).saturating_add(w)
}

/// Median milliseconds per launch of each implementation, from events recorded around every launch.
pub fn time_launches(
    stream: &Stream,
    warmup: usize,
    iters: usize,
    timing: Timing,
    fs: &mut [Launch<'_>],
) -> Result<Vec<f64>, CudaError> {
    let n = fs.len();
    let events: Vec<[Event; 2]> = (0..n * iters)
        .map(|_| Ok([Event::new()?, Event::new()?]))
        .collect::<Result<_, CudaError>>()?;
    // Launch `i` of implementation `w`, timed once past the warm-up.
    let one = |fs: &mut [Launch<'_>], w: usize, i: usize| -> Result<(), CudaError> {
        let ev = i.checked_sub(warmup).map(|j| &events[w * iters + j]);
        if let Some(e) = ev {
            e[0].record(stream)?;
        }
        fs[w](copy_of(i, w, n))?;
        if let Some(e) = ev {
            e[1].record(stream)?;
        }
        Ok(())
    };
    match timing {
        Timing::Interleaved => {
            for i in 0..warmup + iters {
                for w in 0..n {
                    one(fs, w, i)?;
                }
            }
        }
        Timing::Blocked => {
            for w in 0..n {
                for i in 0..warmup + iters {
                    one(fs, w, i)?;
                }
            }
        }
    }
    stream.synchronize()?;
    (0..n)
        .map(|w| {
            let mut t = events[w * iters..(w + 1) * iters]
                .iter()
                .map(|e| e[0].elapsed_ms(&e[1]).map(f64::from))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(median(&mut t))
        })
        .collect()
}

/// Timed launches for a shape whose launch takes about `est_ms`: as many as fit `budget_ms`, within
/// `min..=max` (a sweep of 16384 × 57344 × 8192 GEMMs must fit one device call).
pub fn iterations(est_ms: f64, budget_ms: f64, min: usize, max: usize) -> usize {
    let max = max.max(1);
    let min = min.clamp(1, max);
    if !(est_ms.is_finite() && est_ms > 0.0) {
        return min;
    }
    ((budget_ms / est_ms).floor() as usize).clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With 15 copies and three implementations, no launch reads the copy the launch before it read,
    /// and each copy is read again only after 14 others.
    #[test]
    fn interleaved_launches_read_their_own_copies() {
        let (n, copies) = (3, 15);
        let order: Vec<usize> = (0..10)
            .flat_map(|i| (0..n).map(move |w| copy_of(i, w, n) % copies))
            .collect();
        for (j, pair) in order.windows(2).enumerate() {
            assert_ne!(pair[0], pair[1], "launch {j}");
        }
        for (j, c) in order.iter().enumerate().skip(copies) {
            assert_eq!(order[j - copies], *c, "launch {j}");
            assert!(!order[j - copies + 1..j].contains(c), "launch {j}");
        }
    }

    #[test]
    fn iterations_fit_the_budget() {
        assert_eq!(iterations(0.1, 50.0, 5, 100), 100);
        assert_eq!(iterations(22.0, 300.0, 5, 100), 13);
        assert_eq!(iterations(200.0, 300.0, 5, 100), 5);
        assert_eq!(iterations(f64::NAN, 300.0, 5, 100), 5);
        assert_eq!(iterations(1.0, 300.0, 0, 0), 1);
    }
}
