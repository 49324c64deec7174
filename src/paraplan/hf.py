"""Read a Hugging Face ``config.json`` as a :class:`~paraplan.specs.model.ModelSpec`.

``paraplan.catalog.load_model("path/to/config.json")`` calls :func:`is_hf_config` on the parsed
file and, when it is one, :func:`model_from_hf_config`. The family is taken from ``model_type``
(else from ``architectures``, else from the keys present). Mappings, HF key -> ModelSpec field:

Llama, Mistral, Qwen2 (``model_type`` llama / mistral / qwen2; a config without ``model_type``
whose keys include hidden_size and intermediate_size is read the same way)
    num_hidden_layers -> layers, hidden_size -> hidden, num_attention_heads -> heads,
    num_key_value_heads -> kv_heads (default: heads), head_dim -> head_dim (when given and not
    null), intermediate_size -> ffn_hidden, vocab_size -> vocab, tie_word_embeddings ->
    tie_embeddings (default false), max_position_embeddings -> max_position (when given).
    mlp swiglu (the gated MLP; ``hidden_act`` only names its activation, silu for all three),
    norm rmsnorm, position_embedding rope, bias false. Qwen2 has biases on the q/k/v projections
    only; ModelSpec's ``bias`` is all-or-nothing, so they are left out (3·(a+2a_kv)·d_head
    parameters per layer, negligible).

GPT-2 (``model_type`` gpt2)
    n_layer -> layers, n_embd -> hidden, n_head -> heads, n_inner -> ffn_hidden (null or absent:
    4·n_embd), vocab_size -> vocab, n_positions -> max_position (default 1024).
    mlp gelu, norm layernorm, bias true, learned positions, tied embeddings (GPT-2 always ties
    the LM head to the token embedding).

GPT-NeoX (``model_type`` gpt_neox, e.g. Pythia, GPT-NeoX-20B)
    num_hidden_layers -> layers, hidden_size -> hidden, num_attention_heads -> heads,
    intermediate_size -> ffn_hidden, vocab_size -> vocab, tie_word_embeddings ->
    tie_embeddings (default false), max_position_embeddings -> max_position (when given).
    mlp gelu, norm layernorm, bias true, rope. ``rotary_pct`` (partial rotary) and
    ``use_parallel_residual`` do not change parameter or FLOP counts and are ignored.

Falcon (``model_type`` falcon, or the older RefinedWeb / RefinedWebModel)
    num_hidden_layers or n_layer -> layers, hidden_size -> hidden, num_attention_heads or
    n_head -> heads. kv_heads: with ``new_decoder_architecture`` true, num_kv_heads (or n_head_kv);
    otherwise 1 when ``multi_query`` is true (the FalconConfig default), else heads.
    ffn_hidden_size -> ffn_hidden (default 4·hidden), vocab_size -> vocab, tie_word_embeddings
    -> tie_embeddings (default true), ``bias`` -> bias (default false), max_position_embeddings
    -> max_position (when given). mlp gelu, norm layernorm, rope (``alibi: true`` is rejected).
    ``parallel_attn`` (attention and MLP side by side) does not change the counts and is ignored.

Multimodal wrappers that nest the language model under ``text_config`` are read from there.
A missing required key raises :class:`~paraplan.specs.errors.InputError` with one line naming
``{field}.{key}``; a shape ModelSpec rejects is reported through ``input_error_from_pydantic``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.specs.model import ModelSpec

HF_KEYS = (
    "model_type",
    "architectures",
    "hidden_size",
    "n_embd",
    "num_hidden_layers",
    "n_layer",
    "text_config",
)

_LLAMA_LIKE = ("llama", "mistral", "qwen2")
_FALCON = ("falcon", "RefinedWeb", "RefinedWebModel")
SUPPORTED = ("llama", "mistral", "qwen2", "gpt2", "gpt_neox", "falcon")

_ARCH_PREFIX = {
    "Llama": "llama",
    "Mistral": "mistral",
    "Qwen2": "qwen2",
    "GPT2": "gpt2",
    "GPTNeoX": "gpt_neox",
    "Falcon": "falcon",
    "RW": "falcon",
}


def is_hf_config(data: dict) -> bool:
    """True when ``data`` looks like a Hugging Face config.json rather than our ModelSpec schema."""
    if not isinstance(data, dict):
        return False
    return any(key in data for key in HF_KEYS)


def _family(data: dict, field: str) -> str:
    model_type = data.get("model_type")
    if model_type is not None:
        if model_type in _LLAMA_LIKE or model_type in ("gpt2", "gpt_neox"):
            return model_type
        if model_type in _FALCON:
            return "falcon"
        raise InputError(
            f"{field}.model_type: {model_type!r} is not supported; allowed: {', '.join(SUPPORTED)} "
            "(or describe the model with paraplan's own fields)"
        )
    for arch in data.get("architectures") or ():
        for prefix, family in _ARCH_PREFIX.items():
            if isinstance(arch, str) and arch.startswith(prefix):
                return family
    if "n_embd" in data:
        return "gpt2"
    if "hidden_size" in data and "intermediate_size" in data:
        return "llama"
    raise InputError(
        f"{field}.model_type: missing and the family cannot be inferred; allowed: {', '.join(SUPPORTED)}"
    )


def _getter(data: dict, field: str, family: str, required: tuple[str, ...]):
    def get(*keys: str, default: Any = ...) -> Any:
        for key in keys:
            if key in data and data[key] is not None:
                return data[key]
        if default is ...:
            raise InputError(
                f"{field}.{keys[0]}: missing; a Hugging Face {family} config needs {', '.join(required)}"
            )
        return default

    return get


def _llama_like(data: dict, get) -> dict:
    spec = {
        "layers": get("num_hidden_layers"),
        "hidden": get("hidden_size"),
        "heads": get("num_attention_heads"),
        "kv_heads": get("num_key_value_heads", default=None),
        "ffn_hidden": get("intermediate_size"),
        "vocab": get("vocab_size"),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "tie_embeddings": bool(get("tie_word_embeddings", default=False)),
        "bias": False,
        "position_embedding": "rope",
    }
    head_dim = get("head_dim", default=None)
    if head_dim is not None:
        spec["head_dim"] = head_dim
    max_pos = get("max_position_embeddings", default=None)
    if max_pos is not None:
        spec["max_position"] = max_pos
    return spec


def _gpt2(data: dict, get) -> dict:
    hidden = get("n_embd")
    inner = get("n_inner", default=None)
    return {
        "layers": get("n_layer"),
        "hidden": hidden,
        "heads": get("n_head"),
        "ffn_hidden": inner if inner is not None else _times(4, hidden),
        "vocab": get("vocab_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": True,
        "bias": True,
        "position_embedding": "learned",
        "max_position": get("n_positions", "max_position_embeddings", default=1024),
    }


def _gpt_neox(data: dict, get) -> dict:
    spec = {
        "layers": get("num_hidden_layers"),
        "hidden": get("hidden_size"),
        "heads": get("num_attention_heads"),
        "ffn_hidden": get("intermediate_size"),
        "vocab": get("vocab_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": bool(get("tie_word_embeddings", default=False)),
        "bias": True,
        "position_embedding": "rope",
    }
    max_pos = get("max_position_embeddings", default=None)
    if max_pos is not None:
        spec["max_position"] = max_pos
    return spec


def _falcon(data: dict, get, field: str) -> dict:
    if data.get("alibi"):
        raise InputError(f"{field}.alibi: True is not supported; paraplan models rope or learned positions")
    hidden = get("hidden_size")
    heads = get("num_attention_heads", "n_head")
    if data.get("new_decoder_architecture"):
        kv_heads = get("num_kv_heads", "n_head_kv", default=heads)
    elif data.get("multi_query", True):
        kv_heads = 1
    else:
        kv_heads = heads
    spec = {
        "layers": get("num_hidden_layers", "n_layer"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_hidden": get("ffn_hidden_size", default=None) or _times(4, hidden),
        "vocab": get("vocab_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": bool(get("tie_word_embeddings", default=True)),
        "bias": bool(get("bias", default=False)),
        "position_embedding": "rope",
    }
    max_pos = get("max_position_embeddings", default=None)
    if max_pos is not None:
        spec["max_position"] = max_pos
    return spec


def _times(k: int, value: Any) -> Any:
    """k·value for integers; anything else is passed through for ModelSpec to reject."""
    return k * value if isinstance(value, int) and not isinstance(value, bool) else value


_REQUIRED = {
    "llama": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"),
    "gpt2": ("n_layer", "n_embd", "n_head", "vocab_size"),
    "gpt_neox": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"),
    "falcon": ("num_hidden_layers (or n_layer)", "hidden_size", "num_attention_heads (or n_head)", "vocab_size"),
}


def model_from_hf_config(data: dict, name: str, field: str = "model") -> ModelSpec:
    """Map a Hugging Face config dict to a validated ModelSpec named ``name``."""
    if not isinstance(data, dict):
        raise InputError(f"{field}: a Hugging Face config must be a mapping of keys")
    if "hidden_size" not in data and "n_embd" not in data and isinstance(data.get("text_config"), dict):
        data = data["text_config"]
    from paraplan.hf_moe import model_from_hf_moe, moe_family, refuse_other_moe

    moe = moe_family(data)
    if moe is not None:
        return model_from_hf_moe(data, moe, name, field)
    refuse_other_moe(data, field)
    family = _family(data, field)
    required = _REQUIRED["llama" if family in _LLAMA_LIKE else family]
    get = _getter(data, field, family, required)
    if family in _LLAMA_LIKE:
        spec = _llama_like(data, get)
    elif family == "gpt2":
        spec = _gpt2(data, get)
    elif family == "gpt_neox":
        spec = _gpt_neox(data, get)
    else:
        spec = _falcon(data, get, field)
    spec["name"] = name
    spec["source"] = f"Hugging Face config.json (model_type {data.get('model_type', family)})"
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field) from None
