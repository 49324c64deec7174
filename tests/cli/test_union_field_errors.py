"""A union-typed field (``cuda_graph_scope``: a word or a list of Megatron-Core region names) given a value no
branch takes is one line naming the field, the value and every branch's allowed values, derived from the type
(specs.errors.union_allowed), not pydantic's per-branch report with its ``literal[...]`` / ``tuple[...]`` loc
parts; from a framework profile, a system file, the specs directly, and the goodput inputs' checkpoint.interval
(a choice or a number)."""

from __future__ import annotations

import json
from typing import Literal

import pytest
import yaml

from paraplan.catalog import load_system
from paraplan.specs.checked import validate_spec
from paraplan.specs.choices import GraphRegion, GraphScopeWord
from paraplan.specs.errors import InputError, union_allowed
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.system import EfficiencySpec

ESTIMATE = "estimate -m qwen3-30b-a3b --gpus 8 --ep 8 --global-batch 8".split()
ALLOWED = "allowed: none, attention, layer, full_iteration, or a list of attn, mlp, moe, moe_router, moe_preprocess"
BAD = ["x", ["attn", "foo"], 3]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "literal[" not in err and "tuple[" not in err and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("value", BAD)
def test_a_profile_scope_no_branch_takes_is_one_line(cli, tmp_path, value):
    profile = tmp_path / "graphs.json"
    profile.write_text(
        json.dumps({"name": "mc-graphs", "base": "megatron-core", "cuda_graph_scope": value})
    )
    code, _, err = cli(*ESTIMATE, "-s", "dgx-b200", "--framework", str(profile))
    assert code == 2
    assert (
        _one_line(err)
        == f"error: --framework.cuda_graph_scope: {value!r} is not allowed; {ALLOWED}"
    )


@pytest.mark.parametrize("value", BAD)
def test_a_system_file_scope_no_branch_takes_is_one_line(cli, tmp_path, value):
    data = load_system("dgx-b200").model_dump(mode="json")
    data["accelerator"]["efficiency"]["cuda_graph_scope"] = value
    system = tmp_path / "system.yaml"
    system.write_text(yaml.safe_dump(data))
    code, _, err = cli(*ESTIMATE, "-s", str(system))
    assert code == 2
    assert _one_line(err) == (
        f"error: system.accelerator.efficiency.cuda_graph_scope: {value!r} is not allowed; {ALLOWED}"
    )


def test_allowed_values_come_from_the_type():
    words = ", ".join(GraphScopeWord.__args__)
    regions = ", ".join(GraphRegion.__args__)
    assert ALLOWED == f"allowed: {words}, or a list of {regions}"
    assert (
        union_allowed(Literal["a", "b"] | tuple[Literal["c"], ...] | int)
        == "a, b, a list of c, or a whole number"
    )
    # a union with a member of no words (a model): pydantic's own branch errors say more
    assert union_allowed(str | FrameworkSpec) is None


def test_a_goodput_choice_or_number_no_branch_takes_is_one_line(cli):
    """checkpoint.interval (optimal, daly, young or seconds): one line, and every refused field named."""
    goodput = ("--tokens", "1T", "--goodput", "--goodput-set")
    code, _, err = cli(*ESTIMATE, "-s", "dgx-b200", *goodput, "checkpoint.interval=x")
    assert code == 2
    assert _one_line(err) == (
        "error: --goodput-set.checkpoint.interval: 'x' is not allowed; allowed: optimal, daly, young, "
        "or a number"
    )
    code, _, err = cli(
        *ESTIMATE,
        "-s",
        "dgx-b200",
        *goodput,
        "checkpoint.mode=x",
        "--goodput-set",
        "restart.detect_s=-1",
    )
    assert code == 2
    assert "--goodput-set.checkpoint.mode: 'x' is not allowed" in _one_line(err)
    assert "--goodput-set.restart.detect_s: -1 is not allowed" in err


def test_a_valid_scope_and_a_non_union_error_are_unchanged():
    assert FrameworkSpec(name="g", cuda_graph_scope=["attn", "mlp"]).cuda_graph_scope == (
        "attn",
        "mlp",
    )
    with pytest.raises(InputError) as info:
        validate_spec(EfficiencySpec, {"gemm": "fast", "cuda_graph_scope": "y"}, "eff")
    text = str(info.value)
    assert text.startswith("eff.gemm: 'fast' is not allowed; ")  # the field's own pydantic message
    assert f"eff.cuda_graph_scope: 'y' is not allowed; {ALLOWED}" in text
    assert "literal[" not in text and "tuple[" not in text
