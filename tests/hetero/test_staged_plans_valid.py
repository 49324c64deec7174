"""Every plan the per-stage searches return passes the per-stage plan check (issue 31): ``search --cluster``
(search_cluster) and ``search --non-uniform`` (search_non_uniform, exact and alleviation modes) never
propose a plan that specs.stage_plan.stage_plan_violations, the estimator's own check, refuses.

Random small problems, deterministic (hypothesis with derandomize): models with fewer key/value heads than
query heads (GQA, MQA) and MLP widths tp may not divide (specs.rules.tp_rules' ffn_hidden part), clusters of
one or two pools, some pools using part of their nodes' GPUs, each framework's launcher (or none), sequence
parallelism on or off over sequences tp may not divide (specs.rules.sequence_parallel_rule)."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.alleviate import StageConfig
from paraplan.search.staged.hetero import searched_modes
from paraplan.search.staged.problem import under_profile
from paraplan.search.staged.non_uniform import (
    _compositions,
    _stage_choices,
    _stage_settings_from,
    non_uniform_space_size,
    search_non_uniform,
)
from paraplan.catalog import load_framework
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.recompute import stage_fields
from paraplan.specs.stage_plan import stage_plan_violations

SYSTEMS = ("aws-p3.8xlarge", "aws-g4dn.12xlarge", "dgx-a100-80gb")  # 4, 4 and 8 GPUs per node
CHECK = settings(
    max_examples=30,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@st.composite
def models(draw) -> ModelSpec:
    """A small decoder with heads a multiple of kv_heads; kv_heads often below the tp a node allows; an MLP
    width of 4h or 3h, or 4h + 2 or 4h + 6, which tp 4 and 8 do not divide (the ffn_hidden part of tp_rules)."""
    kv_heads = draw(st.sampled_from((1, 2, 4)))
    heads = kv_heads * draw(st.sampled_from((2, 4, 8)))
    head_dim = draw(st.sampled_from((32, 64)))
    hidden = heads * head_dim
    ffn_hidden = draw(st.sampled_from((4 * hidden, 3 * hidden, 4 * hidden + 2, 4 * hidden + 6)))
    return ModelSpec(
        name=f"gqa-{heads}q{kv_heads}kv-f{ffn_hidden}",
        layers=draw(st.integers(2, 6)),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=ffn_hidden,
        vocab=4096,
        max_position=1024,
    )


@st.composite
def pools(draw, count: int) -> list[dict]:
    out = []
    for i in range(count):
        system = draw(st.sampled_from(SYSTEMS))
        per_node = 8 if system.startswith("dgx") else 4
        nodes = draw(st.integers(1, 2))
        whole = draw(st.booleans())  # every GPU of the nodes, or a part (any count, odd ones too)
        gpus = nodes * per_node if whole else draw(st.integers(1, nodes * per_node))
        out.append({"name": f"p{i}", "system": system, "nodes": nodes, "gpus": gpus})
    return out


# the launchers (None: no framework's) and (sequence parallelism, sequence length): 100 tokens split over tp 4,
# not 8; 90 over tp 2 only
FRAMEWORKS = (None, "megatron-core", "torchtitan", "deepspeed")
SEQUENCES = ((False, 256), (True, 256), (True, 100), (True, 90))
stacks = st.tuples(st.sampled_from(FRAMEWORKS), st.sampled_from(SEQUENCES))


def _problem(model, pool_list, batch_log2: int, stack=(None, (False, 256))) -> HeteroProblem | None:
    """The problem as the command reads it (under the framework's profile: search.staged.problem.under_profile);
    None where it refuses the problem by name (a dtype the pool's GPUs or the launcher lack, say)."""
    framework, (sequence_parallel, seq_length) = stack
    cluster = cluster_from_dict({"pools": pool_list})
    given = {"global_batch": 2**batch_log2, "seq_length": seq_length}
    # attention None: the kernel the pools' GPUs run (--attention stated, as on V100 / T4 a user must)
    given |= {"sequence_parallel": sequence_parallel, "attention": None}
    if framework is not None:
        cluster, given = under_profile(load_framework(framework), cluster, given)
    try:
        return HeteroProblem(model, cluster, **given)
    except InputError as refused:
        assert ": " in str(refused)  # field: what is not allowed
        return None


def _assert_valid(problem: HeteroProblem | None, search) -> None:
    """Every plan ``search(problem)`` returns passes the per-stage check (nothing to check on a refused problem)."""
    if problem is None:
        return
    for candidate in search(problem).plans:
        broken = stage_plan_violations(candidate.plan, problem.model, problem.cluster)
        assert not broken, (candidate.label, [str(v) for v in broken])


@CHECK
@given(models(), st.integers(1, 2).flatmap(pools), st.integers(2, 5), stacks)
def test_search_cluster_plans_pass_the_stage_plan_check(model, pool_list, batch_log2, stack):
    problem = _problem(model, pool_list, batch_log2, stack)
    _assert_valid(problem, lambda p: search_cluster(p, top_k=3))


@CHECK
@given(models(), pools(2), st.integers(2, 5), stacks)
def test_two_pool_cluster_plans_pass_the_stage_plan_check(model, pool_list, batch_log2, stack):
    """Two pools every time (the draw above settles on one pool for most examples): stages on either pool
    and on both GPU types, each checked as the estimator checks it."""
    problem = _problem(model, pool_list, batch_log2, stack)
    _assert_valid(problem, lambda p: search_cluster(p, top_k=3))


@CHECK
@given(models(), pools(1), st.integers(2, 5), st.sampled_from((0, 3000)), stacks)
def test_search_non_uniform_plans_pass_the_stage_plan_check(
    model, pool_list, batch_log2, exact, stack
):
    """exact_limit 0 forces the alleviation path, 3000 (the default) lets small spaces be enumerated."""
    problem = _problem(model, pool_list, batch_log2, stack)
    _assert_valid(
        problem,
        lambda p: search_non_uniform(p, top_k=3, exact_limit=exact, time_budget_s=0.5),
    )


# ---- the non-uniform space, counted without listing it ------------------------------------------
def _listed_space_size(problem: HeteroProblem, max_stages: int, counts: list[int]) -> int:
    """The count by listing: every composition of the GPUs into stages, each stage's tp (a power of two
    dividing its GPUs) and recompute mode, every micro-batch count (the loop search_non_uniform ran)."""
    total = 0
    for pp in range(1, max_stages + 1):
        for comp in _compositions(problem.cluster.gpus, pp):
            ways = 1
            for g in comp:
                ways *= sum(1 for t in range(1, g + 1) if t & (t - 1) == 0 and g % t == 0)
                ways *= len(problem.recompute)
            total += ways * len(counts)
    return total


@pytest.mark.parametrize("recompute", [("none",), ("none", "full"), ("none", "selective", "full")])
def test_non_uniform_space_size_equals_the_listed_count(recompute):
    model = ModelSpec(layers=4, hidden=256, heads=4, ffn_hidden=1024, vocab=4096, max_position=512)
    for gpus in (1, 2, 3, 5, 8, 12, 16, 24, 33):
        cluster = cluster_from_dict(
            {"pools": [{"name": "a", "system": "dgx-a100-80gb", "nodes": 5, "gpus": gpus}]}
        )
        problem = HeteroProblem(model, cluster, 16, 256, recompute=recompute)
        for max_stages in (1, 2, 3, 4, 5):
            for counts in ([1], [1, 2, 4]):
                assert non_uniform_space_size(problem, max_stages, counts) == _listed_space_size(
                    problem, max_stages, counts
                ), (gpus, max_stages, counts)


def test_non_uniform_space_size_is_cheap_at_scale():
    """16,384 GPUs in four stages: C(16383, 3) ≈ 7.3e11 compositions, counted in well under a second."""
    model = ModelSpec(layers=4, hidden=256, heads=4, ffn_hidden=1024, vocab=4096, max_position=512)
    cluster = cluster_from_dict(
        {"pools": [{"name": "a", "system": "dgx-a100-80gb", "nodes": 2048}]}
    )
    problem = HeteroProblem(model, cluster, 1024, 256)
    start = time.process_time()
    size = non_uniform_space_size(problem, 4, [1])
    assert time.process_time() - start < 2.0
    assert size > math.comb(16383, 3) * 2**4  # every stage at least tp 1 with two recompute modes


@pytest.mark.parametrize("framework", ["torchtitan", "megatron-core", "deepspeed"])
def test_launcher_space_lists_every_launchable_combination_and_counts_it(framework):
    """With a launcher that runs equal stages only, the exact search lists equal stages alone
    (non_uniform._stage_choices), loses none the full listing's launch filter keeps
    (_stage_settings_from), and counts that space in closed form (non_uniform_space_size)."""
    model = ModelSpec(layers=8, hidden=256, heads=4, ffn_hidden=1024, vocab=4096, max_position=512)
    cluster = cluster_from_dict({"pools": [{"name": "a", "system": "dgx-a100-80gb", "nodes": 1}]})
    problem = HeteroProblem(model, cluster, 16, 256, framework=framework)
    free = HeteroProblem(model, cluster, 16, 256)
    modes, counts = searched_modes(problem), [1, 2, 4]
    for pp in (1, 2, 3, 4):
        kept = {(comp, choice) for comp, choice in _stage_choices(problem, pp, modes)}
        for comp, choice in _stage_choices(free, pp, modes):
            configs = [
                StageConfig.of(0, g, t, *stage_fields(rc)) for g, (t, rc) in zip(comp, choice)
            ]
            if any(_stage_settings_from(problem, configs, m) for m in counts):
                assert (comp, choice) in kept, (pp, comp, choice)
    listed = sum(len(list(_stage_choices(problem, pp, modes))) for pp in (1, 2, 3, 4))
    assert non_uniform_space_size(problem, 4, counts) == listed * len(counts)
