"""The issue's first report, reproduced: a Hugging Face Llama (transformers, a tiny random model) with
``kittens.attention`` registered as its attention function. The model hands q as a transposed view of
(B, N, H, D) and k, v dense (B, H_kv, N, D); the forward, ``loss.backward()`` (every parameter gets a
gradient) and ``torch.compile(fullgraph=True)`` of the forward run, and match the model on SDPA.

scripts/test-python.sh installs transformers with torch; in CI (KITTENS_REQUIRE_TORCH=1) a missing
transformers fails this file instead of skipping it.
"""

import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch
    import transformers
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import kittens  # noqa: E402

SEEN = {}


def kittens_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function signature (AttentionInterface): causal attention through
    kittens, the output (B, N, H, D) as the model expects."""
    SEEN["layouts"] = (query.stride(), key.stride(), value.stride())
    out = kittens.attention(query, key, value, causal=True, scale=scaling)
    return out.transpose(1, 2), None


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_hf_llama_with_kittens_attention():
    transformers.AttentionInterface.register("kittens", kittens_attention)
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    ids = torch.randint(0, 97, (2, 19))
    runs = {}
    for impl in ("sdpa", "kittens"):
        model.config._attn_implementation = impl
        model.zero_grad()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        runs[impl] = (out.logits.detach(), [p.grad for p in model.parameters()])
    q_strides, k_strides, _ = SEEN["layouts"]
    b, n, h, d = 2, 19, 4, 32
    assert q_strides == (n * h * d, d, h * d, 1), "the model no longer passes q as a transposed view"
    assert k_strides == (2 * n * d, n * d, d, 1)
    logits, grads = runs["kittens"]
    assert rel(logits, runs["sdpa"][0]) < 2e-2
    assert all(g is not None for g in grads), "a parameter got no gradient"
    for g, ref in zip(grads, runs["sdpa"][1]):
        if ref.float().norm() > 0:
            assert rel(g, ref) < 5e-2
    model.config._attn_implementation = "kittens"
    torch._dynamo.reset()
    compiled = torch.compile(lambda ids: model(input_ids=ids).logits, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(compiled(ids), model(input_ids=ids).logits)
