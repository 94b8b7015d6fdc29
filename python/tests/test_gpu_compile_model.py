"""``torch.compile`` of a Hugging Face Llama patched by ``kittens.integrations.transformers.apply`` on an
H100/H200, in both of the benchmark's modes: inductor's default and ``reduce-overhead`` (CUDA graphs). Per
mode: three training steps (forward, backward) on fresh batches, loss and every gradient equal to the
eager patched model's within bf16 noise; the compiled forward runs kittens' attention (not the SDPA
fallback that a causal mask tensor caused under torch < 2.14); with reduce-overhead the step is
captured and replayed (inductor's ``cudagraph_skips`` counter stays 0: every kittens launch is
capture-safe — the current stream, torch's allocator, no host synchronisation).

Skips without a CUDA device of compute capability 9.0 (CI has none). Written without a GPU: not yet run.
"""

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from torch._dynamo.utils import counters  # noqa: E402

from kittens.integrations.transformers import apply  # noqa: E402


def tiny_llama():
    # head dim 64 (the CUDA attention kernel's), hidden 768 (the norm kernels' least), 2 layers.
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=768, intermediate_size=2048, num_hidden_layers=2,
                                   num_attention_heads=12, num_key_value_heads=4, head_dim=64,
                                   max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).cuda()


def step(model, x, graphs):
    if graphs:
        torch.compiler.cudagraph_mark_step_begin()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=x, labels=x).loss
    loss.backward()
    module = getattr(model, "_orig_mod", model)  # a compiled model's parameters under their own names
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters()}
    module.zero_grad(set_to_none=True)
    return loss.detach().clone(), grads


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_training_steps_match_eager(mode):
    torch._dynamo.reset()
    counters.clear()
    eager = tiny_llama()
    assert not apply(eager)["kept"]
    model = copy.deepcopy(eager)
    from kittens import _dispatch

    real, calls = _dispatch.attention, []

    def counted(*args, **kwargs):  # the attention kernel's CUDA entry, looked up per call by the op's body
        calls.append(1)
        return real(*args, **kwargs)

    compiled = torch.compile(model, fullgraph=True, mode=None if mode == "default" else mode)
    gen = torch.Generator().manual_seed(1)
    for i in range(3):
        x = torch.randint(0, 1000, (2, 256), generator=gen).cuda()
        _dispatch.attention = counted
        try:
            got_loss, got = step(compiled, x, mode == "reduce-overhead")
        finally:
            _dispatch.attention = real
        ref_loss, ref = step(eager, x, False)
        torch.testing.assert_close(got_loss, ref_loss, rtol=2e-2, atol=2e-2)
        for n, g in ref.items():
            err = (got[n].double() - g.double()).norm() / g.double().norm().clamp_min(1e-30)
            assert err < 5e-2, (n, err.item())
    # The compiled graph ran kittens' attention (2 layers: 2 calls a traced run; none on a graph replay).
    assert len(calls) >= 2, len(calls)
    if mode == "reduce-overhead":
        assert counters["inductor"].get("cudagraph_skips", 0) == 0, dict(counters["inductor"])
    assert counters["inductor"].get("extern_calls", 0) > 0
    assert not [k for k in counters["graph_break"]], dict(counters["graph_break"])
