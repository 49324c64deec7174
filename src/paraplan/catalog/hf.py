"""Read a Hugging Face ``config.json`` as a :class:`~paraplan.specs.model.ModelSpec`.

``paraplan.catalog.load_model("path/to/config.json")`` calls :func:`is_hf_config` on the parsed
file and, when it is one, :func:`model_from_hf_config`. The family is taken from ``model_type``
(else from ``architectures``, else from the keys present). Mappings, HF key -> ModelSpec field:

Llama, Mistral, Qwen2, Qwen3, Phi-3 / Phi-4 (``model_type`` llama / mistral / qwen2 / qwen3 / phi3; a
config without ``model_type`` whose keys include hidden_size and intermediate_size is read the same way)
    num_hidden_layers -> layers, hidden_size -> hidden, num_attention_heads -> heads,
    num_key_value_heads -> kv_heads (default: heads), head_dim -> head_dim (when given and not
    null), intermediate_size -> ffn_hidden, vocab_size -> vocab, tie_word_embeddings ->
    tie_embeddings (default false), max_position_embeddings -> max_position (when given).
    mlp swiglu (the gated MLP; ``hidden_act`` only names its activation, silu for all three),
    norm rmsnorm, position_embedding rope, bias false. ``qkv_bias``: true for Qwen2 (biases on the
    q/k/v projections), else Llama's ``attention_bias`` (which also biases the output projection:
    h parameters per layer, left out). ``sliding_window`` -> sliding_window for Mistral when not
    null, and for Qwen2 when ``use_sliding_window`` is true (taken for every layer; Qwen2's
    ``max_window_layers`` keeps the first layers full, so this is a lower bound on their cost).

GPT-2 (``model_type`` gpt2)
    n_layer -> layers, n_embd -> hidden, n_head -> heads, n_inner -> ffn_hidden (null or absent:
    4·n_embd), vocab_size -> vocab, n_positions -> max_position (default 1024),
    activation_function -> activation (default gelu_new, GPT2Config's; a name outside ModelSpec's
    list is left unset, the MLP's one-kernel form). mlp gelu, norm layernorm, bias true, learned positions, tied embeddings (GPT-2 always ties
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

Gemma, Gemma 2, Gemma 3 (``gemma``, ``gemma2``, ``gemma3_text``): paraplan.catalog.hf_layers, which also
reads ``layer_types`` (transformers >= 4.53) for the windowed layers. Keys transformers 5.x renamed
(``rope_parameters`` for ``rope_theta`` / ``rope_scaling``, ``dtype`` for ``torch_dtype``) change no
parameter or FLOP count and are not read.

Multimodal wrappers that nest the language model under ``text_config`` are read from there.
A missing required key raises :class:`~paraplan.specs.errors.InputError` with one line naming
``{field}.{key}``; a shape ModelSpec rejects is reported through ``input_error_from_pydantic``.

Types are strict, as in every paraplan input: a count must be a JSON integer (``"4544"``, ``4544.0``
and ``true`` are refused, naming the Hugging Face key), a flag a JSON boolean (``"false"`` is
refused), a rate a number. Dropout: the model has dropout when any of the config's dropout rates
is above 0 (Llama-like ``attention_dropout``, and Phi-3's ``resid_pdrop`` / ``embd_pdrop``; GPT-2 ``resid_pdrop``, ``embd_pdrop``,
``attn_pdrop``, default 0.1; GPT-NeoX and Falcon ``hidden_dropout``, ``attention_dropout``,
default 0), so no dropout masks are counted when every rate is 0.

Mixture-of-experts configs of the families hf_moe.py reads (Mixtral, Qwen2-MoE / Qwen3-MoE,
DeepSeek-V2/V3, Kimi-K2, GPT-OSS; by model_type, else architectures) are handed to it, with the same
strict types. Refused, with one line saying why: any other mixture-of-experts config (DBRX, Jamba, a
Mistral/Llama config with an expert count, ...), never read as dense; a config whose ``architectures``
name a family not listed above (BERT, T5, Llama 4, ...); a config with neither ``model_type`` nor
``architectures`` unless its keys are unambiguous (GPT-2's ``n_embd``; or hidden_size,
intermediate_size and rms_norm_eps with a SiLU activation and no BERT keys: Llama).
"""

from __future__ import annotations

from typing import Any, get_args

from paraplan.catalog.hf_layers import GEMMA_TYPES, gemma, getter, given, llama_fields
from paraplan.specs.checked import validate_spec
from paraplan.specs.choices import Activation
from paraplan.specs.errors import InputError
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

_LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "phi3")
_FALCON = ("falcon", "RefinedWeb", "RefinedWebModel")
SUPPORTED = _LLAMA_LIKE + GEMMA_TYPES + ("gpt2", "gpt_neox", "falcon")

_ARCH_PREFIX = {  # longest first: a class name is matched by its prefix
    "Llama": "llama",
    "Mistral": "mistral",
    "Qwen2": "qwen2",
    "Qwen3": "qwen3",
    "Phi3": "phi3",
    "Gemma3": "gemma3_text",
    "Gemma2": "gemma2",
    "Gemma": "gemma",
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


# keys that give a config's expert count (Mixtral, Qwen2-MoE / Qwen3-MoE, DeepSeek V2/V3, DBRX, ...)
MOE_KEYS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
)
_MOE_NAMES = ("moe", "mixtral", "deepseek", "dbrx", "jamba", "arctic", "grok")


def _moe_reason(data: dict) -> str | None:
    """Why ``data`` is a mixture-of-experts config (a key or a name), or None for a dense model."""
    for key in MOE_KEYS:
        value = data.get(key)
        if (
            value is not None
            and value is not False
            and value != 0
            and not (key == "num_experts_per_tok" and value == 1)
        ):
            return f"{key}={value!r}"
    archs = data.get("architectures")
    names = [data.get("model_type")] + (archs if isinstance(archs, list) else [])
    for name in names:
        if isinstance(name, str) and any(tag in name.lower() for tag in _MOE_NAMES):
            return repr(name)
    return None


def _supported_moe(data: dict, field: str) -> str | None:
    """The MoE family hf_moe.py reads (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, Kimi-K2, GPT-OSS), or None;
    model_type and architectures are type-checked first (never coerced)."""
    from paraplan.catalog.hf_moe import moe_family

    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError(
            f"{field}.model_type: {model_type!r} is not allowed; must be a string such as 'llama'"
        )
    _architectures(data, field)
    return moe_family(data)


def _refuse_moe(data: dict, field: str) -> None:
    """A mixture-of-experts config of a family hf_moe.py does not read is refused (never read as dense)."""
    reason = _moe_reason(data)
    if reason is not None:
        from paraplan.catalog.hf_moe import MOE_TYPES

        raise InputError(
            f"{field}: a mixture-of-experts config ({reason}) is not supported yet; paraplan reads dense "
            f"{', '.join(SUPPORTED)} configs and the MoE families {', '.join(MOE_TYPES)} "
            "(describe the model with paraplan's own fields to estimate it)"
        )


def _architectures(data: dict, field: str) -> list[str]:
    archs = data.get("architectures")
    if archs is None:
        return []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise InputError(
            f"{field}.architectures: {archs!r} is not allowed; must be a list of class names (strings)"
        )
    return archs


def _family(data: dict, field: str) -> str:
    model_type = data.get("model_type")
    if model_type is not None:
        if not isinstance(model_type, str):
            raise InputError(
                f"{field}.model_type: {model_type!r} is not allowed; must be a string such as 'llama'"
            )
        if model_type in _LLAMA_LIKE + GEMMA_TYPES or model_type in ("gpt2", "gpt_neox"):
            return model_type
        if model_type in _FALCON:
            return "falcon"
        raise InputError(
            f"{field}.model_type: {model_type!r} is not supported; allowed: {', '.join(SUPPORTED)} "
            "(or describe the model with paraplan's own fields)"
        )
    archs = _architectures(data, field)
    for arch in archs:
        for prefix, family in _ARCH_PREFIX.items():
            if arch.startswith(prefix):
                return family
    if archs:
        raise InputError(
            f"{field}.architectures: {archs!r} is not supported; allowed families: {', '.join(SUPPORTED)} "
            "(or describe the model with paraplan's own fields)"
        )
    if "n_embd" in data:
        return "gpt2"
    llama_keys = all(k in data for k in ("hidden_size", "intermediate_size", "rms_norm_eps"))
    if llama_keys and data.get("hidden_act", "silu") == "silu" and "type_vocab_size" not in data:
        return "llama"
    raise InputError(
        f"{field}.model_type: missing and the family cannot be told from the keys; add model_type "
        f"(allowed: {', '.join(SUPPORTED)})"
    )


def _activation(name: str) -> dict:
    """{"activation": name} when ModelSpec knows the transformers activation ``name`` (ACT2FN key), else {}."""
    return {"activation": name} if name in get_args(Activation) else {}


def _has_dropout(get, keys: tuple[str, ...], default: float) -> bool:
    """True when any of the dropout rates ``keys`` (default ``default`` each) is above 0."""
    return any(get(key, default=default, kind=float) > 0 for key in keys)


