"""Hugging Face config.json: strict types, refused families (MoE, BERT, Gemma), dropout rates,
checkpoint directories and standard input (issues 12 and 13)."""

from __future__ import annotations

import io
import json
import sys

import pytest

from paraplan.catalog import load_model
from paraplan.catalog.hf import model_from_hf_config
from paraplan.specs.errors import InputError

from test_hf import FALCON_7B, GPT2, LLAMA2_7B, MISTRAL_7B, PYTHIA_160M, QWEN2_05B


def refused(data: dict, pattern: str) -> str:
    with pytest.raises(InputError, match=pattern) as info:
        model_from_hf_config(data, name="x")
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("hidden_size", "4096", "an integer"),
        ("hidden_size", 4096.0, "an integer"),
        ("num_hidden_layers", True, "an integer"),
        ("vocab_size", 1e30, "an integer"),
        ("tie_word_embeddings", "false", "true or false"),
        ("tie_word_embeddings", 0, "true or false"),
        ("attention_dropout", "0.1", "a number"),
    ],
)
def test_types_are_not_coerced(key, value, kind):
    refused(dict(LLAMA2_7B, **{key: value}), rf"^model\.{key}: .* is not allowed; must be {kind}$")


def test_huge_integer_is_refused_with_its_bound():
    refused(
        dict(LLAMA2_7B, num_hidden_layers=10**30), r"^model\.layers: .* must be at most 16,777,216$"
    )


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (
            dict(MISTRAL_7B, num_local_experts=8),
            "num_local_experts=8",
        ),  # model_type mistral with experts
        (dict(LLAMA2_7B, model_type="dbrx", architectures=["DbrxForCausalLM"]), "dbrx"),
        (
            {
                k: v
                for k, v in dict(
                    LLAMA2_7B, architectures=["JambaForCausalLM"], num_experts=16
                ).items()
                if k != "model_type"
            },
            "num_experts=16",
        ),
    ],
)
def test_unsupported_mixture_of_experts_is_refused(data, why):
    message = refused(data, r"^model: a mixture-of-experts config")
    assert why in message and "not supported yet" in message


@pytest.mark.parametrize(
    ("data", "missing"),
    [
        (
            {
                k: v
                for k, v in dict(
                    MISTRAL_7B, architectures=["MixtralForCausalLM"], num_local_experts=8
                ).items()
                if k != "model_type"
            },
            "num_experts_per_tok",
        ),
        (
            {
                k: v
                for k, v in dict(QWEN2_05B, architectures=["Qwen2MoeForCausalLM"]).items()
                if k != "model_type"
            },
            "num_experts",
        ),
        (
            dict(
                LLAMA2_7B,
                model_type="deepseek_v3",
                architectures=["DeepseekV3ForCausalLM"],
                n_routed_experts=256,
            ),
            "moe_intermediate_size",
        ),
    ],
)
def test_supported_mixture_of_experts_goes_to_hf_moe(data, missing):
    """Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, Kimi-K2 and GPT-OSS configs are read by hf_moe (here: an
    incomplete config is refused for the key it lacks, not as an unsupported MoE)."""
    refused(data, rf"^model\.{missing}: missing")


def test_supported_mixture_of_experts_is_read():
    data = dict(
        MISTRAL_7B,
        model_type="mixtral",
        architectures=["MixtralForCausalLM"],
        num_local_experts=8,
        num_experts_per_tok=2,
    )
    assert model_from_hf_config(data, "m").experts == 8


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_local_experts", "8"), ("num_experts_per_tok", True), ("tie_word_embeddings", "false")],
)
def test_moe_types_are_not_coerced(key, value):
    data = dict(MISTRAL_7B, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2)
    refused(dict(data, **{key: value}), rf"^model\.{key}: .* is not allowed")


def test_moe_inside_text_config_is_refused():
    refused(
        {"model_type": "llava", "text_config": dict(MISTRAL_7B, num_local_experts=8)},
        r"^model\.text_config: a mixture-of-experts config",
    )


BERT = {
    "architectures": ["BertForMaskedLM"],
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "vocab_size": 30522,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
}
GEMMA = {
    "architectures": ["GemmaForCausalLM"],
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "head_dim": 256,
    "vocab_size": 256000,
    "rms_norm_eps": 1e-6,
    "hidden_act": "gelu_pytorch_tanh",
}


@pytest.mark.parametrize("data", [BERT, GEMMA], ids=["bert", "gemma"])
def test_unknown_architecture_without_model_type_is_not_read_as_llama(data):
    if data is BERT:
        refused(data, r"^model\.architectures: \['Bert\w+'\] is not supported")
    else:  # Gemma is read since issue 34: as Gemma (tied embeddings, head_dim 256), not as Llama
        model = model_from_hf_config(data, name="g")
        assert "gemma" in model.source and model.tie_embeddings and model.head_dim == 256
    bare = {k: v for k, v in data.items() if k != "architectures"}
    refused(bare, r"^model\.model_type: missing and the family cannot be told from the keys")


def test_architectures_must_be_a_list_of_names():
    refused(
        {k: v for k, v in dict(LLAMA2_7B, architectures=5).items() if k != "model_type"},
        r"^model\.architectures: 5 is not allowed",
    )


def test_dropout_follows_the_rates():
    assert model_from_hf_config(LLAMA2_7B, name="x").has_dropout is False
    assert (
        model_from_hf_config(dict(LLAMA2_7B, attention_dropout=0.1), name="x").has_dropout is True
    )
    assert model_from_hf_config(GPT2, name="x").has_dropout is True  # GPT-2 defaults to 0.1
    assert (
        model_from_hf_config(
            dict(GPT2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), name="x"
        ).has_dropout
        is False
    )
    assert model_from_hf_config(PYTHIA_160M, name="x").has_dropout is False
    assert model_from_hf_config(dict(FALCON_7B, hidden_dropout=0.1), name="x").has_dropout is True


def test_checkpoint_directory_reads_its_config(tmp_path):
    ckpt = tmp_path / "Llama-2-7b-hf"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(LLAMA2_7B))
    model = load_model(str(ckpt))
    assert model.name == "Llama-2-7b-hf" and model.hidden == 4096
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"^model: .* is a directory without a config.json"):
        load_model(str(empty))


def test_model_from_standard_input(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(LLAMA2_7B).encode())))
    model = load_model("-")
    assert model.hidden == 4096 and model.name == "stdin"
