"""``python -m kittens.bench model --suite`` (kittens.bench_model_suite) end to end on the CPU: the ``tiny``
suite (a one-layer Llama on the interpreter, HF and kittens arms, a few steps, inference through
``model.generate``) writes its JSON (device, date, commit, the per-step losses), the plot and a README whose
figures are the JSON's; bad suite and part names are refused naming them.

torch and transformers are required in CI (KITTENS_REQUIRE_TORCH=1).
"""

import json
import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch  # noqa: F401
    import transformers  # noqa: F401
else:
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")

from kittens import bench_model, bench_model_suite  # noqa: E402


def test_tiny_suite_writes_json_plot_and_readme(tmp_path, capsys):
    out = tmp_path / "results"
    rc = bench_model.main(["--suite", "tiny", "--device", "cpu", "--out", str(out)])
    assert rc == 0, capsys.readouterr().out[-3000:]
    report = json.loads((out / "micro.json").read_text())
    assert report["suite"] == "tiny" and report["part"] == "micro"
    assert report["device"].startswith("cpu") and report["commit"] and report["date"][:2] == "20"
    tr = report["training"]
    assert set(tr) == {"hf", "kittens"} and all(v["ran"] for v in tr.values())
    assert all(len(v["losses"]) == 4 and v["tokens_per_s"] > 0 for v in tr.values())
    # Each step's enqueue time is part of the step's time, so the medians keep that order.
    assert all(len(v["host_s"]) == 4 and 0 < v["host_ms"] <= v["step_ms"] for v in tr.values())
    assert all(h <= s for v in tr.values() for h, s in zip(v["host_s"], v["step_s"]))
    # Same init, same batches: the first step's losses agree to bf16 rounding.
    assert abs(tr["hf"]["losses"][0] - tr["kittens"]["losses"][0]) < 2e-2
    gap = report["curves"]["kittens"]
    assert gap["steps"] == 2 and 0 <= gap["mean_abs_gap"] <= gap["max_abs_gap"]
    inf = report["inference"]
    assert all(inf[a]["ran"] and inf[a]["decode_tokens_per_s"] > 0 for a in ("hf", "kittens"))
    assert (out / "micro.png").stat().st_size > 10_000
    readme = (out / "README.md").read_text()
    assert f"commit `{report['commit']}`" in readme
    k = tr["kittens"]
    assert f"| kittens | {k['tokens_per_s']:,.0f} |" in readme and f"| {k['step_ms']:.1f} | {k['host_ms']:.1f} |" in readme
    assert f"{gap['mean_abs_gap']:.4f} / {gap['max_abs_gap']:.4f}" in readme
    assert f"| hf | {inf['hf']['prefill_tokens_per_s']:,.0f} | {inf['hf']['decode_tokens_per_s']:,.0f} |" in readme
    # The README covers every part present: another part's JSON in the folder shows up in it.
    other = dict(report, part="125m-2k")
    (out / "125m-2k.json").write_text(json.dumps(other))
    text = bench_model_suite.readme(bench_model_suite.load(str(out)), "tiny")
    assert text.index("## 125m-2k") < text.index("## micro")  # the issue35 suite's order first


