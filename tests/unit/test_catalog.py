"""Every catalog entry loads, cites its sources, and has the shape its name promises."""

import pytest

from paraplan.catalog import (
    framework_names,
    load_framework,
    load_model,
    load_system,
    model_names,
    system_names,
)
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec

DATASHEET_FIELDS = (
    "accelerator.matrix_flops",
    "accelerator.vector_flops",
    "accelerator.hbm_capacity",
    "accelerator.hbm_bandwidth",
    "accelerator.sm_count",
    "accelerator.host_memory",
    "accelerator.host_bandwidth",
    "node.nvlink_bandwidth",
    "node.gpus_per_domain",
    "network.nic_bandwidth",
    "price_per_gpu_hour",
)

EXPECTED_MODELS = {
    "gpt3-125m",
    "gpt3-350m",
    "gpt3-760m",
    "gpt3-1.3b",
    "gpt3-2.7b",
    "gpt3-6.7b",
    "gpt3-13b",
    "gpt3-175b",
    "megatron-22b",
    "mt-nlg-530b",
    "megatron-1t",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
}
EXPECTED_SYSTEMS = {
    "dgx-a100-40gb",
    "dgx-a100-80gb",
    "dgx-h100-80gb",
    "dgx-h200",
    "dgx-b200",
    "gb200-nvl72",
    "mi300x-8",
}


def params(m: ModelSpec) -> float:
    """Weights of a dense decoder: attention + MLP (+ biases, norms) per layer, embeddings, positions."""
    h, q, kv = m.hidden, m.q_width, m.kv_width
    attn = h * (q + 2 * kv) + q * h
    mlp = (m.mlp_input_projections + 1) * h * m.ffn_hidden
    bias = (q + 2 * kv + h + m.mlp_input_projections * m.ffn_hidden + h) if m.has_bias else 0
    norms = 2 * h * (2 if m.norm == "layernorm" else 1)
    embed = m.vocab * h * (1 if m.tie_embeddings else 2)
    pos = m.max_position * h if m.learned_positions else 0
    return m.layers * (attn + mlp + bias + norms) + embed + pos


def test_catalog_lists_everything():
    assert EXPECTED_MODELS <= set(model_names())
    assert EXPECTED_SYSTEMS <= set(system_names())


@pytest.mark.parametrize("name", model_names())
def test_model_loads(name):
    model = load_model(name)
    assert isinstance(model, ModelSpec)
    assert model.name == name
    assert model.source.strip()
    assert model.heads % model.n_kv_heads == 0


@pytest.mark.parametrize("name", system_names())
def test_system_loads(name):
    system = load_system(name)
    assert isinstance(system, SystemSpec)
    assert system.name == name
    assert system.source.strip()
    acc = system.accelerator
    assert acc.peak_matrix_flops("bf16") > acc.vector_flops["fp32"]
    assert acc.host_memory is not None and acc.host_bandwidth is not None
    assert system.price_per_gpu_hour is not None


@pytest.mark.parametrize("name", system_names())
def test_system_cites_every_datasheet_number(name):
    sources = load_system(name).sources
    missing = [f for f in DATASHEET_FIELDS if not sources.get(f, "").strip()]
    assert not missing, f"{name}: no sources entry for {missing}"
    assert sources.get("accelerator.efficiency", "").strip(), (
        f"{name}: efficiency calibration not cited"
    )


@pytest.mark.parametrize("name", system_names())
def test_sources_keys_name_real_fields(name):
    system = load_system(name)
    for path in system.sources:
        obj = system
        for part in path.split("."):
            assert hasattr(obj, part), f"{name}: sources key {path!r} is not a field"
            obj = getattr(obj, part)


@pytest.mark.parametrize("name", framework_names())
def test_framework_sources_keys_name_profile_fields(name):
    # a note under a key no FrameworkSpec field has documents nothing the profile sets
    stray = set(load_framework(name).sources) - set(FrameworkSpec.model_fields)
    assert not stray, f"{name}: sources keys {sorted(stray)} are not FrameworkSpec fields"


