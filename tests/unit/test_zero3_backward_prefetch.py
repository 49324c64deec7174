"""ZeRO-3/FSDP's backward prefetch depth, its own run-wide knob (zero3_backward_prefetch_layers, None: the
forward's depth): the exposed backward gathers by hand at depth 0 and 1 (step.zero3_legacy.zero3_exposure_s),
the default leaves an estimate unchanged, the resident gathered layers at the deeper depth, the
hf-transformers-fsdp profile's depth 0 and the CLI option."""

from __future__ import annotations

import json
import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cli import main
from paraplan.cost.frameworks import framework_plan_fields
from paraplan.graph.transformer import LayerShape
from paraplan.specs.plan import PlanSpec
from paraplan.step.build import BLOCK_KINDS
from paraplan.step.estimate import estimate
from paraplan.step.zero3_legacy import zero3_exposure_s


def _exposed(forward_depth: float, backward_depth: float) -> float:
    """One micro-batch of 4 blocks: gather g = 1.5 s, reduce-scatter r = 1 s, 1 s of forward and 2 s of
    backward per block (windows 4 s and 8 s, a quarter each per block), nothing hidden at a price."""
    return zero3_exposure_s(
        4.0, 0.25, (forward_depth, backward_depth), (1.5, 0.0), (1.0, 0.0), None, None, 4.0, 8.0
    )


def test_backward_gathers_by_hand_at_depth_zero_and_one():
    """Forward at depth 1: g + 3·max(0, g − 1) = 1.5 + 1.5 = 3 s. Backward (gather and reduce-scatter,
    g + r = 2.5 s per block) at depth 1: 2.5 + 3·max(0, 2.5 − 2) = 4 s; at depth 0 every block waits:
    4·2.5 = 10 s. The forward's depth does not move the backward's."""
    assert _exposed(1, 1) == pytest.approx(3.0 + 4.0)
    assert _exposed(1, 0) == pytest.approx(3.0 + 10.0)
    assert _exposed(0, 1) == pytest.approx(4 * 1.5 + 4.0)


# gpt3-13b on 64 A100s, data parallel only, ZeRO-3 with full recomputation, one micro-batch a step
PLAN = {"gpus": 64, "dp": 64, "micro_batch": 1, "global_batch": 64, "seq_length": 2048}


def _estimate(**fields):
    plan = PlanSpec(**PLAN, zero=3, recompute="full", **fields)
    return estimate(load_model("gpt3-13b"), load_system("dgx-a100-80gb"), plan)


@pytest.mark.parametrize("forward", [0, 1, 2])
def test_default_is_the_forward_depth(forward):
    """None (the default) prices the backward at the forward's depth: the same estimate to the bit."""
    default = _estimate(zero3_prefetch_layers=forward)
    stated = _estimate(zero3_prefetch_layers=forward, zero3_backward_prefetch_layers=forward)
    assert default.step_time_s == stated.step_time_s
    assert default.peak_stage.buffers_bytes == stated.peak_stage.buffers_bytes


def test_no_backward_prefetch_exposes_more_and_holds_no_more():
    """Depth 0 in the backward exposes more data-parallel time than 1 with the forward unchanged, and
    the resident gathered layers stay (1 + forward depth); a deeper backward holds one layer more per
    layer of depth (step.stage_memory.zero3_gathered_bytes at max(forward, backward))."""
    one, none = _estimate(), _estimate(zero3_backward_prefetch_layers=0)
    assert none.breakdown.dp_comm_s > one.breakdown.dp_comm_s
    assert none.breakdown.forward_s == one.breakdown.forward_s
    assert none.peak_stage.buffers_bytes == one.peak_stage.buffers_bytes
    graph = BLOCK_KINDS["decoder"].graph(
        load_model("gpt3-13b"), LayerShape(1, 1, 1, 2048, False, "unfused", "fp16")
    )
    deeper = _estimate(zero3_backward_prefetch_layers=2)
    assert math.isclose(
        deeper.peak_stage.buffers_bytes - one.peak_stage.buffers_bytes,
        2 * graph.weight_params,
        rel_tol=1e-12,
    )


def test_hf_transformers_fsdp_prefetches_nothing_in_backward():
    """Trainer/Accelerate's FSDP1 backward_prefetch defaults to NO_PREFETCH (None): depth 0 in the backward,
    one unit ahead in the forward; the profiles that state none keep the forward's (None)."""
    fields = framework_plan_fields(load_framework("hf-transformers-fsdp"), {})
    assert fields["zero3_backward_prefetch_layers"] == 0 and fields["zero3_prefetch_layers"] == 1
    for name in ("torchtitan", "llm-foundry", "hf-transformers-deepspeed", "deepspeed"):
        assert framework_plan_fields(load_framework(name), {})[
            "zero3_backward_prefetch_layers"
        ] in (
            None,
            1,
        )


BASE = ["estimate", "--model", "gpt3-13b", "--system", "dgx-a100-80gb", "--gpus", "64"]
BASE += ["--zero", "3", "--recompute", "full", "--global-batch", "64", "--json"]


def _cli(capsys, *argv: str):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return (0 if code is None else code), out, err


def test_cli_option_and_its_refusal(capsys):
    """--zero3-backward-prefetch-layers sets the plan field (0 exposes more than the default); a value
    out of range is one error line with exit 2."""
    code, out, _ = _cli(capsys, *BASE)
    default = json.loads(out)
    code0, out0, _ = _cli(capsys, *BASE, "--zero3-backward-prefetch-layers", "0")
    zero = json.loads(out0)
    assert code == code0 == 0
    assert zero["breakdown"]["dp_comm_s"] > default["breakdown"]["dp_comm_s"]
    code, _, err = _cli(capsys, *BASE, "--zero3-backward-prefetch-layers", "9")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--zero3-backward-prefetch-layers" in lines[0]
