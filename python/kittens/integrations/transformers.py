"""``kittens.integrations.transformers.apply(model)``: a Hugging Face model on kittens' kernels, in place.

``transformers`` is an optional extra (``pip install ./python[hf]``); ``kittens`` imports without it and
this module raises an ImportError saying so when used without it. Written against transformers 5.x
(``AttentionInterface``, ``AttentionMaskInterface``, the ``cache=`` keyword of the attention modules).

What :func:`apply` changes, keeping every parameter (the same ``Parameter`` objects: tied weights stay
tied, the state dict keeps its keys and values) — each module's class is swapped for a subclass whose
``forward`` runs kittens (``type(m).__name__`` starts with ``Kittens``):

* attention: the function registered as ``"kittens"`` in transformers' ``AttentionInterface``
  (:func:`attention_forward`: ``kittens.attention``, causal aligned bottom-right, MHA and GQA) and
  :func:`causal_mask` as its mask function (no mask tensor for the plain causal mask, also under
  ``torch.compile``; else ``sdpa_mask``), set as the model's attention implementation (any model whose
  attention goes through the interface: Llama, Mistral, Qwen2, GPT-2, GPT-NeoX, ...). A call the kernel
  cannot take (an explicit mask: padding, or several new queries against a cache; dropout; softcap;
  a sliding window; a head dim the kernel lacks; float32) runs transformers' SDPA function instead;
* ``nn.Linear`` and transformers' ``Conv1D`` (GPT-2's): ``kittens.matmul``; ``nn.LayerNorm``: the
  layernorm kernel (:class:`kittens.nn.LayerNorm`);
* Llama-family modules whose ``forward`` is Llama's own code (compared by byte code, so a variant such
  as Gemma's ``1 + weight`` norm is left alone): ``LlamaRMSNorm`` → :func:`kittens.nn.rms_norm` (in
  Llama's rounding order), ``LlamaMLP`` with SiLU → :func:`kittens.nn.swiglu`, ``LlamaAttention`` → the
  same forward with the rotary kernel (:func:`kittens.nn.apply_rotary`) for q and k;
* the output of a rotary embedding with Llama's code is cut to one row when every sequence of the batch
  has the same positions (one comparison per forward), so the kernel's single table applies.

Every case the kernels do not take runs PyTorch's computation with a one-time
:class:`kittens.nn.FallbackWarning` naming why, never a silently different result. The loss is
computed by :func:`kittens.linear_cross_entropy` (the LM head and the cross-entropy fused, no logits made) for
a causal LM whose forward is Llama's own code, while it trains on labels (``model.training``, gradients on):
that output's ``logits`` is None; in eval mode, without labels or under ``torch.no_grad`` the forward is
transformers' own. Modules apply skipped are listed in the returned report.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Dict, List, Optional

import torch
from torch import nn

import kittens

from .. import nn as knn

NAME = "kittens"

__all__ = ["apply", "register", "attention_forward", "NAME"]


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("kittens.integrations.transformers needs transformers: pip install './python[hf]' "
                          "(or pip install transformers)") from e
    return transformers


# -- attention -----------------------------------------------------------------------------------------


def attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                      scaling: Optional[float] = None, is_causal: Optional[bool] = None, **kwargs):
    """transformers' attention-function signature: q (B, H, N, D), k and v (B, H_kv, N_kv, D) (the cache
    included), output (B, N, H, D) and no attention weights. ``kittens.attention`` where it takes the
    case, else transformers' ``sdpa_attention_forward`` (with the one-time warning)."""
    why = None
    if attention_mask is not None:
        why = ("an explicit attention mask (padding, or several queries against a cache): the kernel takes "
               "the causal mask only")
    elif dropout:
        why = f"attention dropout {dropout}: the kernel has none"
    elif kwargs.get("softcap") is not None or kwargs.get("sliding_window") is not None:
        why = "softcap or a sliding window: the kernel has neither"
    elif kwargs.get("position_bias") is not None or kwargs.get("s_aux") is not None:
        why = "a position bias or sink logits: the kernel has neither"
    else:
        why = knn.attention_why(query, key, value)
    if why is not None:
        knn.fallback("attention (transformers)", why)
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    return knn.kernel_attention(query, key, value, bool(causal), scaling).transpose(1, 2), None


