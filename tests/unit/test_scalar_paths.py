"""Issue 31: one plan's scalars skip numpy's per-call dispatch in the functions the search runs on arrays
(specs.split.default_first_last, step.placement.stages_tile, cost.overlap.prefetched_gather_exposed_s,
step.tail.zero_branches, step.schedules.by_schedule, step.inputs.replaced, cost.elementwise.scalar_zero); each
scalar path gives what the array path gives, element by element, bit for bit."""

from __future__ import annotations

import dataclasses
import itertools
import struct

import numpy as np

from paraplan.catalog import load_model, load_system
from paraplan.cost.elementwise import scalar_zero
from paraplan.cost.overlap import prefetched_gather_exposed_s
from paraplan.specs.plan import PlanSpec, runtime_of
from paraplan.specs.split import default_first_last
from paraplan.step import estimate as step_estimate
from paraplan.step.build import system_terms
from paraplan.step.placement import stages_tile
from paraplan.step.schedules import SCHEDULE_FLAGS, SCHEDULES, by_schedule
from paraplan.step.tail import zero_branches


def _bits(x) -> bytes:
    return struct.pack("<d", float(x))


def test_default_first_last_scalar_equals_array():
    cases = list(itertools.product([1, 7, 61, 126], [1, 2, 3, 8, 16], [0, 1], [0, 1, 2]))
    layers, pp, emb, loss = (np.array(column) for column in zip(*cases))
    first, last = default_first_last(layers, pp, emb, loss)
    for k, case in enumerate(cases):
        f, g = default_first_last(*case)
        assert (type(f), type(g)) == (int, int)
        assert (f, g) == (first[k], last[k]), case
    # hand-computed: 126 layers + 1 + 1 units over 8 stages: 16 each, 16 - 1 on the first and the last
    assert default_first_last(126, 8, 1, 1) == (15, 15)
    assert default_first_last(7, 1) == (7, 7)


def test_stages_tile_scalar_equals_array():
    gpus, domains, orders = [1, 4, 6, 8, 16, 24], [4, 8], [True, False]
    for g, d, o in itertools.product(gpus, domains, orders):
        assert stages_tile(g, d, o) == bool(stages_tile(np.array([g]), d, np.array([o]))[0])
    assert stages_tile(6, 8, True) is False and stages_tile(16, 8, True) is True


def test_prefetched_gather_scalar_equals_array():
    rng = np.random.default_rng(0)
    gather, compute = rng.uniform(0, 1e-2, 64), rng.uniform(0, 1e-2, 64)
    layers = rng.integers(1, 40, 64)
    for depth in (0, 1, 2, 0.0):
        array = prefetched_gather_exposed_s(gather, compute, layers, depth)
        for k in range(64):
            one = prefetched_gather_exposed_s(
                float(gather[k]), float(compute[k]), int(layers[k]), depth
            )
            assert _bits(one) == _bits(array[k])
    # hand-computed: g 2, c 1, L 4, d 1: 2 + 3 × max(0, 2 − 1) = 5; without prefetch 4 × 2 = 8
    assert prefetched_gather_exposed_s(2.0, 1.0, 4, 1) == 5.0
    assert prefetched_gather_exposed_s(2.0, 1.0, 4, 0) == 8.0


def test_zero_branches_of_scalars_and_arrays():
    assert [zero_branches(z) for z in (0, 1, 2, 3)] == [(0,), (1,), (1,), (3,)]
    assert zero_branches(np.int64(2)) == (1,) and zero_branches(np.array(3)) == (3,)
    assert zero_branches(np.array([0, 2, 2, 3])) == (0, 1, 3)


def test_scalar_flags_select_their_schedules_entry():
    knobs = step_estimate.grid_knobs(PlanSpec(gpus=8, pp=2, vpp=2, global_batch=8, seq_length=8))
    for name, flag in [("1f1b", None), *SCHEDULE_FLAGS.items()]:
        flags = {f: f == flag for f in SCHEDULE_FLAGS.values()}
        k = dataclasses.replace(knobs, **flags)
        assert by_schedule(k, lambda s: s) is SCHEDULES[name]
        assert by_schedule(k, lambda s: s).name == name


def test_replaced_equals_dataclasses_replace():
    model, system = load_model("gpt3-2.7b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=16, pp=4, global_batch=64, seq_length=2048, zero=1)
    inp = step_estimate.step_inputs(model, system, plan)
    stages = inp.stages[:2]
    assert step_estimate.replaced(inp, stages=stages) == dataclasses.replace(inp, stages=stages)
    block = inp.stages[0].blocks[0][0]
    assert step_estimate.replaced(block, params=3.0) == dataclasses.replace(block, params=3.0)


def test_kept_system_terms_equal_system_terms():
    system = load_system("dgx-h100-80gb")
    for fields in ({}, {"zero3_prefetch_layers": 2, "zero3_gather_unit": "tensor"}):
        plan = PlanSpec(gpus=8, global_batch=8, seq_length=8, **fields)
        kept = step_estimate._system_terms(system, "bf16", step_estimate._runtime_values(plan))
        assert kept == system_terms(system, "bf16", plan)
        assert kept == system_terms(system, "bf16", runtime_of(plan))


def test_scalar_zero_is_one_plans_zero_only():
    assert all(scalar_zero(x) for x in (0, 0.0, -0.0, False, np.float64(0.0)))
    assert not any(scalar_zero(x) for x in (1, 1e-300, True, np.array(0.0), np.zeros(3)))
