"""Hardware honesty (issue 34): bf16 and FlashAttention are never silent defaults on V100 / T4 (no bf16 tensor
cores, no FlashAttention-2); one rule (specs.rules_precision.accelerator_rules) for estimate and search."""

from __future__ import annotations

import pytest

from paraplan import api
from paraplan.catalog import load_system
from paraplan.specs.errors import InputError
from paraplan.specs.rules_precision import (
    accelerator_rules,
    default_precision,
    dtype_rule,
    precision_rules,
)


@pytest.mark.parametrize(
    "system,expected",
    [
        ("dgx-1-v100", {"dtype": "fp16", "attention": "unfused"}),
        ("aws-g4dn.12xlarge", {"dtype": "fp16", "attention": "unfused"}),
        ("dgx-a100-80gb", {"dtype": "bf16", "attention": "flash"}),
        ("mi300x-8", {"dtype": "bf16", "attention": "flash"}),
    ],
)
def test_default_precision_follows_the_accelerator(system, expected):
    assert default_precision(load_system(system).accelerator) == expected


def test_bf16_and_flash_on_v100_break_the_rule():
    acc = load_system("dgx-1-v100").accelerator
    fields = [field for field, *_ in accelerator_rules(acc, "bf16", "flash")]
    assert fields == ["plan.dtype", "plan.attention"]
    assert accelerator_rules(acc, "fp16", "unfused") == []
    assert accelerator_rules(load_system("dgx-h100-80gb").accelerator, "bf16", "flash") == []
    # one judge each: bf16 in dtype_rule only, the attention kernel in precision_rules only
    assert "no bf16 tensor cores" in dtype_rule("bf16", acc)
    assert [field for field, *_ in precision_rules(acc, "flash")] == ["plan.attention"]


def test_estimate_and_search_refuse_bf16_on_v100_alike():
    with pytest.raises(InputError, match="plan.dtype.*no bf16 tensor cores") as est:
        api.estimate("gpt3-1.3b", "dgx-1-v100", gpus=8, dtype="bf16", attention="unfused")
    with pytest.raises(InputError, match="plan.dtype.*no bf16 tensor cores") as found:
        api.search("gpt3-1.3b", "dgx-1-v100", 8, global_batch=64, dtype="bf16", attention="unfused")
    assert str(est.value) == str(found.value)


def test_cli_defaults_to_fp16_and_unfused_on_v100_and_says_so(cli):
    code, out, err = cli("estimate", "-m", "gpt3-1.3b", "-s", "dgx-1-v100", "--gpus", "8")
    assert "fp16, unfused attention" in out
    assert "no bf16 tensor cores" in err and "--dtype fp16" in err
    code, out, err = cli(
        "search",
        "-m",
        "gpt3-1.3b",
        "-s",
        "aws-g4dn.12xlarge",
        "--gpus",
        "4",
        "--global-batch",
        "64",
        "--top",
        "1",
    )
    assert code == 0 and ", fp16, objective" in out and "--attention unfused" in err


def test_cli_keeps_bf16_and_flash_on_h100_without_a_note(cli):
    code, out, err = cli("estimate", "-m", "gpt3-1.3b", "-s", "dgx-h100-80gb", "--gpus", "8")
    assert code == 0 and "bf16, flash attention" in out and "note:" not in err


def test_an_explicit_bf16_on_v100_is_refused_by_the_cli(cli):
    code, _, err = cli(
        "estimate", "-m", "gpt3-1.3b", "-s", "dgx-1-v100", "--gpus", "8", "--dtype", "bf16"
    )
    assert code == 2 and "plan.dtype: 'bf16' is not allowed" in err


def test_fp8_recipe_rule_follows_transformer_engines_recipe_checks():
    """MXFP8BlockScaling on compute capability 10.x only (data-centre Blackwell), NVFP4BlockScaling where the
    part has FP4 tensor cores (Blackwell, both kinds); the per-tensor and 1x128 recipes wherever fp8 runs;
    no recipe rule for a dtype that runs no fp8 recipe (specs.rules_precision, TE quantization.py)."""
    from paraplan.catalog import load_framework
    from paraplan.cost.frameworks import framework_system
    from paraplan.specs.rules_precision import fp8_recipe_rule, fp8_recipe_supported

    supported = {
        name: {
            r
            for r in ("delayed", "current", "blockwise", "mxfp8", "nvfp4")
            if fp8_recipe_supported(r, acc)
        }
        for name, acc in (
            (s, load_system(s).accelerator)
            for s in ("dgx-h100-80gb", "dgx-b200", "rtx-5090-8", "l40s-8")
        )
    }
    assert supported == {
        "l40s-8": {"delayed", "current"},  # Ada, 8.9: block scaling needs 9.0 or higher
        "dgx-h100-80gb": {"delayed", "current", "blockwise"},
        "dgx-b200": {"delayed", "current", "blockwise", "mxfp8", "nvfp4"},
        "rtx-5090-8": {
            "delayed",
            "current",
            "blockwise",
            "nvfp4",
        },  # compute capability 12.0: no MXFP8 in TE
    }
    profile = load_framework("megatron-bridge-25.11-mxfp8")
    h100 = framework_system(profile, load_system("dgx-h100-80gb")).accelerator
    b300 = framework_system(profile, load_system("dgx-b300")).accelerator
    assert h100.efficiency.runtime.fp8_recipe == "mxfp8"
    rule = fp8_recipe_rule("fp8", h100)
    assert "compute capability 10.x" in rule and rule.endswith(
        "allowed there: delayed, current, blockwise"
    )
    assert fp8_recipe_rule("bf16", h100) is None and fp8_recipe_rule("fp8", b300) is None
    # one check for estimate and search: the recipe's field after a dtype the part runs
    assert [f for f, *_ in accelerator_rules(h100, "fp8", "flash")] == ["framework.fp8_recipe"]
    assert [f for f, *_ in accelerator_rules(h100, "nvfp4", "flash")] == ["plan.dtype"]
    blockwise = load_framework("megatron-core").model_copy(update={"fp8_recipe": "blockwise"})
    ada = framework_system(blockwise, load_system("l40s-8")).accelerator
    assert "compute capability 9.0 or higher" in fp8_recipe_rule("fp8", ada)
    assert (
        fp8_recipe_rule(
            "fp8", framework_system(blockwise, load_system("dgx-h100-80gb")).accelerator
        )
        is None
    )
