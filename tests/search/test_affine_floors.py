"""search.bounds.affine_floors: a first bound at most the cheap layer floors, key by key and kind by kind, so the
block queue's last bounds (the largest of every level's) are the cheap floors' run's; op_floor_s at most
cost.compute.op_times_s, against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.compute import op_times_s
from paraplan.graph.ops import Op
from paraplan.search.bounds import affine_floors as affine
from paraplan.search.bounds.blocks import blocks, layer_floors
from paraplan.search.space import SearchProblem
from paraplan.search.table import layer_shape_of
from paraplan.step.build import BLOCK_KINDS, model_block_kinds


def _problem(model: str, system: str, gpus: int, **more) -> SearchProblem:
    return SearchProblem(
        model=load_model(model), system=load_system(system), gpus=gpus, seq_length=4096, **more
    )


def _keys(problem: SearchProblem) -> list:
    return list(dict.fromkeys((b.tp, b.cp, b.micro_batch) for b in blocks(problem)))


def _assert_below_cheap(problem: SearchProblem, keys: list, floors: dict) -> None:
    for key in keys:
        cheap = layer_floors(problem, *key, cheap=True)
        found = floors[key]
        assert found.rho == cheap.rho == 1.0
        assert set(found.work) == set(cheap.work)
        for name, value in found.work.items():
            assert 0.0 <= value <= cheap.work[name], (key, name, value, cheap.work[name])


def test_deepseek_v3_every_axis_affine_floors_at_most_the_cheap_ones():
    problem = _problem("deepseek-v3", "dgx-h800", 2048, global_batch=15360)
    keys = _keys(problem)
    floors = affine.affine_floors(problem, keys)
    assert floors is not None and set(floors) == set(keys)  # every key of the 2,768: no fallback
    _assert_below_cheap(problem, keys, floors)
    # tight: the MoE layer's within 5 % of its cheap floor at the winner's key (tp 2, cp 1, micro-batch 15)
    cheap = layer_floors(problem, 2, 1, 15, cheap=True)
    assert floors[2, 1, 15].work["moe_layer"] >= 0.95 * cheap.work["moe_layer"]


@pytest.mark.parametrize(
    "model, system, gpus, more",
    [
        ("qwen3-235b-a22b", "dgx-h100-80gb", 256, {}),
        ("mixtral-8x7b", "dgx-h100-80gb", 128, {}),
        ("gpt-oss-120b", "dgx-h100-80gb", 128, {}),
        ("deepseek-v3", "dgx-h800", 2048, {"dtype": "fp8", "tp": (1, 2, 4, 8), "cp": (1, 2)}),
    ],
)
def test_other_moe_problems_affine_floors_at_most_the_cheap_ones(
    monkeypatch, model, system, gpus, more
):
    problem = _problem(model, system, gpus, global_batch=1024, **more)
    keys = _keys(problem)
    monkeypatch.setattr(affine, "AFFINE_MIN_KEYS", 1)  # however few keys the space has
    floors = affine.affine_floors(problem, keys)
    assert floors
    _assert_below_cheap(problem, [k for k in keys if k in floors], floors)


def test_small_spaces_and_kernel_tables_take_the_cheap_floors():
    problem = _problem(
        "deepseek-v3", "dgx-h800", 2048, global_batch=15360, tp=(1, 2), pp=(8,), cp=(1,)
    )
    keys = _keys(problem)
    assert len(keys) < affine.AFFINE_MIN_KEYS and affine.affine_floors(problem, keys) is None


def test_op_floor_s_by_hand_and_below_the_op_times():
    system = load_system("dgx-h800")
    acc, eff = system.accelerator, system.accelerator.efficiency
    gemm = Op("g", "gemm", 2e12, 0.0, 4e12, 0.0, (1, 8192, 7168, 2048))
    rate = acc.peak_matrix_flops("bf16") * acc.gemm_efficiency_cap("bf16")
    fixed = eff.gemm_ramp_s + eff.kernel_overhead_s
    assert affine.op_floor_s(gemm, acc, "bf16") == pytest.approx(6e12 / rate + 3 * fixed, rel=1e-12)
    norm = Op("n", "memory", 1e6, 4e8, 2e6, 8e8)
    bandwidth = acc.hbm_bandwidth * eff.hbm / eff.eager_traffic_factor
    expected = 4e8 / bandwidth + 8e8 / bandwidth + 2 * eff.kernel_overhead_s
    assert affine.op_floor_s(norm, acc, "bf16") == pytest.approx(expected, rel=1e-12)
    assert affine.op_floor_s(Op("a", "attention", 1e12, 0.0, 2e12, 0.0), acc, "bf16") == 0.0
    # every op of DeepSeek-V3's layers at one shape: the floor never above the op's time
    problem = _problem("deepseek-v3", "dgx-h800", 2048, global_batch=15360)
    shape = layer_shape_of(problem, 2, 1, 1, True, "1d", 0)
    for name in model_block_kinds(problem.model):
        for op in BLOCK_KINDS[name].graph(problem.model, shape).ops:
            assert affine.op_floor_s(op, acc, shape.dtype) <= sum(op_times_s(op, acc, shape.dtype))
