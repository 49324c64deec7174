"""Two plan rules the uniform estimate and search enforce with a one-line error, exit 2 (issue 31: one rule in
one place): DeepSpeed's PipelineEngine refuses ZeRO-2/3 with pp > 1 (specs.rules_stack.engine_zero_rule, read from the
framework profile's pipeline_engine), and an fp8 plan's Transformer Engine recipe must run on the accelerator
(specs.rules_precision.fp8_recipe_rule: MXFP8 on compute capability 10.x, NVFP4 on FP4 tensor cores)."""

from __future__ import annotations

import pytest

LLAMA = ["--model", "llama3-8b", "--gpus", "8"]
DEEPSPEED = [*LLAMA, "--system", "dgx-h100-80gb", "--framework", "megatron-deepspeed"]
MXFP8, NVFP4 = "megatron-bridge-25.11-mxfp8", "megatron-bridge-26.02-nvfp4"


def one_line_error(result) -> str:
    code, out, err = result
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("zero", ["2", "3"])
def test_deepspeed_engine_refuses_zero2_and_3_with_pipeline_stages(cli, zero):
    line = one_line_error(cli("estimate", *DEEPSPEED, "--pp", "2", "--zero", zero))
    for text in (
        f"plan.zero: {zero} is not allowed",
        "pp=2",
        "PipelineEngine",
        "allowed: zero 0 or 1",
    ):
        assert text in line, (text, line)


def test_deepspeed_engine_takes_zero1_with_pipeline_stages_and_zero2_without(cli):
    for extra in (["--pp", "2", "--zero", "1"], ["--pp", "1", "--zero", "2"]):
        code, _, err = cli("estimate", *DEEPSPEED, *extra)
        assert code == 0, err
    # another pipeline runtime (Megatron-Core's) takes ZeRO-2 beside pipeline stages: no refusal here
    code, _, err = cli("estimate", *LLAMA, "--system", "dgx-h100-80gb", "--pp", "2", "--zero", "2")
    assert code == 0, err


@pytest.mark.parametrize(
    "framework, system, recipe, allowed",
    [
        (MXFP8, "dgx-h100-80gb", "mxfp8", "delayed, current, blockwise"),
        (NVFP4, "dgx-h100-80gb", "nvfp4", "delayed, current, blockwise"),
        (MXFP8, "rtx-pro-6000-4", "mxfp8", "delayed, current, blockwise, nvfp4"),
    ],
)
def test_fp8_plan_refuses_a_block_scaled_recipe_off_its_parts(
    cli, framework, system, recipe, allowed
):
    gpus = "4" if system.startswith("rtx") else "8"
    argv = ["--model", "llama3-8b", "--system", system, "--gpus", gpus, "--dtype", "fp8"]
    for command in (["estimate"], ["search", "--global-batch", "64"]):
        line = one_line_error(cli(*command, *argv, "--framework", framework))
        for text in (
            "framework.fp8_recipe",
            repr(recipe),
            "Transformer Engine",
            f"allowed there: {allowed}",
        ):
            assert text in line, (text, line)


def test_block_scaled_recipes_run_on_data_centre_blackwell_and_bf16_runs_no_recipe(cli):
    for framework in (MXFP8, NVFP4):
        code, _, err = cli(
            "estimate", *LLAMA, "--system", "dgx-b200", "--dtype", "fp8", "--framework", framework
        )
        assert code == 0, err
    # a bf16 plan under the mxfp8 profile on H100 quantises nothing: no recipe to refuse
    code, _, err = cli(
        "estimate", *LLAMA, "--system", "dgx-h100-80gb", "--framework", MXFP8, "--zero", "1"
    )
    assert code == 0, err
