"""Per-layer attention patterns of Hugging Face configs, and the Gemma family (dense).

Which layers use the sliding window, read from a config the way ``transformers`` reads it:

- ``layer_types`` (transformers >= 4.53 and 5.x): one of ``sliding_attention`` / ``chunked_attention`` /
  ``full_attention`` per layer;
- else the family's rule in older releases: Gemma 2 alternates (layer i windowed when i is even,
  ``Gemma2DecoderLayer.is_sliding = not bool(layer_idx % 2)``, transformers 4.42), Gemma 3 keeps every
  ``sliding_window_pattern``-th layer full (``is_sliding = bool((layer_idx + 1) % sliding_window_pattern)``,
  transformers 4.50; ``_sliding_window_pattern`` in 5.x), default 6.

:func:`window_pattern` turns the set of full-attention layers into ModelSpec's ``sliding_window_pattern``
(0: every layer windowed; n: every n-th layer full); any other pattern is refused naming the key.

Gemma (``gemma``), Gemma 2 (``gemma2``), Gemma 3 text (``gemma3_text``; the multimodal ``gemma3``
config is read from its ``text_config``), HF key -> ModelSpec field: num_hidden_layers -> layers,
hidden_size -> hidden, num_attention_heads -> heads, num_key_value_heads -> kv_heads, head_dim ->
head_dim (default 256, GemmaConfig), intermediate_size -> ffn_hidden, vocab_size -> vocab,
tie_word_embeddings -> tie_embeddings (default true: Gemma ties the LM head to the embedding),
attention_bias -> qkv_bias, sliding_window + the layer pattern above -> sliding_window /
sliding_window_pattern (Gemma 2 and 3). Gemma 3 keys a config leaves out take Gemma3TextConfig's defaults
(GEMMA3_DEFAULTS), as transformers does. The MLP is gated (GeGLU, ``gelu_pytorch_tanh``: two input
projections like SwiGLU, so mlp swiglu gives its parameters and FLOPs), RMSNorm, rotary positions.
Left out, with their size: Gemma 2/3's extra post-attention and post-MLP norms (2h parameters per
layer) and Gemma 3's per-head q/k norms (2·head_dim), 0.01 % of the parameters; the attention-logit
soft-cap of Gemma 2 (``attn_logit_softcapping``: tanh on each score, fused into FlashAttention 2.6+'s
kernel, ``softcap`` argument, so no extra pass over the scores) and the final-logit soft-cap (one
elementwise tanh over the logits, beside the loss's own passes over them).
"""

from __future__ import annotations

from typing import Any

from paraplan.specs.errors import InputError

GEMMA_TYPES = ("gemma", "gemma2", "gemma3_text")
LAYER_KINDS = ("sliding_attention", "chunked_attention", "full_attention")
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3_text": 6}  # Gemma 2 alternates; Gemma 3: 5 local, 1 global
# Gemma3TextConfig's defaults (transformers 4.50, configuration_gemma3.py), which transformers fills in for the keys
# a saved config leaves out: the text_config of the multimodal Gemma 3 4B checkpoint names only its widths
GEMMA3_DEFAULTS = {
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 262_208,
    "sliding_window": 4096,
}


_KIND_TEXT = {
    int: "an integer",
    bool: "true or false",
    float: "a number",
    list: "a list",
    str: "a string",
}


def getter(data: dict, field: str, family: str, required: tuple[str, ...] = (), kinds=None):
    """``get(*keys, default=..., kind=None)``: the first key present (not null), of type ``kind``
    exactly (no coercion; a float ``kind`` also takes integers; None: ``kinds[key]``, else int);
    InputError naming the key otherwise (a missing one: the family's ``required`` keys)."""
    kinds = kinds or {}

    def get(*keys: str, default: Any = ..., kind: type | None = None) -> Any:
        for key in keys:
            if key in data and data[key] is not None:
                value, want = data[key], kind or kinds.get(key, int)
                ok = (
                    isinstance(value, bool)
                    if want is bool
                    else (
                        not isinstance(value, bool)
                        and isinstance(value, (int, float) if want is float else want)
                    )
                )
                if not ok:
                    raise InputError(
                        f"{field}.{key}: {value!r} is not allowed; must be {_KIND_TEXT[want]}"
                    )
                return value
        if default is ...:
            needs = ", ".join(required) or " or ".join(keys)
            raise InputError(
                f"{field}.{keys[0]}: missing; a Hugging Face {family} config needs {needs}"
            )
        return default

    return get


def given(get, **keys: str) -> dict:
    """{field: get(key)} for each ``field=key`` the config gives (present and not null)."""
    return {
        field: value for field, key in keys.items() if (value := get(key, default=None)) is not None
    }


