"""One value for a plan's degrees (issue 31): search rows and per-stage settings carry a specs.parallel.ParallelDims,
and a row's plan takes its degrees and placement from it (ParallelDims.plan_fields, PlanSpec.dims' inverse)."""

from __future__ import annotations

import itertools

from paraplan.catalog import load_model, load_system
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.space import SearchProblem, grid, plan_of, rows
from paraplan.specs.parallel import DEGREE_FIELDS, DIM_NAMES, ParallelDims
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.step.per_stage import stage_settings
from paraplan.step.placement import StageDims


def test_plan_fields_are_the_degrees_and_the_placement_label():
    dims = ParallelDims(
        tp=2, cp=1, dp=4, pp=8, ep=4, etp=1, placement_order=("dp", "tp", "cp", "pp")
    )
    assert dims.plan_fields() == {
        "tp": 2,
        "cp": 1,
        "dp": 4,
        "pp": 8,
        "ep": 4,
        "etp": 1,
        "placement": "dp-tp-cp-pp",
    }


def test_a_rows_plan_has_the_rows_dims():
    """Every candidate plan of a small space has its row's ParallelDims (degrees and placement order), and the
    row's placement label is that order's."""
    problem = SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=load_system("dgx-a100-80gb"),
        gpus=16,
        seq_length=2048,
        global_batch=32,
        micro_batch=(1,),
        vary_offload=False,
        vary_overlap=False,
    )
    seen = set()
    for row in rows(problem):
        plan = plan_of(problem, row, grid(problem, row)[0])
        assert plan.dims == row.dims
        assert plan.placement == row.placement == "-".join(row.dims.placement_order)
        assert row.microbatches == 32 // row.dims.dp
        seen.add(row.dims.placement_order)
    assert len(seen) > 1  # placements other than the default were enumerated


def test_stage_settings_carry_the_stage_degrees_and_the_pipeline_depth():
    """A per-stage plan's settings: each stage's tp and dp (gpus / tp) and the plan's pp, in one ParallelDims."""
    cluster = cluster_from_dict({"pools": [{"name": "a", "system": "dgx-a100-80gb", "nodes": 1}]})
    plan = stage_plan_from_dict(
        {
            "global_batch": 16,
            "seq_length": 1024,
            "microbatches": 4,
            "stages": [
                {"pool": "a", "gpus": 4, "layers": 5, "tp": 2},
                {"pool": "a", "gpus": 4, "layers": 3, "tp": 1},
            ],
        }
    )
    settings = stage_settings(plan, cluster)
    assert [s.dims for s in settings] == [
        ParallelDims(tp=2, dp=2, pp=2),
        ParallelDims(tp=1, dp=4, pp=2),
    ]


def test_the_array_form_of_the_degrees_names_the_placed_degrees():
    """step.placement.StageDims (degrees as arrays over a search's candidates) holds ParallelDims' placed
    degrees under their names, in their order."""
    assert StageDims._fields == DIM_NAMES == ("tp", "cp", "dp", "pp")
    assert DEGREE_FIELDS == ("tp", "cp", "dp", "pp", "ep", "etp")
    assert DEGREE_FIELDS[: len(StageDims._fields)] == StageDims._fields


def test_the_search_degree_tuples_read_as_parallel_dims():
    """search.options.Factorization and search.bounds.blocks.Block hold the degrees under DIM_NAMES, in that order
    (ParallelDims'), so ``ParallelDims(*f)`` reads a factorization and row_dims adds the expert option and the
    placement label."""
    from paraplan.search.bounds.blocks import Block
    from paraplan.search.options import ExpertOption, Factorization, row_dims

    assert Factorization._fields == DIM_NAMES == StageDims._fields
    assert Block._fields[: len(DIM_NAMES)] == DIM_NAMES
    degrees = Factorization(2, 1, 4, 8)
    assert ParallelDims(*degrees) == ParallelDims(tp=2, cp=1, dp=4, pp=8)
    expert = ExpertOption(ep=4, etp=1, dispatcher="alltoall", a2a_overlap=False)
    assert row_dims(degrees, "dp-tp-cp-pp", expert) == ParallelDims(
        tp=2, cp=1, dp=4, pp=8, ep=4, etp=1, placement_order=("dp", "tp", "cp", "pp")
    )


def test_the_canonical_order_nests_tp_pp_cp_not_the_fields_order():
    """The space lists its factorizations tp outermost, then pp, then cp (space.factorizations' loops), not in
    the fields' (tp, cp, dp, pp) order: sorting them as tuples would reorder the rows and the ties among equal
    plans. The blocks (search.bounds.blocks) follow that list, their rows contiguous."""
    from paraplan.search.bounds.blocks import blocks

    problem = SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        seq_length=8192,
        global_batch=128,
    )
    listed = problem.factorizations
    assert listed == sorted(listed, key=lambda f: (f.tp, f.pp, f.cp)) != sorted(listed)
    parts = blocks(problem)
    degrees = list(dict.fromkeys((b.tp, b.cp, b.dp, b.pp) for b in parts))
    assert degrees == [f for f in listed if f in set(degrees)] and len(degrees) > 10
    assert [b.offset for b in parts] == [0, *itertools.accumulate(b.rows for b in parts[:-1])]
