"""What a per-stage plan's engine and training stack ran, refused from the CLI in one line with exit 2:
a plan stating ``engine_stack: amp2022`` (AMP's trials: Megatron-LM v1.1.5 in fp16 on DeepSpeed's
PipelineEngine) takes its dtype and parallel kinds only (specs.stage_stack.STACK_FACTS,
stage_engine_stack_violations), and a plan on ``engine: deepspeed`` takes no ring context parallelism
(specs.rules.deepspeed_cp_rule)."""

from __future__ import annotations

import pytest
import yaml

from tests.cli.test_engine_recipe_rules_cli import one_line_error

SYSTEM = "dgx-h100-80gb"
OPTIONS = ["--model", "llama3-8b", "--system", SYSTEM]


def plan_file(tmp_path, stage_fields: dict, **fields) -> str:
    stage = {"pool": SYSTEM, "gpus": 8, "layers": 16, "tp": 2} | stage_fields
    data = {
        "global_batch": 16,
        "seq_length": 4096,
        "microbatches": 4,
        "engine": "deepspeed",
        "stages": [stage, stage],
    } | fields
    path = tmp_path / "stages.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


AMP = {"engine_stack": "amp2022", "dtype": "fp16"}


@pytest.mark.parametrize(
    "stage_fields, fields, named",
    [
        ({}, AMP | {"dtype": "bf16"}, "plan.dtype: 'bf16' is not allowed; engine_stack amp2022"),
        (
            {"cp": 2, "dp": 2},
            AMP | {"cp_algorithm": "all-to-all"},
            "plan.cp: 2 is not allowed; the stack's training loop runs no context parallelism "
            "(engine_stack amp2022's parallelism: dp, tp, pp); allowed: 1",
        ),
        (
            {},
            AMP | {"sequence_parallel": True},
            "plan.sequence_parallel: True is not allowed; the stack's training loop runs no "
            "sequence parallelism (engine_stack amp2022's parallelism: dp, tp, pp)",
        ),
        (
            {"cp": 2, "dp": 2},
            {"cp_algorithm": "ring"},
            "plan.stages.0.cp: 2 is not allowed; DeepSpeed has no ring context parallelism",
        ),
    ],
)
def test_engine_and_stack_refusals_in_one_line(cli, tmp_path, stage_fields, fields, named):
    line = one_line_error(
        cli("estimate", *OPTIONS, "--plan", plan_file(tmp_path, stage_fields, **fields))
    )
    assert named in line, line


@pytest.mark.parametrize(
    "stage_fields, fields",
    [({}, AMP), ({"cp": 2, "dp": 2}, {"cp_algorithm": "all-to-all"})],
)
def test_what_the_engine_and_stack_ran_is_priced(cli, tmp_path, stage_fields, fields):
    """AMP's stack in fp16 over tp and pp; DeepSpeed-Ulysses (all-to-all) on the deepspeed engine."""
    code, _, err = cli("estimate", *OPTIONS, "--plan", plan_file(tmp_path, stage_fields, **fields))
    assert code == 0, err
