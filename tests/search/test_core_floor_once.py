"""KindFloors._core costs equal core-attention ops once: every (tp, cp, micro-batch) builds its own tuple of them
(graph.moe.layer_core_ops), and equal ops give the same step.build.BlockCompute, so the memo on the ops' values
(search.bounds.expert_floors._CORE_COMPUTES) returns the first costing's bits for every equal tuple."""

from __future__ import annotations

from paraplan.catalog import load_model, load_system
from paraplan.graph.ops import LayerGraph
from paraplan.search.bounds import expert_floors
from paraplan.search.bounds.expert_floors import KindFloors, costing_experts
from paraplan.search.space import SearchProblem
from paraplan.search.table import layer_shape_of
from paraplan.step.build import BLOCK_KINDS, block_compute


def test_equal_core_ops_are_costed_once_with_the_same_bits(monkeypatch):
    problem = SearchProblem(
        model=load_model("deepseek-v3"),
        system=load_system("dgx-h800"),
        gpus=2048,
        seq_length=4096,
        global_batch=15360,
    )
    KindFloors.cache_clear()
    experts = costing_experts(problem, 2)
    floors = KindFloors(problem, experts)
    shape = layer_shape_of(problem, 2, 2, 1, False, "1d", 0, experts[0])
    core = BLOCK_KINDS["moe_layer"].core_ops(problem.model, shape)
    assert core
    copy = tuple(op._replace() for op in core)  # equal ops, another tuple
    assert copy == core and copy is not core
    calls = []
    inner = block_compute.__wrapped__

    def counted(*args, **kwargs):
        calls.append(args[0].ops)
        return inner(*args, **kwargs)

    monkeypatch.setattr(block_compute, "__wrapped__", counted)
    first = floors._core(core, shape)
    again = floors._core(copy, shape)
    assert len(calls) == 1  # the copy found the first costing
    expected = inner(LayerGraph("core attention", core, (), 0.0), problem.system, shape.dtype)
    assert first == expected and again == expected
    KindFloors.cache_clear()
    assert not expert_floors._CORE_COMPUTES  # a cold search starts without it
    floors._core(copy, shape)
    assert len(calls) == 2  # costed again after the clear