def _llama_like(data: dict, get, family: str) -> dict:
    spec = llama_fields(get) | {
        "ffn_hidden": get("intermediate_size"),
        "qkv_bias": family == "qwen2" or get("attention_bias", default=False, kind=bool),
        "qk_norm": family == "qwen3",  # Qwen3Attention's q_norm / k_norm
        "dropout": _has_dropout(get, ("attention_dropout", "resid_pdrop", "embd_pdrop"), 0.0),
    }
    window = get("sliding_window", default=None)
    if window is not None and (
        family in ("mistral", "phi3")
        or (family in ("qwen2", "qwen3") and get("use_sliding_window", default=False, kind=bool))
    ):
        spec["sliding_window"] = window
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
        "dropout": _has_dropout(get, ("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1),
        **_activation(get("activation_function", default="gelu_new", kind=str)),
        "position_embedding": "learned",
        "max_position": get("n_positions", "max_position_embeddings", default=1024),
    }


def _gpt_neox(data: dict, get) -> dict:
    return {
        "layers": get("num_hidden_layers"),
        "hidden": get("hidden_size"),
        "heads": get("num_attention_heads"),
        "ffn_hidden": get("intermediate_size"),
        "vocab": get("vocab_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": get("tie_word_embeddings", default=False, kind=bool),
        "bias": True,
    } | _rope_fields(get)


def _falcon(data: dict, get, field: str) -> dict:
    if get("alibi", default=False, kind=bool):
        raise InputError(
            f"{field}.alibi: True is not supported; paraplan models rope or learned positions"
        )
    hidden = get("hidden_size")
    heads = get("num_attention_heads", "n_head")
    if get("new_decoder_architecture", default=False, kind=bool):
        kv_heads = get("num_kv_heads", "n_head_kv", default=heads)
    elif get("multi_query", default=True, kind=bool):
        kv_heads = 1
    else:
        kv_heads = heads
    return {
        "layers": get("num_hidden_layers", "n_layer"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_hidden": get("ffn_hidden_size", default=None) or _times(4, hidden),
        "vocab": get("vocab_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": get("tie_word_embeddings", default=True, kind=bool),
        "bias": get("bias", default=False, kind=bool),
    } | _rope_fields(get)


def _rope_fields(get) -> dict:
    """The fields GPT-NeoX and Falcon configs give alike: dropout from hidden_dropout /
    attention_dropout, rope positions, and max_position when the config names one."""
    fields = {
        "dropout": _has_dropout(get, ("hidden_dropout", "attention_dropout"), 0.0),
        "position_embedding": "rope",
    }
    return fields | given(get, max_position="max_position_embeddings")


def _times(k: int, value: Any) -> Any:
    """k·value for integers; anything else is passed through for ModelSpec to reject."""
    return k * value if isinstance(value, int) and not isinstance(value, bool) else value


_REQUIRED = {
    "llama": (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
    ),
    "gpt2": ("n_layer", "n_embd", "n_head", "vocab_size"),
    "gpt_neox": (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
    ),
    "falcon": (
        "num_hidden_layers (or n_layer)",
        "hidden_size",
        "num_attention_heads (or n_head)",
        "vocab_size",
    ),
}


def model_from_hf_config(data: dict, name: str, field: str = "model") -> ModelSpec:
    """Map a Hugging Face config dict to a validated ModelSpec named ``name``."""
    if not isinstance(data, dict):
        raise InputError(f"{field}: a Hugging Face config must be a mapping of keys")
    if (
        "hidden_size" not in data
        and "n_embd" not in data
        and isinstance(data.get("text_config"), dict)
    ):
        _refuse_moe(data, field)
        data = data["text_config"]
        field = f"{field}.text_config"
    moe = _supported_moe(data, field)
    if moe is not None:
        from paraplan.catalog.hf_moe import model_from_hf_moe

        return model_from_hf_moe(data, moe, name, field)
    _refuse_moe(data, field)
    family = _family(data, field)
    required = _REQUIRED["llama" if family in _LLAMA_LIKE + GEMMA_TYPES else family]
    get = getter(data, field, family, required)
    if family in _LLAMA_LIKE:
        spec = _llama_like(data, get, family)
    elif family in GEMMA_TYPES:
        spec = gemma(get, family, field)
    elif family == "gpt2":
        spec = _gpt2(data, get)
    elif family == "gpt_neox":
        spec = _gpt_neox(data, get)
    else:
        spec = _falcon(data, get, field)
    spec["name"] = name
    spec["source"] = f"Hugging Face config.json (model_type {data.get('model_type', family)})"
    return validate_spec(ModelSpec, spec, field)
