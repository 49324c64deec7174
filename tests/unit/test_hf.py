"""Hugging Face config.json files load through paraplan.catalog.load_model."""

import json

import pytest

from paraplan.catalog import load_model
from paraplan.catalog.hf import is_hf_config, model_from_hf_config
from paraplan.specs.errors import InputError

LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}
QWEN2_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_act": "silu",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}
GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "activation_function": "gelu_new",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_inner": None,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}
PYTHIA_160M = {
    "architectures": ["GPTNeoXForCausalLM"],
    "model_type": "gpt_neox",
    "hidden_act": "gelu",
    "hidden_size": 768,
    "intermediate_size": 3072,
    "max_position_embeddings": 2048,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}
FALCON_7B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "alibi": False,
    "bias": False,
    "hidden_size": 4544,
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "vocab_size": 65024,
}
FALCON_40B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "alibi": False,
    "bias": False,
    "hidden_size": 8192,
    "new_decoder_architecture": True,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_kv_heads": 8,
    "parallel_attn": True,
    "vocab_size": 65024,
}
FALCON_7B_RW = {
    "architectures": ["RWForCausalLM"],
    "model_type": "RefinedWebModel",
    "hidden_size": 4544,
    "n_head": 71,
    "n_layer": 32,
    "multi_query": True,
    "bias": False,
    "vocab_size": 65024,
}


def write(tmp_path, name, data):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def fields(model, *names):
    return tuple(getattr(model, n) for n in names)


SHAPE = ("layers", "hidden", "heads", "n_kv_heads", "ffn_hidden", "vocab")
STYLE = ("mlp", "norm", "tie_embeddings", "has_bias", "learned_positions")


def test_llama(tmp_path):
    m = load_model(write(tmp_path, "llama-2-7b", LLAMA2_7B))
    assert m.name == "llama-2-7b"
    assert fields(m, *SHAPE) == (32, 4096, 32, 32, 11008, 32000)
    assert fields(m, *STYLE) == ("swiglu", "rmsnorm", False, False, False)
    assert m.max_position == 4096
    assert "llama" in m.source


def test_mistral_gqa(tmp_path):
    m = load_model(write(tmp_path, "mistral-7b", MISTRAL_7B))
    assert fields(m, *SHAPE) == (32, 4096, 32, 8, 14336, 32000)
    assert fields(m, *STYLE) == ("swiglu", "rmsnorm", False, False, False)
    assert (
        m.d_head == 128
        and m.max_position == 32768
        and m.sliding_window == 4096
        and not m.has_qkv_bias
    )


def test_qwen2_tied_with_qkv_bias(tmp_path):
    m = load_model(write(tmp_path, "qwen2-0.5b", QWEN2_05B))
    assert fields(m, *SHAPE) == (24, 896, 14, 2, 4864, 151936)
    assert fields(m, *STYLE) == ("swiglu", "rmsnorm", True, False, False)
    assert m.d_head == 64 and m.has_qkv_bias and m.sliding_window is None


def test_explicit_head_dim_is_kept(tmp_path):
    data = dict(MISTRAL_7B, hidden_size=5120, num_attention_heads=32, head_dim=128)
    m = load_model(write(tmp_path, "wide-heads", data))
    assert m.d_head == 128 and m.q_width == 4096 and m.hidden == 5120


def test_null_head_dim_means_default(tmp_path):
    m = load_model(write(tmp_path, "mistral", dict(MISTRAL_7B, head_dim=None)))
    assert m.head_dim is None and m.d_head == 128


def test_gpt2(tmp_path):
    m = load_model(write(tmp_path, "gpt2", GPT2))
    assert fields(m, *SHAPE) == (12, 768, 12, 12, 3072, 50257)
    assert fields(m, *STYLE) == ("gelu", "layernorm", True, True, True)
    assert m.max_position == 1024


def test_gpt2_explicit_inner(tmp_path):
    m = load_model(write(tmp_path, "gpt2-odd", dict(GPT2, n_inner=2048)))
    assert m.ffn_hidden == 2048


def test_gpt_neox(tmp_path):
    m = load_model(write(tmp_path, "pythia-160m", PYTHIA_160M))
    assert fields(m, *SHAPE) == (12, 768, 12, 12, 3072, 50304)
    assert fields(m, *STYLE) == ("gelu", "layernorm", False, True, False)
    assert m.position_embedding == "rope" and m.max_position == 2048


def test_falcon_multi_query(tmp_path):
    m = load_model(write(tmp_path, "falcon-7b", FALCON_7B))
    assert fields(m, *SHAPE) == (32, 4544, 71, 1, 4 * 4544, 65024)
    assert fields(m, *STYLE) == ("gelu", "layernorm", True, False, False)
    assert m.d_head == 64