def test_gpt3_175b_parameter_count():
    m = load_model("gpt3-175b")
    assert 174e9 <= 12 * m.layers * m.hidden**2 + m.vocab * m.hidden <= 176e9
    assert 174e9 <= params(m) <= 176e9


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("gpt3-125m", 0.125),
        ("gpt3-350m", 0.35),
        ("gpt3-760m", 0.76),
        ("gpt3-1.3b", 1.3),
        ("gpt3-2.7b", 2.7),
        ("gpt3-6.7b", 6.7),
        ("gpt3-13b", 13.0),
        ("gpt3-175b", 175.0),
        ("megatron-22b", 22.0),
        ("mt-nlg-530b", 530.0),
        ("megatron-1t", 1000.0),
    ],
)
def test_gpt_style_parameter_counts(name, billions):
    m = load_model(name)
    approx = 12 * m.layers * m.hidden**2 + m.vocab * m.hidden
    assert approx == pytest.approx(billions * 1e9, rel=0.05)
    assert params(m) == pytest.approx(billions * 1e9, rel=0.05)


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        # Hugging Face model cards / safetensors totals
        ("llama2-7b", 6.74),
        ("llama2-13b", 13.02),
        ("llama2-70b", 68.98),
        ("llama3-8b", 8.03),
        ("llama3-70b", 70.55),
        ("llama3-405b", 405.85),
    ],
)
def test_llama_parameter_counts(name, billions):
    assert params(load_model(name)) == pytest.approx(billions * 1e9, rel=0.005)


def test_llama_style_defaults():
    m = load_model("llama3-70b")
    assert (m.mlp, m.norm, m.tie_embeddings, m.n_kv_heads, m.d_head) == (
        "swiglu",
        "rmsnorm",
        False,
        8,
        128,
    )
    assert not m.has_bias and not m.learned_positions


@pytest.mark.parametrize(
    ("ref", "loader", "suggestion"),
    [
        ("gpt3-175", load_model, "gpt3-175b"),
        ("llama3-8", load_model, "llama3-8b"),
        ("dgx-h100", load_system, "dgx-h100-80gb"),
    ],
)
def test_unknown_name_suggests(ref, loader, suggestion):
    with pytest.raises(InputError) as info:
        loader(ref)
    message = str(info.value)
    assert "did you mean" in message and suggestion in message
    assert "\n" not in message


def test_unknown_name_field_prefix():
    with pytest.raises(InputError, match=r"^model: unknown model 'gpt3-175'"):
        load_model("gpt3-175")
    with pytest.raises(InputError, match=r"^system: unknown system"):
        load_system("tpu-v5p")


def test_hopper_numbers():
    s = load_system("dgx-h100-80gb")
    a = s.accelerator
    assert a.peak_matrix_flops("bf16") == pytest.approx(989.4e12)
    assert a.peak_matrix_flops("fp8") == pytest.approx(1978.9e12)
    assert a.sm_count == 132
    assert s.node.nvlink_bandwidth == pytest.approx(450e9)
    assert s.network.nic_bandwidth == pytest.approx(50e9)
    assert load_system("dgx-h200").accelerator.hbm_bandwidth == pytest.approx(4.8e12)


def test_rack_scale_domain():
    s = load_system("gb200-nvl72")
    assert s.node.gpus_per_domain == 72
    assert s.node.nvlink_bandwidth == pytest.approx(900e9)
    assert s.accelerator.peak_matrix_flops("bf16") == pytest.approx(2.5e15)


def test_mi300x_numbers():
    a = load_system("mi300x-8").accelerator
    assert a.peak_matrix_flops("fp16") == pytest.approx(1307.4e12)
    assert a.hbm_capacity == pytest.approx(192e9)
    assert a.sm_count == 304
    assert load_system("mi300x-8").node.nvlink_bandwidth == pytest.approx(448e9)