def _plain_causal(kw: dict) -> bool:
    """Whether the mask transformers asks for (its mask interface's keywords) is the causal mask over keys
    that all hold tokens, aligned bottom-right — the kernel's own causal mask, no mask tensor needed: no
    padding mask, transformers' plain ``causal_mask_function`` (no sliding window, packed sequences or
    other deviation: each sets ``allow_is_causal_skip`` False or another function), and every key a real
    one (as many keys as queries, or an ``int`` offset that ends the queries at the last key; a static
    cache's longer key buffer is not). Decided from shapes and Python values only, so also under
    torch.compile, where transformers' own skip does not read a tensor offset and (torch < 2.14) never
    skips: the mask tensor would then send kittens' attention to the SDPA fallback."""
    from transformers.masking_utils import causal_mask_function

    plain = kw.get("mask_function", causal_mask_function) is causal_mask_function
    if (not plain or kw.get("attention_mask") is not None or not kw.get("allow_is_causal_skip", True)
            or kw.get("local_size") is not None):
        return False
    kv, kv_offset = kw.get("kv_length"), kw.get("kv_offset", 0)
    if "q_length" in kw:
        q, q_offset = kw["q_length"], kw.get("q_offset", 0)
    elif kw.get("cache_position") is not None:  # transformers before q_length/q_offset
        q, q_offset = kw["cache_position"].shape[0], None
    else:
        return False
    size = (int, torch.SymInt)  # SymInt: torch.compile(dynamic=True)'s sizes (the comparisons become guards)
    if not isinstance(kv, size) or not isinstance(q, size) or not isinstance(kv_offset, size) or kv_offset != 0:
        return False
    return bool(kv == q) or (isinstance(q_offset, size) and bool(q_offset + q == kv))


def causal_mask(*args, **kwargs):
    """The ``"kittens"`` attention-mask function: None where the mask is the plain causal one
    (:func:`_plain_causal`: the kernel applies it), else transformers' ``sdpa_mask`` (whose mask sends the
    call to SDPA, or None where it finds none needed)."""
    from transformers.masking_utils import sdpa_mask

    if not args and _plain_causal(kwargs):
        return None
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Register ``"kittens"`` in transformers' attention and attention-mask interfaces (idempotent)."""
    tf = _transformers()
    from transformers.masking_utils import AttentionMaskInterface

    tf.AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, causal_mask)


def _set_attention(model) -> None:
    try:
        model.set_attn_implementation(NAME)
    except (AttributeError, ValueError, TypeError):
        for m in model.modules():
            cfg = getattr(m, "config", None)
            if cfg is not None and hasattr(cfg, "_attn_implementation"):
                cfg._attn_implementation = NAME


# -- module forwards -----------------------------------------------------------------------------------


def _rms_forward(self, hidden_states):
    return knn.rms_norm(hidden_states, self.weight, self.variance_epsilon, hf_order=True)


def _mlp_forward(self, x):
    return self.down_proj(knn.swiglu(self.gate_proj(x), self.up_proj(x)))


def _conv1d_forward(self, x):
    """GPT-2's Conv1D, ``x @ weight + bias`` with weight (in, out) row-major: the GEMM reads it in place."""
    nx = self.weight.shape[0]
    rows = x.numel() // max(nx, 1)
    why = knn.device_why(x) or knn.dtype_why(knn.compute_dtype(x))
    if why is None and x.device.type == "cpu" and rows * nx * self.nf > knn.CPU_MACS:
        why = f"{rows}x{nx}x{self.nf} exceeds the CPU interpreter's 2^34 multiply-adds"
    if why is not None:
        knn.fallback("Conv1D (transformers)", why)
        return type(self).__mro__[1].forward(self, x)
    a = x.to(knn.BF16).reshape(rows, nx).contiguous()
    y = kittens.matmul(a, self.weight.to(knn.BF16).contiguous())
    return (y + self.bias.to(knn.BF16)).view(*x.shape[:-1], self.nf)


# The last (cos, sin) pair's half tables: every layer of a forward gets the same position embeddings, so
# the slices and their dense copies (the kernel reads (N, D/2) tables) are made once per forward, not
# twice per layer. Kept with the versions of cos and sin (an in-place change makes them again).
_HALVES: list = [None]


