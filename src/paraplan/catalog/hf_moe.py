"""Read a mixture-of-experts Hugging Face ``config.json`` as a :class:`~paraplan.specs.model.ModelSpec`.

``paraplan.catalog.hf.model_from_hf_config`` hands a config here when :func:`moe_family` recognises it
(``model_type``, else ``architectures``). Mappings, HF key -> ModelSpec field, beyond the Llama-like
ones of ``paraplan.catalog.hf`` (num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
head_dim, vocab_size, tie_word_embeddings, max_position_embeddings; SwiGLU, RMSNorm, rotary):

Mixtral (``mixtral``)
    num_local_experts -> experts, num_experts_per_tok -> top_k, intermediate_size -> moe_ffn_hidden
    (and ffn_hidden, unused), sliding_window (when not null) -> sliding_window on every layer.
Qwen2-MoE / Qwen3-MoE (``qwen2_moe``, ``qwen3_moe``)
    num_experts (num_local_experts, the name transformers 5.x writes) -> experts, num_experts_per_tok -> top_k, moe_intermediate_size -> moe_ffn_hidden,
    shared_expert_intermediate_size (Qwen2-MoE; when > 0) -> shared_experts 1 and
    shared_ffn_hidden, decoder_sparse_step and mlp_only_layers -> dense_layers /
    moe_layer_interval when the MoE layers they name fit that pattern. The shared expert's
    sigmoid gate (h parameters) and q/k/v biases (Qwen2) or per-head q/k norms (Qwen3) are left out.
DeepSeek-V2 / V3, Kimi-K2 (``deepseek_v2``, ``deepseek_v3``, ``kimi_k2``)
    n_routed_experts -> experts, num_experts_per_tok -> top_k, moe_intermediate_size ->
    moe_ffn_hidden, n_shared_experts -> shared_experts (shared_ffn_hidden = n_shared_experts ·
    moe_intermediate_size), first_k_dense_replace -> dense_layers, moe_layer_freq ->
    moe_layer_interval (when the pattern fits), intermediate_size -> ffn_hidden, attention_type mla
    with q_lora_rank (null allowed), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
    num_nextn_predict_layers -> mtp_layers, n_group / topk_group -> router_groups /
    router_group_topk when topk_group < n_group and topk_method is not ``greedy`` (group-limited
    routing: where tokens go, not the work; it prices the deduplicated dispatch,
    cost.moe.experts_units_hit).
GPT-OSS (``gpt_oss``)
    num_local_experts -> experts, num_experts_per_tok -> top_k, intermediate_size ->
    moe_ffn_hidden, head_dim, attention_bias -> bias, sliding_window and layer_types ->
    sliding_window / sliding_window_pattern when the full-attention layers are every n-th.

Llama 4 (``llama4_text``; the multimodal ``llama4`` config is read from its ``text_config``)
    num_local_experts -> experts, num_experts_per_tok -> top_k, intermediate_size -> moe_ffn_hidden and
    the one shared expert's width (shared_experts 1), intermediate_size_mlp -> ffn_hidden (the dense
    layers'), moe_layers or interleave_moe_layer_step -> dense_layers / moe_layer_interval,
    attention_chunk_size -> sliding_window with window_kind chunked on the rope layers (``no_rope_layers``
    1, or ``layer_types`` chunked_attention), the NoPE layers full (sliding_window_pattern). Llama 4's
    qk-norm has no parameters; the vision encoder is not part of the model paraplan trains and is left out.

Anything these fields cannot state (a sliding-window split Qwen's max_window_layers describes,
irregular MoE or window layer patterns, a missing key) raises
:class:`~paraplan.specs.errors.InputError` naming the key: an MoE config is never read as dense.
"""

from __future__ import annotations

from pydantic import ValidationError

from paraplan.catalog.hf_layers import (
    full_layers_from_types,
    getter,
    llama_fields,
    window_fields,
    window_pattern,
)
from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.specs.model import ModelSpec

MOE_TYPES = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "gpt_oss",
    "llama4_text",
)
_ARCH = {
    "Llama4": "llama4_text",
    "Mixtral": "mixtral",
    "Qwen2Moe": "qwen2_moe",
    "Qwen3Moe": "qwen3_moe",
    "DeepseekV2": "deepseek_v2",
    "DeepseekV3": "deepseek_v3",
    "GptOss": "gpt_oss",
}


