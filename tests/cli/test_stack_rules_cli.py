"""What a stack's runtime runs, refused in one line with exit 2 by the estimate and left out by the search
(specs.rules_stack): DeepSpeed's PipelineEngine runs its TrainSchedule (1F1B, one chunk per stage) only
(engine_schedule_rule, the megatron-deepspeed profile's pipeline_engine), and the Hugging Face Trainer and the
single-GPU PyTorch loops run only the model-parallel kinds their profiles' ``parallelism`` states
(stack_parallelism_rules)."""

from __future__ import annotations

import json

import pytest
from tests.cli.test_engine_recipe_rules_cli import one_line_error

GPT = ["--model", "gpt3-1.3b", "--system", "dgx-a100-80gb", "--gpus", "8", "--global-batch", "64"]


@pytest.mark.parametrize(
    "extra, schedule",
    [
        (["--vpp", "2"], "interleaved"),
        (["--schedule", "gpipe"], "gpipe"),
        (["--schedule", "zb-h1"], "zb-h1"),
    ],
)
def test_deepspeed_pipeline_engine_refuses_schedules_it_does_not_run(cli, extra, schedule):
    argv = [*GPT, "--framework", "megatron-deepspeed", "--pp", "2", "--micro-batch", "1", *extra]
    line = one_line_error(cli("estimate", *argv))
    for text in (
        f"plan.schedule: '{schedule}' is not allowed",
        "TrainSchedule",
        "allowed: schedule 1f1b",
    ):
        assert text in line, (text, line)
    code, _, err = cli("estimate", *GPT, "--framework", "megatron-deepspeed", "--pp", "2")
    assert code == 0, err  # 1F1B runs


def test_search_under_deepspeeds_pipeline_engine_returns_1f1b_rows_only(cli):
    argv = [*GPT, "--framework", "megatron-deepspeed", "--pp", "2", "--top", "100", "--json"]
    code, out, err = cli("search", *argv)
    assert code == 0, err
    plans = [p["plan"] for p in json.loads(out)["plans"]]
    assert plans and {(p["schedule"] or "1f1b", p["vpp"]) for p in plans} == {("1f1b", 1)}


@pytest.mark.parametrize(
    "framework, extra, field",
    [
        ("hf-transformers", ["--pp", "2"], "plan.pp: 2"),
        ("hf-transformers", ["--tp", "2", "--overlap-tp-comm"], "plan.overlap_tp_comm: True"),
        ("hf-transformers-fsdp", ["--tp", "2"], "plan.tp: 2"),
        ("hf-transformers-deepspeed", ["--pp", "2"], "plan.pp: 2"),
        ("pytorch-compile", ["--tp", "2", "--sequence-parallel"], "plan.sequence_parallel: True"),
    ],
)
def test_estimate_refuses_parallelism_the_stacks_loop_does_not_run(cli, framework, extra, field):
    line = one_line_error(cli("estimate", *GPT, "--framework", framework, *extra))
    assert f"{field} is not allowed" in line and "the stack's training loop runs no" in line, line


@pytest.mark.parametrize(
    "framework", ["hf-transformers", "hf-transformers-fsdp", "pytorch-compile"]
)
def test_search_under_a_trainer_or_plain_loop_proposes_only_what_it_runs(cli, framework):
    code, out, err = cli("search", *GPT, "--framework", framework, "--top", "100", "--json")
    assert code == 0, err
    plans = [p["plan"] for p in json.loads(out)["plans"]]
    assert plans and all(p["pp"] == 1 and not p["overlap_tp_comm"] for p in plans)
    if (
        framework != "hf-transformers"
    ):  # Trainer v4.46.0 / the one-device loop: no model parallelism at all
        assert all(p["tp"] == 1 and p["cp"] == 1 and not p["sequence_parallel"] for p in plans)


@pytest.mark.parametrize("command", ["search", "estimate"])
def test_a_one_device_loop_refuses_more_than_one_gpu(cli, command):
    """pytorch-eager's loop is one process on one device (parallelism []): the uniform search and the
    estimate refuse --gpus 8 in one line naming the field the user gave, the value and what is allowed
    (specs.rules_stack.stack_gpus_rule; the estimate asks it before the kinds, stack_rules)."""
    line = one_line_error(cli(command, *GPT, "--framework", "pytorch-eager"))
    assert "gpus: 8 is not allowed" in line and "runs on one device" in line, line
    assert "allowed: 1" in line and "plan.dp" not in line
    one = [
        "--model",
        "gpt3-1.3b",
        "--system",
        "dgx-a100-80gb",
        "--gpus",
        "1",
        "--global-batch",
        "8",
    ]
    code, _, err = cli("search", *one, "--framework", "pytorch-eager", "--top", "3")
    assert code == 0, err


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed"])
def test_deepspeed_refuses_ring_context_parallelism_in_the_estimate(cli, framework):
    """DeepSpeed has no ring CP (specs.rules.deepspeed_cp_rule): --cp 2 with --cp-algorithm ring is
    refused in one line; the profiles' own all-to-all (DeepSpeed-Ulysses) is priced."""
    argv = [*GPT, "--framework", framework, "--cp", "2"]
    line = one_line_error(cli("estimate", *argv, "--cp-algorithm", "ring"))
    assert "plan.cp: 2 is not allowed; DeepSpeed has no ring context parallelism" in line, line
    code, _, err = cli("estimate", *argv)
    assert code == 0, err