def test_falcon_new_decoder_architecture(tmp_path):
    m = load_model(write(tmp_path, "falcon-40b", FALCON_40B))
    assert fields(m, *SHAPE) == (60, 8192, 128, 8, 4 * 8192, 65024)


def test_falcon_refinedweb_keys(tmp_path):
    m = load_model(write(tmp_path, "falcon-7b-rw", FALCON_7B_RW))
    assert fields(m, *SHAPE) == (32, 4544, 71, 1, 4 * 4544, 65024)


def test_falcon_ffn_hidden_size_and_untied(tmp_path):
    data = dict(FALCON_40B, ffn_hidden_size=20480, tie_word_embeddings=False, multi_query=False)
    m = load_model(write(tmp_path, "falcon-x", data))
    assert m.ffn_hidden == 20480 and m.tie_embeddings is False


def test_falcon_without_multi_query_has_full_heads(tmp_path):
    m = load_model(
        write(
            tmp_path,
            "falcon-mha",
            dict(FALCON_7B, hidden_size=4096, num_attention_heads=32, multi_query=False),
        )
    )
    assert m.n_kv_heads == 32


def test_yaml_hf_config_also_works(tmp_path):
    path = tmp_path / "llama.yaml"
    path.write_text(
        "model_type: llama\nnum_hidden_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\n"
        "intermediate_size: 128\nvocab_size: 1000\n"
    )
    m = load_model(str(path))
    assert fields(m, *SHAPE) == (2, 64, 4, 4, 128, 1000)


def test_family_inferred_without_model_type(tmp_path):
    gpt2 = {k: v for k, v in GPT2.items() if k not in ("model_type", "architectures")}
    assert load_model(write(tmp_path, "anon-gpt2", gpt2)).mlp == "gelu"
    llama = {k: v for k, v in LLAMA2_7B.items() if k != "model_type"}
    assert load_model(write(tmp_path, "arch-llama", llama)).mlp == "swiglu"


def test_text_config_is_unwrapped():
    data = {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "text_config": LLAMA2_7B,
    }
    assert model_from_hf_config(data, name="llava").hidden == 4096


def test_is_hf_config():
    for data in (LLAMA2_7B, MISTRAL_7B, QWEN2_05B, GPT2, PYTHIA_160M, FALCON_7B, FALCON_7B_RW):
        assert is_hf_config(data)
    assert is_hf_config({"n_embd": 768})
    assert not is_hf_config(
        {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 1000}
    )
    assert not is_hf_config([1, 2])


def test_our_own_json_schema_still_loads(tmp_path):
    m = load_model(
        write(
            tmp_path,
            "tiny",
            {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 1000},
        )
    )
    assert m.name == "tiny" and m.layers == 2


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (LLAMA2_7B, "hidden_size"),
        (LLAMA2_7B, "num_hidden_layers"),
        (QWEN2_05B, "intermediate_size"),
        (GPT2, "n_embd"),
        (GPT2, "vocab_size"),
        (PYTHIA_160M, "num_attention_heads"),
        (FALCON_7B, "num_hidden_layers"),
        (FALCON_7B, "hidden_size"),
    ],
)
def test_missing_key_names_the_field(tmp_path, config, key):
    data = {k: v for k, v in config.items() if k != key}
    with pytest.raises(InputError) as info:
        load_model(write(tmp_path, "broken", data))
    message = str(info.value)
    assert message.startswith(f"model.{key}: missing; a Hugging Face ")
    assert "needs" in message and "\n" not in message


def test_missing_key_uses_given_field_prefix():
    data = {k: v for k, v in LLAMA2_7B.items() if k != "hidden_size"}
    with pytest.raises(InputError, match=r"^models\[1\]\.hidden_size: missing"):
        model_from_hf_config(data, name="x", field="models[1]")


def test_unsupported_model_type():
    with pytest.raises(
        InputError, match=r"^model\.model_type: 'bert' is not supported; allowed: llama"
    ):
        model_from_hf_config({"model_type": "bert", "hidden_size": 768}, name="bert")


def test_alibi_rejected():
    with pytest.raises(InputError, match=r"^model\.alibi"):
        model_from_hf_config(dict(FALCON_7B, alibi=True), name="falcon")


def test_invalid_shape_goes_through_pydantic():
    with pytest.raises(InputError) as info:
        model_from_hf_config(dict(MISTRAL_7B, num_key_value_heads=5), name="bad")
    message = str(info.value)
    assert message.startswith("model") and "kv_heads=5 must divide heads=32" in message
    with pytest.raises(
        InputError, match=r"^model\.hidden_size: 'big' is not allowed; must be an integer$"
    ):
        model_from_hf_config(dict(LLAMA2_7B, hidden_size="big"), name="bad")
    with pytest.raises(InputError, match=r"^model\.layers: "):
        model_from_hf_config(dict(LLAMA2_7B, num_hidden_layers=0), name="bad")
