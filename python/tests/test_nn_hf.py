"""kittens.integrations.transformers.apply on tiny Hugging Face models (random weights, CPU interpreter)
against the unpatched model: logits, loss and every parameter's gradient against the model in float64 by
FlashAttention's rule (our error at most twice the unpatched bf16 model's, plus a floor), the state dict
unchanged, the kernels actually called (no fallback but the kernels that do not exist yet), generate()
with a KV cache, padding falling back to SDPA with a warning, GPT-2 (Conv1D, LayerNorm), and
``python -m kittens.bench model``'s CPU refusal and its training and inference code on a tiny model.

scripts/test-python.sh installs transformers with torch; in CI (KITTENS_REQUIRE_TORCH=1) a missing
transformers fails this file instead of skipping it.
"""

import argparse
import copy
import os
import subprocess
import sys
import warnings

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch
    import transformers
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import kittens  # noqa: E402
import kittens.nn as knn  # noqa: E402
from kittens.integrations.transformers import apply  # noqa: E402

FLOOR = 1e-5
BF, F64 = torch.bfloat16, torch.float64


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_rule(ours, base, ref, what, floor=FLOOR):
    assert ours is not None, f"{what}: no gradient"
    e, b = rel(ours, ref), rel(base, ref)
    assert e <= 2 * b + floor, f"{what}: ours {e:.3e} vs bf16 {b:.3e}"


def tiny_llama(seed=0, **kw):
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=96, intermediate_size=200, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=64, **kw)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # fresh random norms too (the initialiser's are ones)
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    model.set_attn_implementation("sdpa")
    return model


class Spy:
    """Counts the calls of kittens' public kernels (the modules call them through the kittens module)."""

    def __init__(self, monkeypatch):
        self.calls = {"matmul": 0, "attention": [], "rotary": 0, "layernorm": 0}
        for name in self.calls:
            real = getattr(kittens, name)

            def wrap(*a, _real=real, _name=name, **kw):
                if _name == "attention":
                    self.calls[_name].append((a[0].shape[2], a[1].shape[2]))
                else:
                    self.calls[_name] += 1
                return _real(*a, **kw)

            monkeypatch.setattr(kittens, name, wrap)


def fallbacks(caught):
    return [str(w.message) for w in caught if issubclass(w.category, knn.FallbackWarning)]


def forward_backward(model, ids):
    model.zero_grad()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def patched_run(base, ids, monkeypatch, **apply_kw):
    """apply() on a copy of base, then its forward and backward on ids with the kernels counted: (report,
    spy, (logits, loss, grads), the warnings)."""
    ours = copy.deepcopy(base)
    knn._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = apply(ours, **apply_kw)
        spy = Spy(monkeypatch)
        got = forward_backward(ours, ids)
    assert not fallbacks(caught), fallbacks(caught)
    return ours, report, spy, got, caught


def test_llama_logits_loss_grads_against_float64(monkeypatch):
    base = tiny_llama()
    keys = {k: v.clone() for k, v in base.state_dict().items()}
    ref = copy.deepcopy(base).to(F64)
    ref.set_attn_implementation("eager")
    base = base.to(BF)
    ids = torch.randint(0, 97, (2, 37), generator=torch.Generator().manual_seed(1))
    # The logits too: the loss through transformers' (the fused loss makes none; tested below).
    ours, report, spy, got, caught = patched_run(base, ids, monkeypatch, loss=False)
    assert report["loss"] == []
    assert report["attention"] == ["kittens"] and len(report["rotary"]) == 2 and len(report["mlp"]) == 2
    assert len(report["norm"]) == 5 and len(report["linear"]) == 15 and report["kept"] == []
    # 7 Linear forwards a layer + lm_head; every attention call the kernel's, over the whole sequence
    assert spy.calls["matmul"] >= 15 and spy.calls["attention"] == [(37, 37)] * 2
    assert spy.calls["rotary"] >= 4  # q and k of 2 layers (the custom ops' bodies call kittens.rotary too)
    # the parameters are the model's own: same keys, same values
    assert list(ours.state_dict()) == list(keys)
    for k, v in ours.state_dict().items():
        assert torch.equal(v.float(), keys[k].to(BF).float()), k
    want = forward_backward(ref, ids)
    have = forward_backward(base, ids)
    check_rule(got[0], have[0], want[0], "logits")
    check_rule(got[1], have[1], want[1], "loss")
    for n in want[2]:
        check_rule(got[2][n], have[2][n], want[2][n], f"d {n}")


