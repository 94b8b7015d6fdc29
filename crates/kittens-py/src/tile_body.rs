//! The nested bodies of `kittens.tile`'s loops and conditionals: the Python body of a
//! `Builder.for_range` or `Builder.if_` adds its ops through the same `Builder` while the Rust
//! `KernelBuilder` has the body open (see [`run_body`]).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use kittens_ir::{KernelBuilder, Schedule};

use crate::tile_builder::Builder;

/// Runs a Python body of a loop or conditional. The Rust builder opens the nested body and hands
/// its `&mut KernelBuilder` to a closure; the Python body calls methods of the same `Builder`, so
/// the builder moves back into it for the call (a placeholder stands in the Rust closure's place)
/// and out again after. `finish()` is refused inside a body, and every nested call moves the
/// builder back before it returns, so it is always there to take back. A body that raises leaves
/// the builder spent: its loop would be half built.
pub(crate) fn run_body(
    slf: &Bound<'_, Builder>,
    inner: &mut KernelBuilder,
    what: &str,
    call: impl FnOnce() -> PyResult<()>,
) -> PyResult<()> {
    let placeholder = KernelBuilder::new("", Schedule::Plain { waves: 1 });
    {
        let mut b = slf.borrow_mut();
        b.k = Some(std::mem::replace(inner, placeholder));
        b.depth += 1;
    }
    let r = call();
    let mut b = slf.borrow_mut();
    b.depth -= 1;
    if let Some(k) = b.k.take() {
        *inner = k;
    }
    if r.is_err() && b.spent.is_empty() {
        b.spent = format!("the body of {what} raised an exception");
    }
    r
}

/// Takes the builder out of `slf` for a nested body (see [`run_body`]).
pub(crate) fn take(slf: &Bound<'_, Builder>) -> PyResult<KernelBuilder> {
    let mut b = slf.borrow_mut();
    b.b()?;
    b.k.take()
        .ok_or_else(|| PyValueError::new_err("this Builder takes no more ops"))
}

/// Puts the builder back after a nested body, whether or not the body raised.
pub(crate) fn restore(slf: &Bound<'_, Builder>, k: KernelBuilder, r: PyResult<()>) -> PyResult<()> {
    slf.borrow_mut().k = Some(k);
    r
}

/// The schedule named `name` for a kernel of `waves` waves. Only "plain" takes any wave count; the
/// others fix it (ping-pong 8, interleave 4, producer/consumer 4 per warpgroup), and a count that
/// differs is an error naming both, as is a producer/consumer schedule without its `roles`.
pub(crate) fn schedule(
    waves: u32,
    name: &str,
    roles: Option<(u32, u32, u32, u32)>,
) -> PyResult<Schedule> {
    let s =
        match (name, roles) {
            ("plain", None) => Schedule::Plain { waves },
            ("ping_pong8", None) => Schedule::PingPong8,
            ("interleave4", None) => Schedule::Interleave4,
            ("producer_consumer", Some((producers, consumers, producer_regs, consumer_regs))) => {
                Schedule::ProducerConsumer {
                    producers,
                    consumers,
                    producer_regs,
                    consumer_regs,
                }
            }
            ("producer_consumer", None) => return Err(PyValueError::new_err(
                "schedule \"producer_consumer\" needs roles=(producers, consumers, producer_regs, \
                 consumer_regs)",
            )),
            ("plain" | "ping_pong8" | "interleave4", Some(_)) => {
                return Err(PyValueError::new_err(format!(
                    "schedule {name:?} takes no roles (only \"producer_consumer\" does)"
                )))
            }
            (other, _) => {
                return Err(PyValueError::new_err(format!(
                "schedule: {other:?} is not one of [\"plain\", \"ping_pong8\", \"interleave4\", \
                 \"producer_consumer\"]"
            )))
            }
        };
    if s.waves() != waves {
        return Err(PyValueError::new_err(format!(
            "schedule {name:?} runs {} waves per block, not waves={waves}",
            s.waves()
        )));
    }
    Ok(s)
}
