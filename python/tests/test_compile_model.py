"""``torch.compile(fullgraph=True)`` of a Hugging Face Llama patched by ``kittens.integrations.transformers.apply``
(CPU, the interpreter): what the compiled training step runs (issue 35: the compiled arm must do at most
the eager arm's work). Per step: one graph, compiled once (no recompile on the next batch); forward and
backward made of kittens' kernels (attention, norms, rotary, SwiGLU, GEMMs, the fused loss) with no SDPA
fallback and no tensor of zeros fed to a kernel; loss and gradients those of the eager patched model.

The attention mask: transformers skips the causal mask tensor under torch.compile only from torch 2.14
on (transformers.masking_utils._ignore_causal_mask_sdpa); before, the tensor sent every compiled kittens
attention to the SDPA fallback, silently (the fallback does not warn while tracing). The ``never-skips``
case replays that behaviour on this torch.
"""

import collections
import copy
import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch
    import transformers
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from functorch.compile import make_boxed_func  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

from kittens.integrations import transformers as kt  # noqa: E402

BF = torch.bfloat16


def tiny_llama(seed=3):
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                   max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    return model


class Graphs:
    """A torch.compile backend (AOTAutograd, graphs run as traced) that counts each compiled forward's and
    backward's operators."""

    def __init__(self):
        self.forward, self.backward = [], []
        self.backend = aot_autograd(fw_compiler=self._keep(self.forward), bw_compiler=self._keep(self.backward))

    @staticmethod
    def _keep(into):
        def compiler(gm, example_inputs):
            into.append(collections.Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function"))
            return make_boxed_func(gm)

        return compiler


def step(model, x):
    with torch.autocast("cpu", dtype=BF):
        loss = model(input_ids=x, labels=x).loss
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("mask_skip", ["transformers", "never-skips"])
def test_compiled_step_is_kittens_kernels_once(monkeypatch, mask_skip):
    import transformers.masking_utils as mu

    if mask_skip == "never-skips":
        real = mu._ignore_causal_mask_sdpa

        def old_torch(*args, **kwargs):  # torch < 2.14: no skip while compiling
            return False if torch.compiler.is_compiling() else real(*args, **kwargs)

        monkeypatch.setattr(mu, "_ignore_causal_mask_sdpa", old_torch)
    torch._dynamo.reset()
    eager = tiny_llama()
    report = kt.apply(eager)
    assert report["attention"] and report["loss"] and not report["kept"]
    model = copy.deepcopy(eager)
    graphs = Graphs()
    compiled = torch.compile(model, fullgraph=True, backend=graphs.backend)
    gen = torch.Generator().manual_seed(4)
    for i in range(2):  # a second batch: same graph, no recompile
        x = torch.randint(0, 97, (2, 24), generator=gen)
        got, ref = step(compiled, x), step(eager, x)
        torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)
    assert len(graphs.forward) == 1 and len(graphs.backward) == 1, "recompiled or split"
    fw, bw = graphs.forward[0], graphs.backward[0]
    # The norms without a residual (Hugging Face adds it itself) as rmsnorm_y: no copy of x as a second output.
    want_fw = {"kittens.attention.default": 1, "kittens.rmsnorm_y.default": 3, "kittens.rotary.default": 2,
               "kittens.swiglu.default": 1, "kittens.matmul.default": 7,
               "kittens.linear_cross_entropy_forward.default": 1}
    # Each matmul's two products (dA and dB) in one matmul_backward call: one dispatch per matmul.
    want_bw = {"kittens.attention_backward.default": 1, "kittens.rmsnorm_backward.default": 3,
               "kittens.rotary.default": 2, "kittens.swiglu_backward.default": 1,
               "kittens.matmul_backward.default": 7}
    assert {k: fw[k] for k in want_fw} == want_fw, fw
    assert {k: bw[k] for k in want_bw} == want_bw, bw
    for counts in (fw, bw):
        assert not [k for k in counts if "scaled_dot_product" in k], counts  # no SDPA fallback
        assert not [k for k in counts if "zeros" in k], counts  # no zero residual or zero gradient read
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-3 * q.grad.abs().max().item(), msg=name)


def test_dynamic_shapes_one_graph_for_two_lengths():
    """dynamic=True: two sequence lengths share one graph (no size specialised by the kittens code, e.g.
    an int() of a SymInt), attention on the kernel (the mask decision holds for symbolic sizes)."""
    torch._dynamo.reset()
    model = tiny_llama()
    kt.apply(model)
    graphs = Graphs()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=graphs.backend)
    gen = torch.Generator().manual_seed(6)
    for n in (24, 40):
        step(compiled, torch.randint(0, 97, (2, n), generator=gen))
    assert len(graphs.forward) == 1, [dict(f) for f in graphs.forward]
    assert graphs.forward[0]["kittens.attention.default"] == 1
    assert not [k for k in graphs.forward[0] if "scaled_dot_product" in k]


def test_plain_causal_mask_is_left_to_the_kernel_and_others_are_not():
    import transformers.masking_utils as mu

    base = dict(batch_size=2, q_length=8, kv_length=8, q_offset=0, kv_offset=0,
                mask_function=mu.causal_mask_function, attention_mask=None, allow_is_causal_skip=True,
                dtype=torch.float32, config=None, use_vmap=False, device="cpu")
    assert kt.causal_mask(**base) is None
    # A tensor offset (as under torch.compile) with as many keys as queries: still every key a real one.
    assert kt.causal_mask(**dict(base, q_offset=torch.tensor(0))) is None
    # Decoding against a dynamic cache: the queries end at the last key (bottom-right).
    assert kt.causal_mask(**dict(base, q_length=1, kv_length=9, q_offset=8)) is None
    pad = torch.ones(2, 8, dtype=torch.bool)
    pad[0, :3] = False
    for why, kw in (("padding", dict(attention_mask=pad)),
                    ("packed sequences / deviations", dict(allow_is_causal_skip=False)),
                    ("sliding window", dict(local_size=4)),
                    ("static cache (keys beyond the queries, tensor offset)",
                     dict(kv_length=16, q_offset=torch.tensor(0))),
                    ("another mask function", dict(mask_function=mu.bidirectional_mask_function))):
        m = kt.causal_mask(**dict(base, **kw))
        ref = mu.sdpa_mask(**dict(base, **kw))
        assert (m is None) == (ref is None), why
        if ref is not None:
            assert torch.equal(m, ref), why
    # Where sdpa_mask itself gives a tensor, so does ours (padding: a real mask).
    assert kt.causal_mask(**dict(base, attention_mask=pad)) is not None
