"""``--framework megatron-core`` searches only plans Megatron-LM and NeMo launch (search.launch), exactly."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.export import export_plan
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.launch import state_allowed
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.rules import megatron_fsdp_rule


def problem(framework):
    return SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=load_system("dgx-a100-80gb"),
        gpus=8,
        global_batch=32,
        seq_length=2048,
        micro_batch=(2, 4),
        recompute=("none",),
        tp=(1, 2),
        vary_placement=False,
        framework=framework,
    )


@pytest.fixture(scope="module")
def both():
    p = problem("megatron-core")
    return p, search(p, top_k=10), exhaustive_search(p, top_k=10)


def test_the_filtered_search_is_exact(both):
    _, fast, slow = both
    assert [r.plan for r in fast.plans] == [r.plan for r in slow.plans]
    assert [r.key for r in fast.plans] == [r.key for r in slow.plans]


def test_every_plan_of_the_filtered_search_exports_to_megatron_and_nemo(both):
    p, fast, _ = both
    assert len(fast.plans) == 10
    for ranked in fast.plans:
        for target in ("megatron", "nemo"):
            export_plan(target, ranked.plan, p.model)  # raises ExportRefused otherwise


def test_the_unfiltered_space_holds_plans_megatron_refuses():
    """Without the profile the same space keeps ZeRO 2/3 at pp > 1 (the rule the filter applies)."""
    free, kept = problem(None), problem("megatron-core")
    assert {o.zero for o in free.state_options(8, 2)} >= {2, 3}
    assert {o.zero for o in kept.state_options(8, 2)} <= {0, 1}
    assert {o.zero for o in kept.state_options(8, 1)} >= {2, 3}
    assert megatron_fsdp_rule(2, 2) and not megatron_fsdp_rule(2, 1)
    assert not state_allowed("megatron-core", 1, False, True, 1)  # gather overlap without reduce
    assert search(free, top_k=1).candidates > search(kept, top_k=1).candidates
