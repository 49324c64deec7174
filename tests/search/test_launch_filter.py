"""``--framework F`` searches only plans F's exporters write (search.launch), exactly: megatron-core and its recipe
profiles (Megatron-LM, NeMo), torchtitan, DeepSpeed."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.export import export_plan
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search import launch
from paraplan.search.launch import state_allowed, targets
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.specs.rules import megatron_fsdp_rule, model_parts_rule


def problem(small_problem, framework):
    """The small search (tests/conftest.py small_problem) over micro-batches 2, 4 and tp 1, 2 under ``framework``."""
    return small_problem(micro_batch=(2, 4), tp=(1, 2), framework=framework)


@pytest.fixture(scope="module")
def both(small_problem):
    p = problem(small_problem, "megatron-core")
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


def test_the_unfiltered_space_holds_plans_megatron_refuses(small_problem):
    """Without the profile the same space keeps ZeRO 2/3 at pp > 1 (the rule the filter applies)."""
    free, kept = problem(small_problem, None), problem(small_problem, "megatron-core")
    assert {o.zero for o in free.state_options(8, 2)} >= {2, 3}
    assert {o.zero for o in kept.state_options(8, 2)} <= {0, 1}
    assert {o.zero for o in kept.state_options(8, 1)} >= {2, 3}
    assert megatron_fsdp_rule(2, 2) and not megatron_fsdp_rule(2, 1)
    assert not state_allowed("megatron-core", 1, False, True, 1)  # gather overlap without reduce
    assert search(free, top_k=1).candidates > search(kept, top_k=1).candidates


def launcher_problem(framework, **fields):
    base = dict(
        model=load_model("gpt3-1.3b"),
        system=load_system("dgx-a100-80gb"),
        gpus=16,
        global_batch=64,
        seq_length=2048,
        micro_batch=(1, 2),
        tp=(1, 2),
        pp=(1, 2, 4),
        framework=framework,
    )
    return SearchProblem(**{**base, **fields})


@pytest.mark.parametrize(
    ("framework", "exporters"),
    [
        ("torchtitan", ("torchtitan",)),
        ("torchtitan-compiled", ("torchtitan",)),
        ("deepspeed", ("deepspeed",)),
        ("nemo-24.09", ("megatron", "nemo")),
    ],
)
def test_every_launcher_searches_only_plans_its_exporters_write_exactly(framework, exporters):
    """The filtered search equals the exhaustive one over the same space, and every plan it ranks is written
    by each exporter of its launcher (the start-up checks of export/facts pass)."""
    p = launcher_problem(framework)
    fast, slow = search(p, top_k=8), exhaustive_search(p, top_k=8)
    assert [r.plan for r in fast.plans] == [r.plan for r in slow.plans]
    assert len(fast.plans) == 8
    assert targets(framework) == exporters
    for ranked in fast.plans:
        for target in exporters:
            export_plan(target, ranked.plan, p.model)  # raises ExportRefused otherwise


def test_the_launcher_rules_remove_what_their_frameworks_refuse():
    free, titan, ds = (launcher_problem(f) for f in (None, "torchtitan", "deepspeed"))
    assert {o.zero for o in titan.state_options(8, 2)} == {2, 3}  # FSDP2: no ZeRO 0/1 searched
    assert {o.zero for o in ds.state_options(4, 2)} <= {0, 1}  # pipeline engine: ZeRO 0/1
    assert 3 not in {o.zero for o in ds.state_options(8, 1)}  # 16 GPUs, dp 8: AutoTP 2, no ZeRO 3
    assert 3 in {o.zero for o in ds.state_options(16, 1)}
    assert {f.cp for f in ds.factorizations} == {1} and {f.cp for f in free.factorizations} > {1}
    assert {k.sequence_parallel for k in titan.layer_knobs(2, 1)} == {True}
    assert {k.sequence_parallel for k in ds.layer_knobs(2, 1)} == {False}
    assert {k.recompute for k in titan.layer_knobs(1, 1)} == {"none", "full"}
    assert {o.schedule for o in ds.schedule_options(2, 8)} == {"1f1b"}
    assert {o.schedule for o in titan.schedule_options(2, 8)} >= {"gpipe", "interleaved"}
    assert titan.offload_options == ds.offload_options == [(False, False, False)]
    assert not launch.restricted("megatron-deepspeed")  # its launch is Megatron-DeepSpeed's own


def test_a_setting_the_framework_cannot_state_is_refused_by_field():
    with pytest.raises(InputError, match=r"^dtype: 'fp8' is not allowed; deepspeed"):
        launcher_problem("deepspeed", dtype="fp8", system=load_system("dgx-h100-80gb")).check()
    with pytest.raises(InputError, match=r"^recompute: 'selective' is not allowed"):
        launcher_problem("torchtitan", recompute=("selective",)).check()
    launcher_problem("torchtitan", recompute=("selective", "full")).check()


def test_torchtitan_searches_every_split_its_exporter_writes():
    """torchtitan states any split as module_fqns_per_model_part (export/torchtitan_split.py): with
    --vary-split the accounted splits and an uneven default split (26 layers over 4 stages) are
    searched, one rule (specs.rules.model_parts_rule) leaving out a stage with fewer layers than its
    chunks, and every row the search returns exports (the start-up checks of export/facts pass)."""
    model = load_model("gpt3-1.3b").model_copy(update={"layers": 26})
    p = launcher_problem("torchtitan", model=model, vary_split=True)
    fast, slow = search(p, top_k=200), exhaustive_search(p, top_k=200)
    assert [r.plan for r in fast.plans] == [r.plan for r in slow.plans]
    plans = [r.plan for r in fast.plans]
    assert len(plans) == 200
    assert any(q.embedding_as_layer or q.loss_as_layer for q in plans)  # accounted splits
    assert any(q.pp == 4 and q.vpp == 1 and not q.embedding_as_layer for q in plans)  # 7 7 6 6
    for plan in plans:
        export_plan("torchtitan", plan, model)  # raises ExportRefused otherwise
    assert launch.stages_allowed("torchtitan", [7, 7, 6, 6], 1)
    assert not launch.stages_allowed("torchtitan", [1, 2], 2)
    assert model_parts_rule([1, 2], 2) == (
        "a stage with fewer layers than its 2 chunks leaves a torchtitan model part without "
        "layers (layers per stage [1, 2])"
    )
    # the last part may hold norm and output alone, the first tok_embeddings alone (torchtitan's own
    # generate_llm_fqn_per_model_part writes such parts)
    assert launch.stages_allowed("torchtitan", [2, 1], 2)
    assert model_parts_rule([1, 2], 2, embedding_units=1) is None
    assert model_parts_rule([7, 7, 6, 6], 2) is None and model_parts_rule([5], 8)
    # the filter reads the split's accounted units as the exporter does: [3, 4] at vpp 4 leaves an empty
    # middle part without them, none when the embedding and loss take chunk 0 and the last chunk
    assert not launch.stages_allowed("torchtitan", [3, 4], 4)
    assert launch.stages_allowed("torchtitan", [3, 4], 4, units=(1, 1))


def test_a_torchtitan_depth_that_does_not_divide_the_layers_is_searched():
    """94 layers over pp 4 or 8: an uneven default split, written as model parts (it used to be
    refused before the search, 'torchtitan splits the 94 layers evenly')."""
    launcher_problem("torchtitan", model=load_model("qwen3-235b-a22b"), pp=(4, 8)).check()
