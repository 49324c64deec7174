"""Issue 31: an estimate keeps its row's facts and block costs (step.estimate._row)
for the next plan of the same row, its plan's rules and stage inputs (step.estimate.ESTIMATE_CACHES) for the
next estimate of the same plan, and the schedules' scalar path picks the
plan's entry alone (step.schedules.by_schedule). The kept values are never changed by a later
estimate: every plan below gets the same numbers cold (caches cleared) as warm, in any order."""

from __future__ import annotations

import itertools

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.specs.plan import PlanSpec
from paraplan.step import estimate as step_estimate
from paraplan.step.build import COLD_CACHES
from paraplan.step.compose import compose_step

PLANS = [
    dict(
        gpus=64, tp=8, pp=8, vpp=3, global_batch=64, sequence_parallel=True, recompute="selective"
    ),
    dict(gpus=64, tp=8, pp=8, global_batch=64, schedule="zb-h1", zero=1),
    dict(gpus=64, tp=4, pp=4, global_batch=64, schedule="gpipe", zero=3, recompute="full"),
    dict(gpus=64, tp=8, pp=8, global_batch=64, recompute="full", recompute_num_layers=2),
    dict(gpus=64, tp=4, pp=2, global_batch=64, tp_layout="2d", tp_rows=2, placement="dp-tp-cp-pp"),
]


def _cold() -> None:
    for cache in (*COLD_CACHES, *step_estimate.ESTIMATE_CACHES):
        cache.cache_clear()


@pytest.mark.parametrize("order", [0, 1])
def test_warm_estimates_equal_cold_ones_in_any_order(order):
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plans = [PlanSpec(seq_length=2048, **fields) for fields in PLANS]
    cold = {}
    for plan in plans:
        _cold()
        cold[plan] = step_estimate.estimate(model, system, plan, with_ops=True).to_dict(True)
    sequence = plans if order == 0 else list(reversed(plans))
    for plan, _ in itertools.product(sequence, range(2)):
        warm = step_estimate.estimate(model, system, plan, with_ops=True).to_dict(True)
        assert warm == cold[plan]


def test_a_plan_estimated_again_reuses_its_inputs_and_composes_anew():
    """The second estimate of a plan reads its kept stage inputs (no new build) and returns a new result
    with the same numbers (the composition runs again; nothing of the first result is shared but frozen
    records)."""
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(seq_length=2048, **PLANS[0])
    _cold()
    first = step_estimate.estimate(model, system, plan)
    misses = step_estimate._plan_inputs.cache_info().misses
    first.plan["tp"] = 0  # a caller's change to its result's plan dict reaches no later result
    second = step_estimate.estimate(model, system, plan)
    assert step_estimate._plan_inputs.cache_info().misses == misses
    assert second is not first and second.plan["tp"] == 8
    assert (second.step_time_s, second.stages) == (first.step_time_s, first.stages)


def test_a_broken_plan_is_refused_on_every_call():
    """The kept rules (step.estimate._violations) raise again on each estimate of a broken plan."""
    from paraplan.specs.errors import InputError

    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(gpus=64, tp=3, pp=1, global_batch=64, seq_length=2048)
    for _ in range(2):
        with pytest.raises(InputError, match="tp"):
            step_estimate.estimate(model, system, plan)


ABSENT_ENTRY_PLANS = [
    *PLANS,
    dict(gpus=64, tp=4, pp=4, global_batch=64, schedule="dualpipe"),
    dict(gpus=64, tp=8, pp=2, global_batch=64, zero=2, overlap_dp_grad_reduce=True),
    dict(
        gpus=64, tp=2, pp=4, global_batch=128, schedule="interleaved", vpp=2, offload_optimizer=True
    ),
    dict(gpus=64, tp=8, pp=1, global_batch=64, zero=3),
]


@pytest.mark.parametrize("fields", ABSENT_ENTRY_PLANS)
def test_the_composition_of_the_present_entries_is_that_of_every_entry(fields):
    """step.estimate composes a plan's present stage entries only (step.estimate._plan_inputs): an absent
    entry (count 0) never attains a max and adds +0.0 to every sum, so every part is the same float, bit for
    bit, as the composition of every entry."""
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(seq_length=2048, **fields)
    _, inp, composed, _ = step_estimate._plan_inputs(model, system, plan)
    assert composed.stages == tuple(s for s in inp.stages if s.count > 0)
    whole, present = compose_step(inp), compose_step(composed)
    assert {k: float(v).hex() for k, v in present.items()} == {
        k: float(v).hex() for k, v in whole.items()
    }


# pydantic warns as the result dumps the list
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_plan_copied_with_an_unhashable_value_is_estimated_uncached():
    """A plan from ``model_copy(update=...)`` (no validation) may hold a list where the schema has a tuple:
    it cannot key the kept values (step.estimate._kept), and is estimated as the validated plan is."""
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(
        gpus=64, tp=8, pp=4, global_batch=64, seq_length=2048, stage_layers=(10, 10, 10, 10)
    )
    copied = plan.model_copy(update={"stage_layers": [10, 10, 10, 10]})
    with pytest.raises(TypeError):
        hash(copied)
    assert (
        step_estimate.estimate(model, system, copied).to_dict()["step_time_s"]
        == (step_estimate.estimate(model, system, plan).to_dict()["step_time_s"])
    )
