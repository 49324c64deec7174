"""step.layer_shape.layer_shape_from: the one rule every path builds a layer's shape by (issue 31), against
values worked out by hand."""

from __future__ import annotations

from paraplan.graph.ops import ExpertShape
from paraplan.graph.transformer import LayerShape
from paraplan.step.layer_shape import layer_shape_from


def test_sequence_parallelism_needs_tp_above_one():
    # asked with tp 4: on; asked with tp 1: off (nothing to split the tokens over)
    assert layer_shape_from(4, 1, 2, 2048, True, "flash", "bf16").sequence_parallel is True
    assert layer_shape_from(1, 1, 2, 2048, True, "flash", "bf16").sequence_parallel is False
    assert layer_shape_from(4, 1, 2, 2048, False, "flash", "bf16").sequence_parallel is False


def test_a_2d_grid_splits_the_activations_with_its_rows_and_panels():
    # tp 8 on a 2D grid, rows unset: the squarest grid 2 × 4, panels max(2, 4) = 4; SP on though not asked
    shape = layer_shape_from(8, 1, 1, 4096, False, "flash", "bf16", tp_layout="2d")
    assert (shape.sequence_parallel, shape.tp_rows, shape.summa_panels) == (True, 2, 4)
    # 4 rows × 2 columns, 3 panels asked
    shape = layer_shape_from(
        8, 1, 1, 4096, False, "flash", "bf16", tp_layout="2d", tp_rows=4, summa_panels=3
    )
    assert (shape.tp_rows, shape.summa_panels) == (4, 3)
    # any other layout: one row, one panel, whatever rows are given
    shape = layer_shape_from(8, 2, 1, 4096, False, "flash", "bf16", tp_layout="2d-seq", tp_rows=4)
    assert (shape.sequence_parallel, shape.tp_rows, shape.summa_panels) == (False, 1, 1)


def test_the_fields_land_where_layer_shape_keeps_them():
    expert = ExpertShape(8, 1)
    stack = {"cp_ring": "torch-sdpa", "tp_fp8_gather": True}
    shape = layer_shape_from(
        2,
        4,
        1,
        8192,
        True,
        "flash",
        "fp8",
        expert,
        ("mlp",),
        cp_algorithm="all-to-all",
        stack=stack,
    )
    assert shape == LayerShape(
        2,
        4,
        1,
        8192,
        True,
        "flash",
        "fp8",
        expert=expert,
        recompute_modules=("mlp",),
        cp_algorithm="all-to-all",
        cp_ring="torch-sdpa",
        tp_fp8_gather=True,
    )
    # no stack: LayerShape's defaults, which a per-stage plan replaces per pool
    assert layer_shape_from(2, 1, 1, 1024, True, "flash", "bf16") == LayerShape(
        2, 1, 1, 1024, True, "flash", "bf16"
    )
