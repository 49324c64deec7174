"""Per-stage plans and searches ask the accelerator rules a uniform plan asks (specs.rules.
accelerator_rules): no bf16 or FlashAttention priced on a V100 / T4, and the same defaults chosen for a
cluster as for one system (specs.rules_precision.cluster_default_precision)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.staged.hetero import HeteroProblem
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.rules_precision import accelerator_rules, cluster_default_precision
from paraplan.specs.stage_plan import stage_plan_from_dict, stage_plan_violations
from paraplan.specs.cluster import uniform_cluster

TINY = ModelSpec(layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=8000, max_position=512)
MIXED = cluster_from_dict(
    {
        "pools": [
            {"name": "a100", "system": "dgx-a100-80gb", "nodes": 1},
            {"name": "v100", "system": "aws-p3.8xlarge", "nodes": 1},
        ]
    }
)


def _plan(**kw):
    stages = [{"pool": "a100", "gpus": 4, "layers": 2}, {"pool": "v100", "gpus": 4, "layers": 2}]
    base = {"global_batch": 8, "seq_length": 256, "microbatches": 2, "stages": stages}
    return stage_plan_from_dict(base | kw)


def test_a_stage_plan_on_a_v100_gets_the_uniform_plans_refusals():
    v100 = load_system("aws-p3.8xlarge").accelerator
    expected = accelerator_rules(v100, "bf16", "flash")
    assert [field for field, _, _ in expected] == ["plan.dtype", "plan.attention"]
    broken = stage_plan_violations(_plan(dtype="bf16", attention="flash"), TINY, MIXED)
    assert [(v.field, v.value, v.rule) for v in broken] == expected
    assert not stage_plan_violations(_plan(dtype="fp16", attention="unfused"), TINY, MIXED)


def test_the_searches_choose_fp16_and_unfused_where_a_pool_is_older_and_refuse_what_it_lacks():
    assert cluster_default_precision([p.system.accelerator for p in MIXED.pools]) == (
        {"dtype": "fp16", "attention": "unfused"},
        "V100-SXM2-16GB",
    )
    problem = HeteroProblem(TINY, MIXED, 8, 256)
    assert (problem.dtype, problem.attention) == ("fp16", "unfused")
    a100 = HeteroProblem(TINY, uniform_cluster(load_system("dgx-a100-80gb"), 8), 8, 256)
    assert (a100.dtype, a100.attention) == ("bf16", "flash")
    with pytest.raises(InputError, match=r"plan\.dtype: 'bf16' is not allowed; V100"):
        HeteroProblem(TINY, MIXED, 8, 256, dtype="bf16", attention="unfused")


def test_the_cli_notes_the_choice_and_refuses_a_flash_plan_file_in_one_line(tmp_path, capsys):
    import yaml

    from paraplan.cli import main

    cluster = tmp_path / "mixed.yaml"
    cluster.write_text(yaml.safe_dump({"pools": [p.model_dump(mode="json") for p in MIXED.pools]}))
    argv = ["search", "-m", "gpt3-125m", "--cluster", str(cluster), "--global-batch", "8"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--seq-length", "256", "--top", "1", "--time-budget", "20"])
    captured = capsys.readouterr()
    assert info.value.code in (0, None)
    assert "note: V100-SXM2-16GB has no bf16 tensor cores" in captured.err
    assert "--dtype fp16, --attention unfused" in captured.err and "fp16" in captured.out
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "global_batch": 8,
                "seq_length": 256,
                "microbatches": 2,
                "dtype": "fp16",
                "stages": [
                    {"devices": [{"pool": "a100", "gpus": 4}], "layers": 6},
                    {"devices": [{"pool": "v100", "gpus": 4}], "layers": 6},
                ],
            }
        )
    )
    with pytest.raises(SystemExit) as info:
        main(["estimate", "-m", "gpt3-125m", "--cluster", str(cluster), "--plan", str(plan)])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith("error: plan.attention: 'flash' is not allowed; FlashAttention-2")


def test_fp8_on_an_a100_is_refused_alike_uniform_and_per_stage():
    """One rule, one place (issue 31): fp8 on an A100 (no fp8 tensor cores) is refused by a per-stage plan
    with the violation a uniform plan gets (step.estimate._system_violations)."""
    from paraplan.specs.plan import PlanSpec
    from paraplan.step.estimate import _system_violations

    a100 = load_system("dgx-a100-80gb")
    uniform = _system_violations(
        PlanSpec(gpus=8, global_batch=8, seq_length=256, dtype="fp8"), a100
    )
    assert [v.field for v in uniform] == ["plan.dtype"]
    only_a100 = cluster_from_dict(
        {"pools": [{"name": "a100", "system": "dgx-a100-80gb", "nodes": 1}]}
    )
    stages = [{"pool": "a100", "gpus": 4, "layers": 2}, {"pool": "a100", "gpus": 4, "layers": 2}]
    plan = stage_plan_from_dict(
        {"global_batch": 8, "seq_length": 256, "microbatches": 2, "stages": stages, "dtype": "fp8"}
    )
    per_stage = stage_plan_violations(plan, TINY, only_a100)
    assert [(v.field, v.value, v.rule) for v in per_stage] == [
        (v.field, v.value, v.rule) for v in uniform
    ]
