"""Monotonicity over every catalog model × system (issue 13): a better machine never makes a plan
slower — twice the NVLink bandwidth, NIC bandwidth, HBM bandwidth or peak FLOP/s gives a step time
no longer than before — and more HBM never turns a plan that fits into one that does not.

Each (model, system) pair runs a fixed set of plans on 64 GPUs that stress the places where the
overlap windows matter: ZeRO-3 with all overlap switches, TP with comm-GEMM overlap, context
parallelism across nodes, and a deep interleaved pipeline. A counterexample is reported with the
model, system, plan and both step times.
"""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system, model_names, system_names
from paraplan.step.estimate import estimate
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec, plan_violations
from paraplan.sweep.params import apply_overrides

REL = 1e-9
PLANS = {
    "zero3-overlap": dict(
        tp=1,
        pp=1,
        cp=1,
        dp=64,
        micro_batch=1,
        global_batch=128,
        zero=3,
        overlap_dp_grad_reduce=True,
        overlap_param_gather=True,
    ),
    "tp8-overlap-zero3": dict(
        tp=8,
        pp=1,
        cp=1,
        dp=8,
        micro_batch=1,
        global_batch=64,
        zero=3,
        sequence_parallel=True,
        overlap_tp_comm=True,
        overlap_dp_grad_reduce=True,
        overlap_param_gather=True,
    ),
    "tp4-cp4-zero1": dict(
        tp=4,
        pp=1,
        cp=4,
        dp=4,
        micro_batch=1,
        global_batch=32,
        zero=1,
        sequence_parallel=True,
        overlap_tp_comm=True,
        overlap_dp_grad_reduce=True,
        placement="tp-dp-cp-pp",
    ),
    "tp8-pp4-interleaved": dict(
        tp=8,
        pp=4,
        cp=1,
        dp=2,
        vpp=2,
        micro_batch=1,
        global_batch=32,
        zero=1,
        sequence_parallel=True,
        overlap_dp_grad_reduce=True,
    ),
}
SCALINGS = (
    "node.nvlink_bandwidth",
    "network.nic_bandwidth",
    "accelerator.hbm_bandwidth",
    "accelerator.matrix_flops",
)


def _scaled(model, system, path: str):
    data = system.model_dump()
    if path == "accelerator.matrix_flops":
        return apply_overrides(
            model,
            system,
            {f"{path}.{k}": 2 * v for k, v in data["accelerator"]["matrix_flops"].items()},
        )[1]
    section, field = path.split(".")
    return apply_overrides(model, system, {path: 2 * data[section][field]})[1]


def _plans(model, system):
    for name, fields in PLANS.items():
        plan = PlanSpec(gpus=64, seq_length=2048, recompute="selective", dtype="bf16", **fields)
        if not plan_violations(plan, model):
            yield name, plan


def _step_s(model, system, plan) -> float | None:
    try:
        return estimate(model, system, plan).step_time_s
    except InputError:
        return None


def _cases():
    for m in model_names():
        for s in system_names():
            yield pytest.param(m, s, id=f"{m}-{s}")


@pytest.mark.parametrize(("model_name", "system_name"), list(_cases()))
def test_better_hardware_is_never_slower(model_name, system_name):
    model, system = load_model(model_name), load_system(system_name)
    bigger = apply_overrides(
        model, system, {"accelerator.hbm_capacity": 2 * system.accelerator.hbm_capacity}
    )[1]
    # each scaled system is the same for every plan: built once (apply_overrides validates a system)
    faster_systems = {path: _scaled(model, system, path) for path in SCALINGS}
    failures = []
    for plan_name, plan in _plans(model, system):
        try:
            base = estimate(model, system, plan)
        except InputError:
            continue
        for path in SCALINGS:
            faster = _step_s(model, faster_systems[path], plan)
            if faster is not None and faster > base.step_time_s * (1 + REL):
                failures.append(
                    f"{plan_name} ({plan.model_dump(exclude_defaults=True)}): 2x {path} "
                    f"{base.step_time_s:.6f} s -> {faster:.6f} s"
                )
        roomier = estimate(model, bigger, plan)  # more HBM: same time and memory, fits if it did
        assert roomier.fits or not base.fits, (plan_name, "2x hbm_capacity stops fitting")
        assert roomier.step_time_s == pytest.approx(base.step_time_s, rel=REL)
        assert roomier.peak_stage.peak_bytes == pytest.approx(base.peak_stage.peak_bytes, rel=REL)
    assert not failures, f"{model_name} on {system_name}: " + "; ".join(failures)