def moe_family(data: dict) -> str | None:
    """The supported MoE family of a config dict (model_type, else architectures), or None."""
    model_type = data.get("model_type")
    if model_type in MOE_TYPES:
        return model_type
    if model_type is not None:
        return None
    for arch in data.get("architectures") or ():
        for prefix, family in _ARCH.items():
            if isinstance(arch, str) and arch.startswith(prefix + "For"):
                return family
    return None


_KINDS = {
    "tie_word_embeddings": bool,
    "no_rope_layers": list,
    "moe_layers": list,
    "use_sliding_window": bool,
    "attention_bias": bool,
    "mlp_only_layers": list,
    "layer_types": list,
}


def _interval_for(moe_set: set[int], layers: int, field: str, key: str) -> tuple[int, int]:
    """(dense_layers, moe_layer_interval) whose rule (ModelSpec: layer i ≥ dense_layers is MoE when
    (i − dense_layers + 1) % interval == 0) names exactly ``moe_set``; InputError otherwise."""
    if not moe_set:
        raise InputError(
            f"{field}.{key}: the config names no MoE layer; describe a dense model instead"
        )
    first = min(moe_set)
    for dense in range(first + 1):
        for interval in range(1, layers + 1):
            rule = {i for i in range(dense, layers) if (i - dense + 1) % interval == 0}
            if rule == moe_set:
                return dense, interval
    raise InputError(
        f"{field}.{key}: MoE layers {sorted(moe_set)[:6]}... do not follow 'dense_layers then every n-th'; "
        "paraplan cannot represent this pattern"
    )


def _local_experts(get) -> dict:
    """The common fields and the experts of Mixtral and gpt-oss configs: num_local_experts experts,
    each as wide as the dense MLP (intermediate_size)."""
    width = get("intermediate_size")
    return llama_fields(get) | {
        "ffn_hidden": width,
        "experts": get("num_local_experts"),
        "top_k": get("num_experts_per_tok"),
        "moe_ffn_hidden": width,
    }


def _mixtral(data: dict, get, field: str) -> dict:
    spec = _local_experts(get)
    window = get("sliding_window", default=None)
    if window is not None:
        spec["sliding_window"] = window
    return spec


def _qwen_moe(data: dict, get, field: str, family: str) -> dict:
    layers = get("num_hidden_layers")
    if get("use_sliding_window", default=False):
        raise InputError(
            f"{field}.use_sliding_window: true (windowed layers from max_window_layers) is not representable; allowed: false"
        )
    step = get("decoder_sparse_step", default=1)
    dense_only = set(get("mlp_only_layers", default=[]) or [])
    if not isinstance(layers, int) or not isinstance(step, int) or step < 1:
        raise InputError(f"{field}.decoder_sparse_step: {step!r} must be a positive integer")
    moe_set = {i for i in range(layers) if i not in dense_only and (i + 1) % step == 0}
    dense, interval = _interval_for(
        moe_set, layers, field, "mlp_only_layers" if dense_only else "decoder_sparse_step"
    )
    spec = llama_fields(get) | {
        "ffn_hidden": get("intermediate_size"),
        # num_experts in transformers 4.x, num_local_experts as 5.x saves qwen3_moe (issue 34)
        "experts": get("num_experts", "num_local_experts"),
        "top_k": get("num_experts_per_tok"),
        "moe_ffn_hidden": get("moe_intermediate_size"),
        "dense_layers": dense,
        "moe_layer_interval": interval,
        "qk_norm": family == "qwen3_moe",  # Qwen3MoeAttention's q_norm / k_norm
    }
    shared = get("shared_expert_intermediate_size", default=0)
    if shared:
        spec |= {"shared_experts": 1, "shared_ffn_hidden": shared}
    return spec


