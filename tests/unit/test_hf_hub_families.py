"""Configs as the Hub writes them (issue 34): Qwen3 dense and MoE, Gemma 2/3, Phi-3/4, from transformers 4.x
and 5.x, with parameter totals equal to the published ones; models read from the local Hugging Face cache by
id; a catalog name never silently shadows a local path. Fixtures and sources: tests/data/hf/SOURCES.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paraplan.catalog import load_model
from paraplan.catalog.hf import model_from_hf_config
from paraplan.specs.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"

# file, published total (billions), digits after the point the page gives, published active (or None)
PUBLISHED = [
    ("Qwen--Qwen3-8B.json", 8.2, 1, None),
    ("Qwen--Qwen3-8B.v5.json", 8.2, 1, None),
    ("Qwen--Qwen3-30B-A3B.v5.json", 30.5, 1, 3.3),
    ("google--gemma-2-9b.json", 9.24, 2, None),
    ("google--gemma-2-27b.json", 27.2, 1, None),
    ("google--gemma-3-1b-pt.json", 1.00, 2, None),
    ("microsoft--Phi-3-mini-4k-instruct.json", 3.82, 2, None),
    ("microsoft--phi-4.json", 14.7, 1, None),
]


def _config(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name,total,digits,active", PUBLISHED)
def test_parameter_totals_equal_the_published_ones(name, total, digits, active):
    """Equal to the published figure to the digits it gives (rounded or, as Qwen's cards do, cut: within one
    unit of its last digit)."""
    model = load_model(str(DATA / name))
    assert abs(model.total_params / 1e9 - total) < 10**-digits
    if active is not None:
        assert abs(model.active_params / 1e9 - active) < 10**-digits


def test_qwen3_8b_non_embedding_count_is_the_cards():
    model = load_model(str(DATA / "Qwen--Qwen3-8B.json"))
    embeddings = 2 * model.vocab * model.hidden  # untied input and output embeddings
    assert round((model.total_params - embeddings) / 1e9, 2) == 6.95


def test_transformers_5_config_reads_as_the_4x_one():
    old = model_from_hf_config(_config("Qwen--Qwen3-8B.json"), name="q")
    new = model_from_hf_config(_config("Qwen--Qwen3-8B.v5.json"), name="q")
    assert old.model_dump(exclude={"source"}) == new.model_dump(exclude={"source"})
    assert (new.head_dim, new.kv_heads, new.qkv_bias) == (128, 8, False)


def test_qwen3_moe_with_num_local_experts_reads_as_the_catalog_entry():
    hub = load_model(str(DATA / "Qwen--Qwen3-30B-A3B.v5.json"))
    catalog = load_model("qwen3-30b-a3b")
    assert (hub.experts, hub.top_k, hub.moe_ffn_hidden) == (128, 8, 768)
    assert hub.total_params == catalog.total_params
    assert hub.active_params == catalog.active_params


def test_qwen3_moe_without_an_expert_count_names_both_keys():
    config = _config("Qwen--Qwen3-30B-A3B.v5.json")
    del config["num_local_experts"]
    with pytest.raises(InputError, match="num_experts: missing.*num_local_experts"):
        model_from_hf_config(config, name="q")


@pytest.mark.parametrize(
    "name,window,pattern",
    [
        ("google--gemma-2-9b.json", 4096, 2),  # Gemma2: even layers windowed, odd full
        ("google--gemma-3-1b-pt.json", 512, 6),  # Gemma3: 5 local, 1 global
        ("microsoft--Phi-3-mini-4k-instruct.json", 2047, 0),  # Phi-3: every layer windowed
    ],
)
def test_window_patterns(name, window, pattern):
    model = load_model(str(DATA / name))
    assert (model.sliding_window, model.sliding_window_pattern) == (window, pattern)


def test_gemma_ties_its_embeddings_and_is_gated():
    model = load_model(str(DATA / "google--gemma-2-9b.json"))
    assert model.tie_embeddings and model.mlp == "swiglu" and model.head_dim == 256
    assert (model.heads, model.kv_heads) == (16, 8)


def test_gemma2_layer_types_of_transformers_5_give_the_same_pattern():
    config = _config("google--gemma-2-9b.json")
    config["layer_types"] = ["sliding_attention", "full_attention"] * 21
    assert load_model_from(config).sliding_window_pattern == 2


def test_gemma3_window_pattern_key_of_transformers_5():
    config = _config("google--gemma-3-1b-pt.json")
    config["_sliding_window_pattern"] = config.pop("sliding_window_pattern")
    assert load_model_from(config).sliding_window_pattern == 6


def test_irregular_layer_types_are_refused_by_key():
    config = _config("google--gemma-2-9b.json")
    config["layer_types"] = ["full_attention"] * 2 + ["sliding_attention"] * 40
    with pytest.raises(InputError, match="layer_types: full-attention layers"):
        load_model_from(config)


def test_multimodal_gemma3_reads_its_text_config_with_gemma3_defaults():
    # the keys google/gemma-3-4b-pt's config.json gives (its text_config names only the widths)
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {"model_type": "siglip_vision_model"},
    }
    model = load_model_from(config)
    assert (model.heads, model.kv_heads, model.head_dim, model.vocab) == (8, 4, 256, 262_208)
    assert (model.sliding_window, model.sliding_window_pattern) == (1024, 6)


def load_model_from(config: dict):
    return model_from_hf_config(config, name="m")


# ---- the local Hugging Face cache ---------------------------------------------------------------
def _cache(root: Path, repo: str, revisions: list[str], main: str | None) -> None:
    folder = root / ("models--" + repo.replace("/", "--"))
    for rev in revisions:
        (folder / "snapshots" / rev).mkdir(parents=True)
        (folder / "snapshots" / rev / "config.json").write_text(
            (DATA / "Qwen--Qwen3-8B.json").read_text()
        )
    if main is not None:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(main + "\n")


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"])
def test_model_by_hub_id_from_the_local_cache(tmp_path, monkeypatch, variable):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "hub" if variable == "HF_HOME" else tmp_path
    _cache(root, "Qwen/Qwen3-8B", ["0a1b2c", "9f8e7d"], main="9f8e7d")
    monkeypatch.setenv(variable, str(tmp_path))
    model = load_model("Qwen/Qwen3-8B")
    assert model.name == "Qwen/Qwen3-8B" and round(model.total_params / 1e9, 1) == 8.2


def test_hub_id_with_one_snapshot_and_no_ref(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _cache(tmp_path, "Qwen/Qwen3-8B", ["0a1b2c"], main=None)
    assert load_model("Qwen/Qwen3-8B").layers == 36


def test_hub_id_with_several_snapshots_and_no_ref_is_ambiguous(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _cache(tmp_path, "Qwen/Qwen3-8B", ["0a1b2c", "9f8e7d"], main=None)
    with pytest.raises(InputError, match="2 cached revisions"):
        load_model("Qwen/Qwen3-8B")


def test_hub_id_not_in_the_cache_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError, match="not a catalog name, a file, or a model in the local"):
        load_model("Qwen/Qwen3-9B")


def test_a_catalog_name_never_shadows_a_local_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama3-8b").mkdir()
    with pytest.raises(InputError, match="both a catalog model and a path"):
        load_model("llama3-8b")
    (tmp_path / "llama3-8b" / "config.json").write_text((DATA / "Qwen--Qwen3-8B.json").read_text())
    assert load_model("./llama3-8b").layers == 36  # the path, when named as one


# ---- Llama 4: MoE with interleaved dense layers, chunked attention ------------------------------
SCOUT, MAVERICK = (
    "meta-llama--Llama-4-Scout-17B-16E.json",
    "meta-llama--Llama-4-Maverick-17B-128E.json",
)


def _vision_blocks(config: dict) -> float:
    """Parameters of the vision encoder's transformer blocks (4h² attention + 2h·f MLP per layer), which the
    published Llama 4 totals include and the language model paraplan reads does not."""
    v = config["vision_config"]
    h, f = v["hidden_size"], v["intermediate_size"]
    return v["num_hidden_layers"] * (4 * h * h + 2 * h * f)


@pytest.mark.parametrize("name,total", [(SCOUT, 109), (MAVERICK, 400)])
def test_llama4_totals_are_metas(name, total):
    """Meta's model card: 17B active for both, 109B total (Scout) and 400B (Maverick), vision encoder
    included (its patch embedding and projector, ~0.03B, left out here)."""
    model = load_model(str(DATA / name))
    assert round(model.active_params / 1e9) == 17
    with_vision = (model.total_params + _vision_blocks(_config(name))) / 1e9
    assert abs(with_vision - total) / total < 0.005


def test_llama4_layers():
    scout, maverick = load_model(str(DATA / SCOUT)), load_model(str(DATA / MAVERICK))
    assert (scout.experts, scout.top_k, scout.shared_experts, scout.moe_layer_interval) == (
        16,
        1,
        1,
        1,
    )
    assert (maverick.experts, maverick.moe_layer_interval, maverick.ffn_hidden) == (128, 2, 16384)
    # rope layers attend within chunks of 8,192 tokens, every 4th (NoPE) layer globally
    assert (scout.sliding_window, scout.sliding_window_pattern, scout.window_kind) == (
        8192,
        4,
        "chunked",
    )


def test_chunked_attention_sees_the_keys_of_its_own_block():
    model = load_model(str(DATA / SCOUT))
    sliding = model.model_validate(model.model_dump() | {"window_kind": "sliding"})
    w = 8192
    assert model.mean_visible_keys(w) == sliding.mean_visible_keys(w) == (w + 1) / 2
    # two blocks of w: each query sees (w+1)/2 keys on average, against ~3w/4 under a sliding window
    assert model.mean_visible_keys(2 * w) == (w + 1) / 2
    assert sliding.mean_visible_keys(2 * w) == (w * (w + 1) / 2 + w * w) / (2 * w)
    assert model.mean_visible_keys(2 * w, windowed=False) == (2 * w + 1) / 2


def test_chunked_attention_costs_less_than_a_sliding_window():
    from paraplan.graph.mla import window_fraction

    s, w = 32768, 8192
    chunked, sliding = window_fraction(w, s, 1, chunked=True), window_fraction(w, s, 1)
    assert chunked == pytest.approx(4 * w * (w + 1) / 2 / s**2)
    assert chunked < sliding < window_fraction(None, s, 1)


def test_llama4_no_rope_layers_of_the_wrong_length_are_refused():
    config = _config(SCOUT)
    config["text_config"]["no_rope_layers"] = [1, 0]
    with pytest.raises(InputError, match="text_config.no_rope_layers"):
        load_model_from(config)
