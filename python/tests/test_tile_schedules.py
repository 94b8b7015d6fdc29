"""kittens.tile's schedules other than plain on the CPU: the clusters, the staggered region and the roles
from Python expand as the Rust schedule pass says (crates/kittens-ir/src/schedule.rs's table; the same
cases as crates/kittens-ir/tests/validate.rs's expansion tests), and a wrong wave count or a missing or
stray `roles` is a named error."""

import json

import pytest

from kittens import tile

BARRIER, FENCE = {"barrier": {"scope": "block"}}, {"hint": "fence"}


def implied_ops(program):
    """The ops the schedule inserted (`implied`), in program order (then before else)."""
    out = []

    def walk(stmts):
        for s in stmts:
            (kind, v), = s.items()
            if kind == "op":
                if v["implied"]:
                    out.append(v["op"])
            elif kind == "if":
                walk(v["then"])
                walk(v["els"])
            else:
                walk(v["body"])

    walk(json.loads(program.json())["kernel"]["body"])
    return out


def test_ping_pong_inserts_stagger_priorities_and_barriers():
    k = tile.Builder("pp", 8, "ping_pong8")
    c = k.tile("c", "f32", 16, 16, "col", "16x16")

    def step(i):
        k.memory("m", k.fence)
        k.compute("c", lambda: k.zero(c))

    k.staggered(lambda: k.for_range("i", 0, 4, step))
    assert implied_ops(k.finish()) == [
        BARRIER,  # the stagger: warpgroup 1 only
        FENCE, BARRIER, FENCE,  # the memory cluster's end
        {"priority": 1}, {"priority": 0}, FENCE, BARRIER, FENCE,  # the compute cluster
        BARRIER,  # the re-join: warpgroup 0 only
    ]


def test_interleave_and_producer_consumer():
    k = tile.Builder("i4", 4, "interleave4")
    k.memory("m", lambda: k.wait_async(0))
    k.compute("c", lambda: k.prio(2))
    assert implied_ops(k.finish()) == [FENCE, FENCE]

    k = tile.Builder("pc", 12, "producer_consumer", roles=(1, 2, 40, 232))
    k.roles(k.barrier, k.barrier)
    body = json.loads(k.finish().json())["kernel"]["body"]
    assert len(body) == 1
    branch = body[0]["if"]
    assert branch["then"][0]["op"] == {"op": {"set_max_regs": {"regs": 40}}, "implied": True}
    assert branch["els"][0]["op"] == {"op": {"set_max_regs": {"regs": 232}}, "implied": True}


def test_schedule_errors_are_named():
    with pytest.raises(ValueError, match=r"\"ping_pong8\" runs 8 waves per block, not waves=4"):
        tile.Builder("x", 4, "ping_pong8")
    with pytest.raises(ValueError, match="needs roles"):
        tile.Builder("x", 12, "producer_consumer")
    with pytest.raises(ValueError, match="takes no roles"):
        tile.Builder("x", 4, "plain", roles=(1, 2, 40, 232))
    with pytest.raises(ValueError, match="\"pingpong\" is not one of"):
        tile.Builder("x", 8, "pingpong")