def _deepseek(data: dict, get, field: str, family: str) -> dict:
    layers = get("num_hidden_layers")
    first_dense = get("first_k_dense_replace", default=0)
    freq = get("moe_layer_freq", default=1)
    if (
        not all(isinstance(v, int) and not isinstance(v, bool) for v in (layers, first_dense, freq))
        or freq < 1
    ):
        raise InputError(
            f"{field}.moe_layer_freq: {freq!r} must be a positive integer (with integer first_k_dense_replace)"
        )
    # DeepseekV3/V2 modelling: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0
    moe_set = {i for i in range(layers) if i >= first_dense and i % freq == 0}
    dense, interval = _interval_for(moe_set, layers, field, "moe_layer_freq")
    width = get("moe_intermediate_size")
    shared = get("n_shared_experts", default=0)
    spec = llama_fields(get) | {
        "ffn_hidden": get("intermediate_size"),
        "experts": get("n_routed_experts"),
        "top_k": get("num_experts_per_tok"),
        "moe_ffn_hidden": width,
        "dense_layers": dense,
        "moe_layer_interval": interval,
        "attention_type": "mla",
        "q_lora_rank": get("q_lora_rank", default=None),
        "kv_lora_rank": get("kv_lora_rank"),
        "qk_nope_head_dim": get("qk_nope_head_dim"),
        "qk_rope_head_dim": get("qk_rope_head_dim"),
        "v_head_dim": get("v_head_dim"),
        "mtp_layers": get("num_nextn_predict_layers", default=0),
    }
    spec.pop("head_dim", None)
    groups, used = get("n_group", default=None), get("topk_group", default=None)
    # the remote DeepSeek-V2 gate's "greedy" top-k ignores the groups (modeling_deepseek.py MoEGate)
    greedy = get("topk_method", default=None, kind=str) == "greedy"
    if groups is not None and used is not None and 1 <= used < groups and not greedy:
        spec |= {"router_groups": groups, "router_group_topk": used}
    if shared:
        spec |= {
            "shared_experts": shared,
            "shared_ffn_hidden": shared * width if isinstance(width, int) else width,
        }
    return spec


def _gpt_oss(data: dict, get, field: str) -> dict:
    layers = get("num_hidden_layers")
    spec = _local_experts(get) | {
        "bias": get("attention_bias", default=True),
        "dropout": False,
        "glu_clamp": get(
            "swiglu_limit", default=7.0, kind=float
        ),  # GptOssConfig default (transformers 4.55)
    }
    return spec | window_fields(get, layers, field, 0)


def _llama4(data: dict, get, field: str) -> dict:
    """Llama 4 (module docstring): MoE layers from ``moe_layers`` or every ``interleave_moe_layer_step``-th,
    chunked-attention layers from ``layer_types`` or ``no_rope_layers`` (1 = rope and chunked, 0 = NoPE and
    global; default every 4th global), as Llama4TextConfig derives them (transformers 4.51)."""
    layers = get("num_hidden_layers")
    if not isinstance(layers, int):
        raise InputError(f"{field}.num_hidden_layers: {layers!r} must be an integer")
    step = get("interleave_moe_layer_step", default=1)
    named = get("moe_layers", default=None)
    moe_set = set(named) if named else set(range(step - 1, layers, max(step, 1)))
    dense, interval = _interval_for(moe_set, layers, field, "moe_layers")
    width = get("intermediate_size")
    spec = llama_fields(get) | {
        "ffn_hidden": get("intermediate_size_mlp"),
        "experts": get("num_local_experts"),
        "top_k": get("num_experts_per_tok"),
        "moe_ffn_hidden": width,
        "shared_experts": 1,
        "shared_ffn_hidden": width,
        "dense_layers": dense,
        "moe_layer_interval": interval,
        "bias": get("attention_bias", default=False),
    }
    kinds, rope = get("layer_types", default=None), get("no_rope_layers", default=None)
    if kinds is not None:
        full = full_layers_from_types(kinds, layers, field)
    elif rope:
        if len(rope) != layers or not all(v in (0, 1) for v in rope):
            raise InputError(
                f"{field}.no_rope_layers: must hold 0 or 1 for each of the {layers} layers"
            )
        full = {i for i, v in enumerate(rope) if v == 0}
    else:
        every = get("no_rope_layer_interval", default=4)
        full = {i for i in range(layers) if (i + 1) % every == 0}
    key = "layer_types" if kinds is not None else "no_rope_layers"
    pattern = window_pattern(full, layers, field, key)
    chunk = get("attention_chunk_size", default=None)
    if pattern is not None and chunk is not None:
        spec |= {
            "sliding_window": chunk,
            "sliding_window_pattern": pattern,
            "window_kind": "chunked",
        }
    return spec


def model_from_hf_moe(data: dict, family: str, name: str, field: str = "model") -> ModelSpec:
    """Map a supported MoE Hugging Face config dict to a validated ModelSpec named ``name``."""
    get = getter(data, field, family, kinds=_KINDS)
    if family == "mixtral":
        spec = _mixtral(data, get, field)
    elif family in ("qwen2_moe", "qwen3_moe"):
        spec = _qwen_moe(data, get, field, family)
    elif family in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        spec = _deepseek(data, get, field, family)
    elif family == "llama4_text":
        spec = _llama4(data, get, field)
    else:
        spec = _gpt_oss(data, get, field)
    spec["name"] = name
    spec["source"] = (
        f"Hugging Face config.json (model_type {data.get('model_type', family)}, read by paraplan.catalog.hf_moe)"
    )
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field, ModelSpec) from None
