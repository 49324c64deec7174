"""A power cap (accelerator.power_cap_w) only ever slows a step: over every catalog system with a rated
board power, a few fixed plans and a ladder of caps, the step time never falls as the cap is lowered;
with a measured kernel table attached too (table-priced kernels slow by the same clock share)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system, system_names
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules_precision import default_precision
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import estimate

REL = 1e-9
CAP_SHARES = (1.2, 1.0, 0.9, 0.75, 0.6, 0.45, 0.3)  # of tdp_w; above 1: no effect
RATED = [n for n in system_names() if load_system(n).accelerator.tdp_w is not None]
PLANS = (  # (model, plan fields): dense, pipeline + recompute, small model data-parallel
    ("llama3-8b", dict(gpus=4, tp=2, dp=2, global_batch=8, seq_length=2048, zero=1)),
    ("gpt3-2.7b", dict(gpus=4, pp=2, dp=2, global_batch=16, seq_length=2048, recompute="full")),
    ("gpt3-350m", dict(gpus=2, dp=2, global_batch=16, seq_length=1024)),
)


def capped(system: SystemSpec, cap_w: float, **accelerator) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"].update(power_cap_w=cap_w, **accelerator)
    return SystemSpec.model_validate(data)


def _step_times(system: SystemSpec, model_name: str, fields: dict) -> list[float]:
    model = load_model(model_name)
    plan = PlanSpec(**fields, **default_precision(system.accelerator))
    tdp = system.accelerator.tdp_w
    return [estimate(model, capped(system, s * tdp), plan).step_time_s for s in CAP_SHARES]


@pytest.mark.parametrize("name", RATED)
def test_a_lower_cap_never_makes_a_step_faster(name):
    system = load_system(name)
    for model_name, fields in PLANS:
        times = _step_times(system, model_name, fields)
        for higher, lower, (a, b) in zip(CAP_SHARES, CAP_SHARES[1:], zip(times, times[1:])):
            assert b >= a * (1 - REL), (
                f"{name} {model_name}: cap {lower:g}x tdp {b} < {higher:g}x {a}"
            )
        assert times[0] == pytest.approx(times[1])  # a cap above the rating changes nothing
        assert times[-1] > times[1]  # and a low one costs time


def test_with_a_kernel_table_attached():
    system = load_system("dgx-h100-80gb")
    data = system.model_dump()
    data["accelerator"]["kernel_tables"] = "h100-sxm5-80gb"
    tabled = SystemSpec.model_validate(data)
    times = _step_times(tabled, *PLANS[0])
    assert all(b >= a * (1 - REL) for a, b in zip(times, times[1:]))
    assert times[-1] > times[1]
