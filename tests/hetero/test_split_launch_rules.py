"""The per-stage searches keep a launcher's split rules by construction (issue 31, review finding 2):
search.staged.hetero.split_launchable checks only the one split a launcher states (DeepSpeed's partition
"uniform", search.launch.fixed_split), because the launcher's other split rule, search.launch.stages_allowed
(torchtitan: every model part holds a layer), holds for every split the searches make. Shown here over every
split the split solver's range matrices allow (hetero.stage_matrices) and every split the alleviation
proposes (non_uniform: stages of at least one block each), on small models under each launcher."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.search import launch
from paraplan.search.staged.splits import (
    fixed_bounds,
    lower_bound,
    split_launchable,
    split_refusal,
    stage_matrices,
)
from paraplan.search.staged.hetero import (
    HeteroProblem,
    profile_fields,
)
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.step.blocks import model_blocks
from paraplan.step.per_stage import StageSetting

MODEL = {"hidden": 512, "heads": 8, "ffn_hidden": 2048, "vocab": 8000, "max_position": 512}
LAUNCHERS = ("torchtitan", "deepspeed", "megatron-core", None)


def _problem(framework: str | None, layers: int) -> HeteroProblem:
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    model = ModelSpec(name=f"tiny{layers}", **(MODEL | {"layers": layers}))
    if framework is None:
        return HeteroProblem(model, cluster, 16, 512)
    priced, fields = profile_fields(load_framework(framework), cluster)
    return HeteroProblem(model, priced, 16, 512, **fields)


def _settings(problem: HeteroProblem, pp: int) -> list[StageSetting]:
    """pp stages of 8 / pp GPUs each on the one pool: tp 1, micro-batch 1."""
    pool, per = problem.cluster.pools[0].name, 8 // pp
    m = problem.global_batch // per
    return [
        StageSetting(((pool, k * per, per),), ParallelDims(dp=per, pp=pp), 1, "none", (), k, m)
        for k in range(pp)
    ]


def _layers(bounds: tuple[int, ...], n: int) -> list[int]:
    """Decoder layers of each stage of a split of n blocks (embedding first, head last)."""
    return [b - a - (a == 0) - (b == n) for a, b in itertools.pairwise(bounds)]


def _old_guard(problem: HeteroProblem, bounds: tuple[int, ...]) -> bool:
    """The guard split_stages used to call: stages_allowed on the stages' layers and the fixed split."""
    n = len(model_blocks(problem.model))
    fixed = fixed_bounds(problem, len(bounds) - 1)
    allowed = launch.stages_allowed(problem.framework, _layers(bounds, n), problem.vpp)
    return allowed and (fixed is None or bounds == fixed)


def _splits(n: int, pp: int):
    """Every split of n blocks over pp non-empty stages, as block boundaries."""
    for cuts in itertools.combinations(range(1, n), pp - 1):
        yield (0, *cuts, n)


@pytest.mark.parametrize("framework", LAUNCHERS)
@pytest.mark.parametrize("layers,pp", [(6, 2), (6, 4), (3, 4), (2, 2)])
def test_every_split_the_solver_can_take_keeps_the_launcher_rules(framework, layers, pp):
    """Every split whose ranges are all finite in the solver's matrices (the only splits balance_split
    returns) passes the guard split_stages called: so that guard could never refuse there."""
    problem = _problem(framework, layers)
    settings = _settings(problem, pp)
    times, tails = stage_matrices(problem, settings, lower_bound(problem, settings)[1])
    n = times.shape[1] - 1
    takeable = [
        b
        for b in _splits(n, pp)
        if all(
            np.isfinite(times[i, a, c]) and np.isfinite(tails[i, a, c])
            for i, (a, c) in enumerate(itertools.pairwise(b))
        )
    ]
    assert takeable, "the matrices allow no split: the check would be vacuous"
    assert all(_old_guard(problem, b) for b in takeable)
    fixed = fixed_bounds(problem, pp)
    assert (fixed is not None) == (framework == "deepspeed")
    if fixed is not None:  # the launcher's one split, and nothing else
        assert takeable == [fixed]


@pytest.mark.parametrize("framework", LAUNCHERS)
@pytest.mark.parametrize("layers,pp", [(6, 3), (6, 4), (3, 5)])
def test_the_alleviation_splits_need_only_the_fixed_split_check(framework, layers, pp):
    """The alleviation's splits (non_uniform: every stage at least one block) keep stages_allowed, so
    split_launchable is the old guard; it refuses exactly the splits other than a launcher's one."""
    problem = _problem(framework, layers)
    n = len(model_blocks(problem.model))
    refused = 0
    for bounds in _splits(n, pp):
        assert launch.stages_allowed(problem.framework, _layers(bounds, n), problem.vpp)
        assert split_launchable(problem, bounds) == _old_guard(problem, bounds)
        refused += not split_launchable(problem, bounds)
    fixed = fixed_bounds(problem, pp)
    total = sum(1 for _ in _splits(n, pp))
    assert refused == (total - 1 if fixed is not None else 0)


def test_torchtitan_refuses_an_inner_stage_without_layers():
    """The rule the searches never meet is a real one: a middle stage without decoder layers leaves a
    torchtitan model part empty (specs.rules.model_parts_rule), the split a stage of no block would make."""
    assert not launch.stages_allowed("torchtitan", [3, 0, 3], 1)
    assert launch.stages_allowed("torchtitan", [0, 6, 0], 1)


def test_split_launchable_refuses_a_split_stages_allowed_refuses_with_its_reason():
    """split_launchable checks stages_allowed too (review finding 7), though no split the searches make
    meets it: a middle stage of no block leaves torchtitan's model part without layers (layers 3, 0, 3)."""
    problem = _problem("torchtitan", 6)
    bounds = (0, 4, 4, 8)  # embedding + 3 layers | nothing | 3 layers + head
    assert not launch.stages_allowed("torchtitan", _layers(bounds, 8), 1)
    assert not split_launchable(problem, bounds)
    assert split_refusal(problem, bounds) == (
        "split [0, 4, 4, 8]: torchtitan's launcher cannot state it (decoder layers per stage "
        "[3, 0, 3], 1 model part(s) each; search.launch.stages_allowed)"
    )
    assert split_refusal(problem, (0, 4, 5, 8)) is None


def test_a_split_other_than_the_launchers_one_gets_its_reason():
    problem = _problem("deepspeed", 6)
    fixed = fixed_bounds(problem, 2)
    assert split_refusal(problem, fixed) is None
    assert split_refusal(problem, (0, 2, 8)) == (
        f"split [0, 2, 8]: deepspeed's launcher states only the split {list(fixed)} "
        "(search.launch.fixed_split)"
    )