def llama_fields(get) -> dict:
    """The fields Llama-like configs give alike (hf's Llama family, hf_moe's MoE families): the shape,
    SwiGLU, RMSNorm, rotary positions, no biases, untied unless tie_word_embeddings, and head_dim /
    max_position when given."""
    return {
        "layers": get("num_hidden_layers"),
        "hidden": get("hidden_size"),
        "heads": get("num_attention_heads"),
        "kv_heads": get("num_key_value_heads", default=None),
        "vocab": get("vocab_size"),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "tie_embeddings": get("tie_word_embeddings", default=False, kind=bool),
        "bias": False,
        "position_embedding": "rope",
    } | given(get, head_dim="head_dim", max_position="max_position_embeddings")


def full_layers_from_types(kinds, layers: int, field: str) -> set[int]:
    """The 0-based full-attention layers a ``layer_types`` list names; InputError unless it lists one
    of LAYER_KINDS for each of the ``layers`` layers."""
    if (
        not isinstance(kinds, list)
        or len(kinds) != layers
        or not all(isinstance(k, str) and k in LAYER_KINDS for k in kinds)
    ):
        raise InputError(
            f"{field}.layer_types: must list one of {', '.join(LAYER_KINDS)} for each of the {layers} layers"
        )
    return {i for i, k in enumerate(kinds) if k == "full_attention"}


def window_pattern(full: set[int], layers: int, field: str, key: str) -> int | None:
    """ModelSpec.sliding_window_pattern for the full-attention layers ``full`` of ``layers``: None when
    every layer is full (no window), 0 when none is, n when they are exactly every n-th layer
    (layer i full when (i + 1) % n == 0); InputError naming ``key`` for any other pattern."""
    if len(full) == layers:
        return None
    if not full:
        return 0
    for n in range(2, layers + 1):
        if full == {i for i in range(layers) if (i + 1) % n == 0}:
            return n
    raise InputError(
        f"{field}.{key}: full-attention layers {sorted(full)[:6]}... are not every n-th layer; "
        "paraplan cannot represent this pattern"
    )


def window_fields(
    get, layers: int, field: str, rule_pattern: int | None, window_default: int | None = None
) -> dict:
    """``sliding_window`` / ``sliding_window_pattern`` of a config whose windowed layers ``layer_types``
    names, or (without it) that the family's rule makes every ``rule_pattern``-th layer full (0: every
    layer windowed; None: no window) when ``sliding_window`` (default ``window_default``) is set."""
    window = get("sliding_window", default=window_default)
    kinds = get("layer_types", default=None, kind=list)
    if kinds is not None:
        pattern = window_pattern(
            full_layers_from_types(kinds, layers, field), layers, field, "layer_types"
        )
    else:
        pattern = rule_pattern if window is not None else None
    if pattern is None:
        return {}
    if window is None:
        raise InputError(f"{field}.sliding_window: missing; layer_types names windowed layers")
    return {"sliding_window": window} | ({"sliding_window_pattern": pattern} if pattern else {})


def gemma(get, family: str, field: str) -> dict:
    """The ModelSpec fields of a Gemma, Gemma 2 or Gemma 3 text config (module docstring)."""
    defaults = GEMMA3_DEFAULTS if family == "gemma3_text" else {}
    layers = get("num_hidden_layers")
    spec = {
        "layers": layers,
        "hidden": get("hidden_size"),
        "heads": get("num_attention_heads", default=defaults.get("num_attention_heads", ...)),
        "kv_heads": get("num_key_value_heads", default=defaults.get("num_key_value_heads")),
        "head_dim": get("head_dim", default=256),
        "ffn_hidden": get("intermediate_size"),
        "vocab": get("vocab_size", default=defaults.get("vocab_size", ...)),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "tie_embeddings": get("tie_word_embeddings", default=True, kind=bool),
        "bias": False,
        "qkv_bias": get("attention_bias", default=False, kind=bool),
        "qk_norm": family == "gemma3_text",  # Gemma3Attention's q_norm / k_norm
        "dropout": get("attention_dropout", default=0.0, kind=float) > 0,
        "position_embedding": "rope",
    }
    spec |= given(get, max_position="max_position_embeddings")
    if family == "gemma" or not isinstance(layers, int):
        return spec
    rule = _DEFAULT_PATTERN[family]
    if family == "gemma3_text":
        rule = get("sliding_window_pattern", "_sliding_window_pattern", default=rule)
        if rule < 1:
            raise InputError(
                f"{field}.sliding_window_pattern: {rule} is not allowed; must be at least 1"
            )
        rule = window_pattern(
            {i for i in range(layers) if (i + 1) % rule == 0},
            layers,
            field,
            "sliding_window_pattern",
        )
    return spec | window_fields(get, layers, field, rule, defaults.get("sliding_window"))
