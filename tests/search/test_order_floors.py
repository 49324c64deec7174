"""The bound order's floors (search.table.RowTable.order_floors, search.order_floors): a dense decoder layer's ops
but its core attention (graph.layers.decoder_core_ops) must be a function of graph.transformer.cp_free_key — what
step.block_statics.split_computes costs once per key and the widths walk once per key — and the floors must stay
at or below work_floors' (the bound order is the same from any floor of the bounds), within SAFETY of them."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from paraplan.catalog import load_framework, load_model, load_system, model_names
from paraplan.cost.frameworks import framework_search_fields, framework_system
from paraplan.graph.layers import decoder_core_ops
from paraplan.graph.transformer import cp_free_key
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable, layer_shape_of
from paraplan.step.block_statics import _weight_stats, kind_small_width, splits_core
from paraplan.step.blocks import BLOCK_KINDS

GRID = [(tp, cp, mb) for tp, cp, mb in product((1, 2, 8), (1, 2, 4), (1, 2, 4)) if mb * 8 >= cp]
MODULES = ((), ("core_attn",), ("layernorm", "mlp"))


def _problem(model_name: str, gpus: int = 512, **fields) -> SearchProblem:
    return SearchProblem(
        model=load_model(model_name),
        system=load_system("dgx-h100-80gb"),
        gpus=gpus,
        seq_length=4096,
        global_batch=1024,
        **fields,
    )


def _split_shapes(problem: SearchProblem) -> list:
    """Layer shapes of the grid at which the decoder kind splits (splits_core)."""
    shapes = []
    for (tp, cp, mb), sp, modules in product(GRID, (False, True), MODULES):
        if sp and tp == 1:
            continue
        shape = layer_shape_of(problem, tp, cp, mb, sp, "1d", 0, None, modules)
        if splits_core(problem.model, shape, "decoder"):
            shapes.append(shape)
    return shapes


def _breaks(problem: SearchProblem) -> tuple[list, int]:
    """(where the core ops are not ops of the graph, or two shapes equal on cp_free_key differ in their other ops;
    how many shapes shared a key)."""
    model, seen, breaks, shared = problem.model, {}, [], 0
    for shape in _split_shapes(problem):
        core, ops = decoder_core_ops(model, shape), BLOCK_KINDS["decoder"].graph(model, shape).ops
        if [op for op in ops if op in core] != list(core):
            breaks.append(("core ops", shape))
        rest = [op for op in ops if op not in core]
        key = cp_free_key(shape)
        if key in seen:
            shared += 1
            if seen[key] != rest:
                breaks.append(("rest", shape))
        else:
            seen[key] = rest
    return breaks, shared


DENSE = [name for name in model_names() if _split_shapes(_problem(name))]


@pytest.mark.parametrize("model_name", DENSE)
def test_decoder_ops_but_core_attention_read_the_cp_free_key(model_name):
    """For every catalog model whose decoder kind splits: the core ops are ops of its graph, and its other ops are
    equal for every two shapes equal on cp_free_key; one shape per key gives the kind's small-tensor width."""
    problem = _problem(model_name)
    breaks, shared = _breaks(problem)
    assert not breaks, breaks[:3]
    assert shared > 10
    shapes, model = _split_shapes(problem), problem.model
    each = max(len(_weight_stats(model, "decoder", shape, model)[2]) for shape in shapes)
    assert kind_small_width(model, shapes, "decoder") == each


def test_the_contract_check_can_fail(monkeypatch):
    """Core ops that leave the attention out leave an op reading cp among the others: caught."""
    from paraplan.graph import layers

    monkeypatch.setattr(layers, "attention_ops", lambda model, shape: [])
    breaks, _ = _breaks(_problem("llama3-70b"))
    assert breaks


@pytest.mark.parametrize(
    "model_name, fields",
    [
        ("llama3-70b", {}),
        ("gpt3-175b", {"sequence_parallel": (True,)}),
        ("llama3-8b", {"recompute": ("none", "selective", "full")}),
    ],
)
def test_order_floors_stay_below_work_floors(model_name, fields):
    """Every row's order floor is at most its work floor, and within SAFETY's share of it where the kind splits."""
    _assert_order_floors_below(RowTable(_problem(model_name, **fields)))


def test_order_floors_keep_the_early_stop_tail():
    """Under an early-stopping checkpoint (pytorch-eager: checkpoint_early_stop) a full recomputation skips the
    block's tail; the order floor subtracts it whole too, so it stays at or below the work floor. The profile's
    one-device loop runs no model parallelism (its ``parallelism``), which would leave only unsplit rows: the
    floors are checked on its stack with every parallel kind allowed."""
    from paraplan.specs.runtime import PARALLELISMS

    framework = load_framework("pytorch-eager").model_copy(update={"parallelism": PARALLELISMS})
    problem = SearchProblem(
        model=load_model("llama3-8b"),
        system=framework_system(framework, load_system("dgx-h100-80gb")),
        gpus=64,
        seq_length=8192,
        global_batch=1024,
        recompute=("full",),
        **framework_search_fields(framework),
    )
    assert problem.system.accelerator.efficiency.checkpoint_early_stop
    _assert_order_floors_below(RowTable(problem))


def _assert_order_floors_below(table: RowTable) -> None:
    order, work = table.order_floors(), table.work_floors()
    assert len(order) == table.size > 0
    assert np.all(order <= work)
    assert np.all(order >= work * (1.0 - 1e-8))
    assert np.any(order < work)  # the split floors are SAFETY below: the path is taken


def test_a_kind_that_does_not_split_floors_whole():
    """An MoE model's layers do not split (splits_core): its order floors are its work floors."""
    table = RowTable(_problem("mixtral-8x7b", gpus=64))
    assert np.array_equal(table.order_floors(), table.work_floors())