def test_bad_names_are_refused(tmp_path, capsys):
    assert bench_model.main(["--suite", "nope", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err
    assert bench_model.main(["--suite", "issue35", "--parts", "2b", "--device", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no part '2b'" in err and "125m-2k, 1b-4k" in err


def test_issue35_suite_is_what_the_issue_asks():
    parts = {p["name"]: p for p in bench_model_suite.SUITES["issue35"]}
    assert parts["125m-2k"]["steps"] == 200 and parts["1b-4k"]["seq"] == 4096
    # CUDA graphs (torch.compile's reduce-overhead) for both compiled sides at 125M, where the host's per-op
    # cost weighs most.
    assert {"hf-compile-ro", "kittens-compile-ro"} <= set(parts["125m-2k"]["arms"].split(","))
    for p in parts.values():
        arms = set(p["arms"].split(","))
        assert {"hf", "hf-compile", "kittens", "kittens-compile"} <= arms <= set(bench_model.ARMS)
        assert p["prompt"] + p["new_tokens"] <= p["seq"]


def test_the_demo_model_line_arguments_are_accepted():
    """`kittens demo`'s model line (crates/kittens-cli/src/cmd/demo/model.rs) runs `python3 -m kittens.bench
    model <ARGS>`: its arguments parse (without a GPU the run stops at the device check, exit 2, not at
    argparse's)."""
    import re
    import subprocess
    import sys

    src = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "kittens-cli", "src", "cmd", "demo",
                       "model.rs")
    text = open(src).read()
    body = re.search(r"const ARGS: &\[&str\] = &\[(.*?)\];", text, re.S).group(1)
    args = re.findall(r'"([^"]*)"', body)
    assert args[:3] == ["-m", "kittens.bench", "model"] and "--size" in args
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, *args, "--json", os.devnull], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "no CUDA device" in r.stderr and "error:" not in r.stderr, r.stderr


def test_profile_runs_more_steps_under_the_profiler(capsys):
    """``--profile N``: N steps after the timed ones under torch.profiler, its tables printed and its top
    ops in the arm's record (on the CPU only the host table); the timed steps are unchanged."""
    import argparse

    import torch
    import transformers

    args = argparse.Namespace(size="micro", seq=32, batch=2, steps=3, skip_timing=1, lr=3e-4, warmup=2, seed=0,
                              log_every=10, profile=2, fused_loss=True, compile_mode="default")
    cfg = bench_model.llama_config(transformers, "micro", args.seq)
    data = torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(1))
    r = bench_model.train_arm(torch, transformers, cfg, "hf", data, args, bench_model.Device(torch, "cpu"))
    assert len(r["losses"]) == 3 and len(r["step_s"]) == 3
    prof = r["profile"]
    assert prof["steps"] == 2 and "self_cuda_time_total" not in prof
    top = prof["self_cpu_time_total"]
    assert len(top) > 5 and all(e["calls"] >= 1 for e in top)
    assert [e["us"] for e in top] == sorted((e["us"] for e in top), reverse=True) and top[0]["us"] > 0
    # The profiled steps ran the model: its matrix products are among the costliest host ops.
    assert any("mm" in e["op"] for e in top), [e["op"] for e in top]
    assert "hf: 2 profiled steps by self_cpu_time_total" in capsys.readouterr().out
    args.profile = 0
    assert bench_model.train_arm(torch, transformers, cfg, "hf", data, args,
                                 bench_model.Device(torch, "cpu"))["profile"] is None


def test_interleaved_arms_share_steps_and_the_time_budget(capsys):
    """``--interleave``: every arm stepped in turn on the same batches (their first losses agree to bf16
    rounding, as one after another); a time budget stops every arm at the same step, and each record says
    it was interleaved and how many steps it timed; kittens-nofl (transformers' loss) runs beside them."""
    import argparse

    import torch
    import transformers

    args = argparse.Namespace(size="micro", seq=16, batch=2, steps=6, skip_timing=1, lr=3e-4, warmup=2, seed=0,
                              log_every=10, profile=0, fused_loss=True, compile_mode="default", time_budget=0)
    cfg = bench_model.llama_config(transformers, "micro", args.seq)
    data = torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(1))
    dev = bench_model.Device(torch, "cpu")
    arms = ["hf", "kittens", "kittens-nofl"]
    tr = bench_model.train_interleaved(torch, transformers, cfg, arms, data, args, dev)
    assert list(tr) == arms and all(v["ran"] and v["interleaved"] for v in tr.values())
    assert all(len(v["losses"]) == 6 and v["timed_steps"] == 5 for v in tr.values())
    seq = bench_model.train_arm(torch, transformers, cfg, "kittens", data, args, dev)
    assert abs(seq["losses"][0] - tr["kittens"]["losses"][0]) < 2e-2
    assert abs(tr["hf"]["losses"][0] - tr["kittens-nofl"]["losses"][0]) < 2e-2
    args.time_budget = 1e-9  # past after the first step: one step per arm
    tr = bench_model.train_interleaved(torch, transformers, cfg, arms, data, args, dev)
    assert all(len(v["losses"]) == 1 for v in tr.values())
    assert "time budget" in capsys.readouterr().out