def _half_tables(cos, sin, d: int, dtype):
    """Dense (N, D/2) halves of ``cos[0]`` and ``sin[0]`` (the halves are equal) in ``dtype``, made once
    per (cos, sin, dtype) in eager mode."""
    if torch.compiler.is_compiling():  # traced: computed in the graph, nothing kept
        return cos[0, :, : d // 2].to(dtype).contiguous(), sin[0, :, : d // 2].to(dtype).contiguous()
    kept = _HALVES[0]
    if (kept is not None and kept[0] is cos and kept[1] is sin and kept[2] == cos._version
            and kept[3] == sin._version and kept[4] == dtype):
        return kept[5], kept[6]
    c, s = cos[0, :, : d // 2].to(dtype).contiguous(), sin[0, :, : d // 2].to(dtype).contiguous()
    if not (cos.requires_grad or sin.requires_grad):
        _HALVES[0] = (cos, sin, cos._version, sin._version, dtype, c, s)
    return c, s


def rotary_pair(q, k, cos, sin):
    """Hugging Face's ``apply_rotary_pos_emb(q, k, cos, sin)`` (cos, sin (B', N, D), the two halves
    equal) through the rotary kernel when B' = 1 (one table for the whole batch), else PyTorch."""
    d = q.shape[-1]
    if cos.dim() == 3 and cos.shape[0] == 1 and cos.shape[-1] == d:
        # The kernel's dtype when q is bfloat16 (apply_rotary then casts nothing), else the tables' own
        # (PyTorch's computation, exactly as transformers').
        c, s = _half_tables(cos, sin, d, knn.BF16 if q.dtype is knn.BF16 else cos.dtype)
        return knn.apply_rotary(q, c, s), knn.apply_rotary(k, c, s)
    knn.fallback("rotary (transformers)", f"cos/sin of shape {tuple(cos.shape)}: sequences at different "
                                          "positions (the kernel takes one table for the batch)")
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + knn.rotate_half(q) * s, k * c + knn.rotate_half(k) * s


_INTERFACES: list = []


def _attention_interfaces():
    """transformers' attention-function table and Llama's eager attention, imported once (an import
    statement in the forward runs the import machinery on every layer's call)."""
    if not _INTERFACES:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.llama.modeling_llama import eager_attention_forward

        _INTERFACES.extend((ALL_ATTENTION_FUNCTIONS, eager_attention_forward))
    return _INTERFACES[0], _INTERFACES[1]


def _llama_attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None,
                             past_key_values=None, **kwargs):
    """LlamaAttention.forward (transformers 5.x) with :func:`rotary_pair` for the rotary embedding."""
    interfaces, eager_attention_forward = _attention_interfaces()
    cache = cache if cache is not None else past_key_values
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    cos, sin = position_embeddings
    q, k = rotary_pair(q, k, cos, sin)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
    interface = interfaces.get_interface(self.config._attn_implementation, eager_attention_forward)
    out, weights = interface(self, q, k, v, attention_mask, dropout=0.0 if not self.training else
                             self.attention_dropout, scaling=self.scaling, **kwargs)
    out = out.reshape(*input_shape, -1).contiguous()
    return self.o_proj(out), weights


def _rope_hook(module, args, kwargs, output):
    """One row of cos/sin when every sequence has the same positions (then the rows are equal)."""
    cos, sin = output
    if cos.shape[0] <= 1 or torch.compiler.is_compiling():
        return None
    pos = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
    if pos is not None and pos.dim() == 2 and bool((pos == pos[:1]).all()):
        return cos[:1], sin[:1]
    return None


# -- the LM head and its loss ---------------------------------------------------------------------------


def _loss_why(model) -> Optional[str]:
    head = getattr(model, "lm_head", None)
    if not isinstance(head, nn.Linear) or head.bias is not None:
        return "the LM head is not a bias-free Linear"
    cfg = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(cfg, attr, None) not in (None, 1, 1.0):
            return f"config.{attr} = {getattr(cfg, attr)} (the fused loss takes plain logits)"
    return None


# transformers renamed the models' ``past_key_values`` keyword (and output field) ``cache`` during 5.x (5.17
# has the old name, 5.24 the new): the name the installed version takes, set by :func:`apply`.
_CACHE = "cache"


def _causal_lm_forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, inputs_embeds=None,
                       labels=None, use_cache=None, logits_to_keep=0, **kwargs):
    """LlamaForCausalLM.forward (transformers 5.x) with the LM head and the loss fused
    (:func:`kittens.linear_cross_entropy`) when it trains on labels: then the output has the loss and no
    logits (the point is not to make them, as Liger's). Otherwise transformers' own forward. The fourth
    argument is the cache under either name (:data:`_CACHE`)."""
    base = type(self).__mro__[1].forward
    if cache is not None:
        kwargs[_CACHE] = cache
    if labels is None or not (self.training and torch.is_grad_enabled()):
        return base(self, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache, logits_to_keep=logits_to_keep,
                    **kwargs)
    weight = self.lm_head.weight
    dt = weight.dtype
    if torch.is_autocast_enabled(weight.device.type):  # the head's matmul would run in the autocast dtype
        dt = torch.get_autocast_dtype(weight.device.type)
    why = knn.dtype_why(dt)
    if why is not None:
        knn.fallback("loss (transformers)", why)
        return base(self, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache, logits_to_keep=logits_to_keep,
                    **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
    hidden = out.last_hidden_state
    shift = kwargs.get("shift_labels")
    if shift is None:  # transformers' ForCausalLMLoss: tokens < n predict n, the last predicts nothing
        shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    with torch.autocast(hidden.device.type, enabled=False):
        loss = kittens.linear_cross_entropy(hidden.to(dt), weight.to(dt), shift.to(hidden.device), ignore_index=-100,
                                            num_items_in_batch=kwargs.get("num_items_in_batch"))
    return CausalLMOutputWithPast(loss=loss, logits=None, hidden_states=out.hidden_states, attentions=out.attentions,
                                  **{_CACHE: getattr(out, _CACHE, None)})


# -- apply ---------------------------------------------------------------------------------------------


def _code(f):
    c = inspect.unwrap(f).__code__
    return c.co_code, c.co_names


_SUBCLASSES: Dict[tuple, type] = {}


def _swap(m: nn.Module, forward) -> None:
    """Give ``m`` a subclass of its class whose forward is ``forward`` (parameters, buffers and hooks kept)."""
    cls = type(m)
    key = (cls, forward)
    if key not in _SUBCLASSES:
        _SUBCLASSES[key] = type(f"Kittens{cls.__name__}", (cls,), {"forward": forward, "_kittens": True,
                                                                   "__module__": __name__})
    m.__class__ = _SUBCLASSES[key]


def apply(model: nn.Module, *, attention: bool = True, norms: bool = True, rotary: bool = True,
          mlp: bool = True, linear: bool = True, loss: bool = True) -> Dict[str, List[str]]:
    """Make ``model`` (a transformers ``PreTrainedModel``) run kittens' kernels, in place; returns a report:
    ``{"attention": [...], "norm": [...], "rotary": [...], "mlp": [...], "linear": [...], "loss": [...],
    "kept": [...]}`` naming the modules changed, and in ``kept`` the ones left on PyTorch and why.
    ``loss``: a causal LM with Llama's forward computes its training loss by
    :func:`kittens.linear_cross_entropy` (no logits in that output). Idempotent."""
    tf = _transformers()
    from transformers.models.llama import modeling_llama as llama
    from transformers.pytorch_utils import Conv1D

    report: Dict[str, List[str]] = {k: [] for k in ("attention", "norm", "rotary", "mlp", "linear", "loss",
                                                    "kept")}
    top = type(model)
    global _CACHE
    _CACHE = "cache" if "cache" in inspect.signature(llama.LlamaForCausalLM.forward).parameters else "past_key_values"
    if loss and not getattr(top, "_kittens", False) and _code(top.forward) == _code(llama.LlamaForCausalLM.forward):
        why = _loss_why(model)
        if why is None:
            _swap(model, _causal_lm_forward)
            report["loss"].append(top.__name__)
        else:
            report["kept"].append(f"loss ({top.__name__}: {why})")
    silu = (nn.SiLU,) + tuple(c for c in (getattr(tf.activations, "SiLUActivation", None),) if c is not None)
    for name, m in model.named_modules():
        cls = type(m)
        if getattr(cls, "_kittens", False):
            continue
        if linear and cls is nn.Linear:
            m.__class__ = knn.Linear
            report["linear"].append(name)
        elif linear and cls is Conv1D:
            _swap(m, _conv1d_forward)
            report["linear"].append(name)
        elif norms and cls is nn.LayerNorm:
            m.__class__ = knn.LayerNorm
            report["norm"].append(name)
        elif norms and cls.__name__.endswith("RMSNorm"):
            if hasattr(m, "variance_epsilon") and _code(cls.forward) == _code(llama.LlamaRMSNorm.forward):
                _swap(m, _rms_forward)
                report["norm"].append(name)
            else:
                report["kept"].append(f"{name} ({cls.__name__}: not Llama's RMSNorm code)")
        elif mlp and all(hasattr(m, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            if isinstance(m.act_fn, silu) and _code(cls.forward) == _code(llama.LlamaMLP.forward):
                _swap(m, _mlp_forward)
                report["mlp"].append(name)
            else:
                report["kept"].append(f"{name} ({cls.__name__}: not a SiLU-gated Llama MLP)")
        elif rotary and all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim")):
            if _code(cls.forward) == _code(llama.LlamaAttention.forward):
                _attention_interfaces()  # imported now, not in a traced first call (torch.compile)
                _swap(m, _llama_attention_forward)
                report["rotary"].append(name)
            else:
                report["kept"].append(f"{name} ({cls.__name__}: its own rotary code kept)")
        elif (rotary and cls.__name__.endswith("RotaryEmbedding") and not getattr(m, "_kittens_hook", False)
              and _code(cls.forward) == _code(llama.LlamaRotaryEmbedding.forward)):
            m.register_forward_hook(_rope_hook, with_kwargs=True)
            m._kittens_hook = True
    if attention:
        if getattr(model, "_supports_attention_backend", False):
            register()
            _set_attention(model)
            report["attention"].append(NAME)
        else:
            report["kept"].append(f"attention ({type(model).__name__} does not take transformers' attention "
                                  "interface)")
    for why in report["kept"]:
        warnings.warn(f"kittens.integrations.transformers: kept on PyTorch: {why}", knn.FallbackWarning,
                      stacklevel=2)
    return report