def test_llama_fused_loss_against_float64(monkeypatch):
    """apply()'s loss: while training on labels the LM head and the loss are kittens.linear_cross_entropy
    (no logits made); the loss and every parameter's gradient (the tied-or-not LM head's included) against
    the float64 model by the rule; num_items_in_batch as transformers takes it; eval mode is transformers'."""
    base = tiny_llama(seed=12)
    ref = copy.deepcopy(base).to(F64)
    ref.set_attn_implementation("eager")
    base = base.to(BF)
    ids = torch.randint(0, 97, (2, 37), generator=torch.Generator().manual_seed(13))
    labels = ids.clone()
    labels[0, :5] = -100
    ours = copy.deepcopy(base)
    report = apply(ours)
    assert report["loss"] == ["LlamaForCausalLM"] and type(ours).__name__ == "KittensLlamaForCausalLM"
    calls = []
    real = kittens.linear_cross_entropy
    monkeypatch.setattr(kittens, "linear_cross_entropy", lambda *a, **k: calls.append(1) or real(*a, **k))

    def run(model, **kw):
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, **kw)
        out.loss.backward()
        return out, {n: p.grad for n, p in model.named_parameters()}

    got, g_ours = run(ours)
    assert calls == [1] and got.logits is None
    want, g_ref = run(ref)
    have, g_base = run(base)
    # One scalar: the baseline's error can be small by luck; the floor is 1/40 of a bf16 step.
    check_rule(got.loss.detach(), have.loss.detach(), want.loss.detach(), "loss", floor=1e-4)
    for n in g_ref:
        check_rule(g_ours[n], g_base[n], g_ref[n], f"d {n}")
    # transformers' num_items_in_batch: the sum over the kept tokens divided by it
    got_n, _ = run(ours, num_items_in_batch=torch.tensor(50))
    want_n, _ = run(ref, num_items_in_batch=torch.tensor(50))
    assert abs(got_n.loss.item() - want_n.loss.item()) < 2e-2 * abs(want_n.loss.item())
    ours.eval()
    with torch.no_grad():
        out = ours(input_ids=ids, labels=labels)
    assert out.logits is not None and calls == [1, 1]


def test_llama_generate_with_kv_cache(monkeypatch):
    base = tiny_llama(seed=2).to(BF)
    ours = copy.deepcopy(base)
    apply(ours)
    spy = Spy(monkeypatch)
    prompt = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0, output_logits=True,
              return_dict_in_generate=True)
    knn._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g_ours = ours.generate(prompt, attention_mask=torch.ones_like(prompt), **kw)
    assert not fallbacks(caught), fallbacks(caught)
    g_base = base.generate(prompt, attention_mask=torch.ones_like(prompt), **kw)
    # the prefill over the prompt, then one query against the cache per new token, all by the kernel
    assert spy.calls["attention"][:2] == [(11, 11)] * 2
    assert spy.calls["attention"][2:] == [(1, 11 + i) for i in range(1, 8) for _ in range(2)]
    assert torch.equal(g_ours.sequences, g_base.sequences)
    # each step's logits against the float64 model on the same tokens (teacher forcing)
    ref = copy.deepcopy(base).to(F64)
    with torch.no_grad():
        want = ref(input_ids=g_base.sequences).logits[:, 10:-1]
    have, got = torch.stack(g_base.logits, 1), torch.stack(g_ours.logits, 1)
    check_rule(got, have, want, "generate logits")


def test_llama_padding_falls_back_to_sdpa_with_a_warning():
    base = tiny_llama(seed=4).to(BF)
    ours = copy.deepcopy(base)
    apply(ours)
    ids = torch.randint(1, 97, (2, 13), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding
    knn._WARNED.clear()
    with pytest.warns(knn.FallbackWarning, match="explicit attention mask"):
        got = ours(input_ids=ids, attention_mask=mask).logits
    want = base(input_ids=ids, attention_mask=mask).logits
    assert rel(got[0, 4:], want[0, 4:]) < 2e-2 and rel(got[1], want[1]) < 2e-2


def test_float32_model_falls_back_exactly():
    base = tiny_llama(seed=6)
    ours = copy.deepcopy(base)
    apply(ours)
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(7))
    knn._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ours(input_ids=ids, labels=ids)
    assert any("torch.float32" in m for m in fallbacks(caught))
    want = base(input_ids=ids, labels=ids)
    assert rel(got.logits, want.logits) < 1e-5 and abs(got.loss.item() - want.loss.item()) < 1e-5


