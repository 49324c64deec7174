"""Megatron-Bridge's mixed-precision recipes as facts (export/facts/megatron-bridge_precision.yaml, v0.2.0 at
7af9601c): the export writes the recipe of the plan's profile and only the overrides the plan needs, never an
fp8 parameter gather a recipe turns off (blockwise subchannel scaling, NVFP4), and reads back the plan Bridge
runs, priced as written (issue 34)."""

from __future__ import annotations

import math
import re

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.export import ExportRefused, export_plan, import_plan
from paraplan.export.bridge_precision import precision_facts, recipe_fields
from paraplan.export.common import canonical_plan, framework_args
from paraplan.export.megatron_bridge import FP8_RECIPES
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

BRIDGE = "megatron-bridge"
GPT, SYSTEM = load_model("gpt3-1.3b"), load_system("dgx-h100-80gb")
FP8 = dict(gpus=8, tp=2, micro_batch=1, global_batch=32, seq_length=2048, dtype="fp8", zero=1)
# fp8_param_gather each recipe sets (training/mixed_precision.py at 7af9601c, the lines in the facts)
GATHERS = {"delayed": True, "current": True, "mxfp8": True, "blockwise": False, "nvfp4": False}


def _fields(text: str) -> dict[str, str]:
    return dict(re.findall(r"^cfg\.([\w.]+) = (.+)$", text, flags=re.M))


def test_the_recipe_facts_have_provenance_and_cover_every_recipe_the_export_writes():
    facts, kept = precision_facts(), framework_args(BRIDGE)
    assert (facts["tag"], facts["commit"]) == (kept.version, kept.commit)
    assert set(FP8_RECIPES.values()) | {"bf16_mixed", "fp16_mixed"} == set(facts["recipes"])
    assert set(facts["recipes"]) == set(kept.choices["mixed_precision"])
    for name, recipe in facts["recipes"].items():
        assert int(recipe["line"]) > 0 and recipe["sets"], name
        if "fp8_param_gather" in recipe["sets"]:
            assert int(recipe["fp8_param_gather_line"]) > int(recipe["line"]), name
    for check in facts["checks"]:
        assert int(check["line"]) > 0 and check["file"].endswith(".py") and check["says"].strip()
    for name in facts["unpriced"]:
        assert f"mixed_precision.{name}" in kept.names
    for fp8_recipe, gathers in GATHERS.items():
        assert recipe_fields(FP8_RECIPES[fp8_recipe])["fp8_param_gather"] is gathers


@pytest.mark.parametrize("fp8_recipe", sorted(GATHERS))
def test_each_recipe_writes_the_gather_it_runs_and_reads_back_the_plan_priced(fp8_recipe):
    recipe = FP8_RECIPES[fp8_recipe]
    primary = PlanSpec(**FP8, fp8_weight_copies=False)
    copies = PlanSpec(**FP8, fp8_weight_copies=True)
    if GATHERS[fp8_recipe]:
        text = export_plan(BRIDGE, primary, GPT, fp8_recipe=fp8_recipe)
        assert _fields(text)["mixed_precision.fp8_param_gather"] == "True"
        back = PlanSpec(**import_plan(BRIDGE, text))
        assert canonical_plan(back) == canonical_plan(primary)
    else:
        line = precision_facts()["recipes"][recipe]["fp8_param_gather_line"]
        with pytest.raises(ExportRefused) as exc:
            export_plan(BRIDGE, primary, GPT, fp8_recipe=fp8_recipe)
        assert str(exc.value).startswith("plan.fp8_weight_copies=False cannot be expressed")
        assert f"{recipe} recipe sets fp8_param_gather False" in str(exc.value)
        assert f"mixed_precision.py:{line}" in str(exc.value)
    # bf16 weights with quantised copies: every recipe runs it, the gather written off
    text = export_plan(BRIDGE, copies, GPT, fp8_recipe=fp8_recipe)
    assert _fields(text)["mixed_precision"] == f"get_mixed_precision_config({recipe!r})"
    assert _fields(text)["mixed_precision.fp8_param_gather"] == "False"
    back = PlanSpec(**import_plan(BRIDGE, text))
    assert canonical_plan(back) == canonical_plan(copies) and back.fp8_weight_copies
    # priced as written: the plan read back is the one with the fp8 weight copies
    assert estimate(GPT, SYSTEM, back).step_time_s == estimate(GPT, SYSTEM, copies).step_time_s
    if not GATHERS[fp8_recipe]:  # a recipe without fp8 primary weights prices their copies
        held = estimate(GPT, SYSTEM, back).peak_stage.peak_bytes
        assert held > estimate(GPT, SYSTEM, primary).peak_stage.peak_bytes


def test_a_recipe_line_without_an_override_reads_back_as_the_recipe_sets_it():
    """A hand-written config that names the blockwise recipe and no fp8_param_gather line runs the
    recipe's False: the plan read back keeps fp8 weight copies (the old reading assumed fp8 gathers)."""
    copies = PlanSpec(**FP8, fp8_weight_copies=True)
    text = export_plan(BRIDGE, copies, GPT, fp8_recipe="blockwise")
    bare = "\n".join(l for l in text.splitlines() if "fp8_param_gather" not in l)
    assert PlanSpec(**import_plan(BRIDGE, bare)).fp8_weight_copies
    delayed = export_plan(BRIDGE, PlanSpec(**FP8), GPT, fp8_recipe="delayed")
    bare = "\n".join(l for l in delayed.splitlines() if "fp8_param_gather" not in l)
    assert not PlanSpec(**import_plan(BRIDGE, bare)).fp8_weight_copies


def test_current_scaling_runs_every_layer_in_fp8_as_priced():
    """bf16_with_fp8_current_scaling_mixed keeps the first and last layer in bf16 (mixed_precision.py
    lines 286-288); the plan prices every layer in fp8, so the export turns it off as Bridge's performance
    scripts do (helpers.py:40), and an import that turns it back on is refused by name."""
    text = export_plan(BRIDGE, PlanSpec(**FP8), GPT, fp8_recipe="current")
    assert _fields(text)["mixed_precision.first_last_layers_bf16"] == "False"
    for fp8_recipe in ("delayed", "mxfp8"):
        assert "first_last_layers_bf16" not in export_plan(
            BRIDGE, PlanSpec(**FP8), GPT, fp8_recipe=fp8_recipe
        )
    on = text.replace("first_last_layers_bf16 = False", "first_last_layers_bf16 = True")
    with pytest.raises(ExportRefused, match=r"first_last_layers_bf16 True .* has no plan field"):
        import_plan(BRIDGE, on)
    bare = "\n".join(l for l in text.splitlines() if "first_last_layers_bf16" not in l)
    with pytest.raises(ExportRefused, match="first_last_layers_bf16"):
        import_plan(BRIDGE, bare)  # the recipe's own True
    back = PlanSpec(**import_plan(BRIDGE, text))
    assert math.isclose(
        estimate(GPT, SYSTEM, back).step_time_s,
        estimate(GPT, SYSTEM, PlanSpec(**FP8)).step_time_s,
        rel_tol=1e-9,
    )
