"""The softmax's exponentials bound fused attention (cost.compute.attention_time_s); Blackwell Ultra doubles them."""

from __future__ import annotations

import itertools

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.compute import attention_time_s
from paraplan.cost.flops import softmax_exponentials
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

CALL = (8192, 8192, 64, True)  # one kernel call: 8k queries and keys, head dim 64, causal
FLOPS = 4.0 * 8192 * 8192 * 64 * 32  # 32 heads' forward FLOPs


def _with_rate(system, rate):
    data = system.model_dump()
    data["accelerator"]["softmax_exp_rate"] = rate
    return type(system).model_validate(data)


def test_exponentials_are_one_per_score():
    assert softmax_exponentials(FLOPS, 0.5, 64) == pytest.approx(8192 * 8192 * 32 * 0.5)
    assert softmax_exponentials(0.0, 0.5, 64) == 0.0


def test_the_slower_of_matrix_products_and_exponentials_bounds_the_kernel():
    b200 = load_system("dgx-b200").accelerator
    exps = softmax_exponentials(FLOPS, 0.5, 64)
    unbounded = attention_time_s(
        FLOPS,
        0.5,
        b200.model_copy(update={"softmax_exp_rate": None}),
        "bf16",
        CALL,
        exponentials=exps,
    )
    assert attention_time_s(FLOPS, 0.5, b200, "bf16", CALL, exponentials=exps) >= unbounded
    slow = b200.model_copy(update={"softmax_exp_rate": 1e11})
    overhead = b200.efficiency.kernel_overhead_s
    assert attention_time_s(FLOPS, 0.5, slow, "bf16", CALL, exponentials=exps) == pytest.approx(
        exps / 1e11 + overhead
    )


def test_blackwell_ultra_has_twice_blackwells_exponent_rate():
    b200, b300 = (load_system(n).accelerator for n in ("dgx-b200", "dgx-b300"))
    gb200, gb300 = (load_system(n).accelerator for n in ("gb200-nvl72", "gb300-nvl72"))
    assert (
        b300.softmax_exp_rate
        == gb300.softmax_exp_rate
        == pytest.approx(2.14 * b200.softmax_exp_rate)
    )
    assert gb200.softmax_exp_rate == b200.softmax_exp_rate


@pytest.mark.parametrize("system", ["dgx-h100-80gb", "dgx-b200", "dgx-b300"])
def test_step_time_never_decreases_when_exponentials_get_slower(system):
    model, base = load_model("gpt3-1.3b"), load_system(system)
    plan = PlanSpec(gpus=8, global_batch=16, seq_length=16384, micro_batch=1, dtype="bf16")
    times = [
        estimate(model, _with_rate(base, rate), plan).step_time_s
        for rate in (None, 1e13, 1e12, 1e11, 1e10)
    ]
    assert all(a <= b for a, b in itertools.pairwise(times))
    assert times[-1] > times[0]


def test_hopper_and_ampere_rates_are_sixteen_exponentials_per_sm_per_clock():
    """16 MUFU.EX2 results per SM per clock (CUDA C++ Programming Guide, compute capability 8.0 and 9.0) x SMs x
    the SM clock: every GH100 SXM configuration at 1.98 GHz, the A100 at its 1.41 GHz boost clock."""
    for name in (
        "dgx-h100-80gb",
        "dgx-h200",
        "dgx-h800",
        "gh200-96gb-quad",
        "alps-gh200",
        "hgx-h100-96gb-500w",
    ):
        acc = load_system(name).accelerator
        assert acc.softmax_exp_rate == pytest.approx(16 * acc.sm_count * 1.98e9, rel=1e-3), name
    for name in ("dgx-a100-80gb", "dgx-a100-40gb"):
        acc = load_system(name).accelerator
        assert acc.softmax_exp_rate == pytest.approx(16 * 108 * 1.41e9, rel=2e-3), name
    # the Alps GPU, capped at 410 W, runs its exponentials at its sustained clock, slower than the uncapped quad
    alps, quad = (load_system(n).accelerator for n in ("alps-gh200", "gh200-96gb-quad"))
    assert alps.exp_rate() == pytest.approx(alps.softmax_exp_rate * alps.clock_fraction())
    assert alps.exp_rate() < quad.exp_rate() == quad.softmax_exp_rate