def test_gpt2_conv1d_layernorm_attention(monkeypatch):
    cfg = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=768, n_layer=1, n_head=12,
                                  attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    torch.manual_seed(8)
    base = transformers.GPT2LMHeadModel(cfg)
    base.set_attn_implementation("sdpa")
    ref = copy.deepcopy(base).to(F64)
    base = base.to(BF)
    ids = torch.randint(0, 97, (1, 21), generator=torch.Generator().manual_seed(9))
    _, report, spy, got, _ = patched_run(base, ids, monkeypatch)
    assert len(report["norm"]) == 3 and len(report["linear"]) == 5  # 4 Conv1D and lm_head
    assert spy.calls["layernorm"] >= 3 and spy.calls["attention"] == [(21, 21)]
    want, have = forward_backward(ref, ids), forward_backward(base, ids)
    check_rule(got[0], have[0], want[0], "GPT-2 logits")
    for n in want[2]:
        check_rule(got[2][n], have[2][n], want[2][n], f"GPT-2 d {n}")


def test_bench_model_refuses_cpu_and_runs_its_arms_on_a_tiny_model():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-m", "kittens.bench", "model"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "no CUDA device" in r.stderr, r.stderr
    from kittens import bench_model as bm

    args = argparse.Namespace(seq=16, batch=2, steps=4, skip_timing=1, lr=1e-3, warmup=2, seed=0, log_every=10,
                              prompt=8, new_tokens=4, gen_batch=2, repeats=1)
    cfg = transformers.LlamaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, head_dim=32, intermediate_size=96)
    data = torch.frombuffer(bytearray(b"the quick brown fox jumps over the lazy dog " * 9), dtype=torch.uint8)
    dev = bm.Device(torch, "cpu")
    train = {a: bm.train_arm(torch, transformers, cfg, a, data.long(), args, dev) for a in ("hf", "kittens")}
    for a, v in train.items():
        assert len(v["losses"]) == 4 and v["tokens_per_s"] > 0, a
    assert max(abs(x - y) for x, y in zip(train["hf"]["losses"], train["kittens"]["losses"])) < 2e-2
    assert train["hf"]["losses"][-1] < train["hf"]["losses"][0]  # it learns
    infer = {a: bm.infer_arm(torch, transformers, cfg, a, data.long(), args, dev) for a in ("hf", "kittens")}
    for a, v in infer.items():
        assert v["prefill_tokens_per_s"] > 0 and len(v["tokens"]) == 2 and len(v["tokens"][0]) == 4, a


def test_llama_compiles_fullgraph():
    """The patched model traces in one graph (the bench's compiled arm), same logits as eager."""
    model = tiny_llama(seed=10).to(BF)
    apply(model)
    ids = torch.randint(0, 97, (2, 19), generator=torch.Generator().manual_seed(11))
    torch._dynamo.reset()
    compiled = torch.compile(lambda ids: model(input_ids=ids, labels=ids), fullgraph=True, backend="aot_eager")
    out = compiled(ids)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert out.logits is None  # training on labels: the fused loss
    assert torch.equal(out.loss.detach(), model(input_ids=ids, labels=ids).loss.detach())
    compiled = torch.compile(lambda ids: model(input_ids=ids), fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(compiled(ids).logits, model(input_ids=ids).logits)


def test_gpt_neox_layernorm_attention(monkeypatch):
    """GPT-NeoX (partial rotary, its own rotary code kept): LayerNorm, Linear and attention kernels."""
    cfg = transformers.GPTNeoXConfig(vocab_size=97, hidden_size=768, num_hidden_layers=1, num_attention_heads=12,
                                     intermediate_size=1000, rotary_pct=0.25, max_position_embeddings=64,
                                     attention_dropout=0.0, hidden_dropout=0.0)
    torch.manual_seed(12)
    base = transformers.GPTNeoXForCausalLM(cfg)
    base.set_attn_implementation("sdpa")
    ref = copy.deepcopy(base).to(F64)
    base = base.to(BF)
    ids = torch.randint(0, 97, (2, 13), generator=torch.Generator().manual_seed(13))
    _, report, spy, got, _ = patched_run(base, ids, monkeypatch)
    assert len(report["norm"]) == 3 and len(report["linear"]) == 5 and report["attention"] == ["kittens"]
    assert spy.calls["layernorm"] >= 3 and spy.calls["attention"] == [(13, 13)]
    want, have = forward_backward(ref, ids), forward_backward(base, ids)
    check_rule(got[0], have[0], want[0], "GPT-NeoX logits")
    for n in want[2]:
        check_rule(got[2][n], have[2][n], want[2][n], f"GPT-NeoX d {n}")


def test_imports_without_transformers():
    """transformers is an optional extra: kittens, kittens.nn and the integration module import without
    it, and apply() then says how to install it."""
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import kittens, kittens.nn, kittens.integrations.transformers as kt\n"
            "try:\n    kt.apply(None)\nexcept ImportError as e:\n    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "refused: kittens.integrations.transformers needs transformers: pip install './python[hf]'" in r.stdout
