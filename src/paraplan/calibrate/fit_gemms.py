"""Where the base system's in-step GEMM rate is known: the GEMMs of the steps its cap was fitted on.

A catalog GEMM cap prices every shape through the analytical form (cost.compute: cap · wave · depth), but
it was fitted to step times (validate.fitted), so the base's in-step rate is measured only at the GEMMs
those steps run. The form's shape dependence is not a kernel's: on the shared H100 table (and the
published Azure ND H100 v5 cuBLASLt sweep) an fp8 GEMM with k = 16384 runs ~10 % faster relative to the
form than one with k = 2048-4096 (docs/calibration.md "What keeps the two files listed"). The ratio of a
table to the base (calibrate.in_step) is therefore taken over those GEMMs, not over the table's own sweep of
shapes, whose deep-k rows would set the share by where the form is least like the kernels.
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.cost.compute import gemm_calls, gemm_kernel_time_s
from paraplan.specs.errors import InputError
from paraplan.specs.fields import with_fields
from paraplan.specs.system import SystemSpec, gemm_cap_key
from paraplan.step.estimate import estimate
from paraplan.validate.case_files import Case, bundled_case_files, load_cases
from paraplan.validate.fitted import FITTED_CONSTANTS, FittedConstant

# one GEMM call of a step: flops, (b, m, n, k), dtype, calls per micro-batch
Call = tuple[float, tuple[int, int, int, int], str, int]


def _constant(base_name: str, key: str) -> FittedConstant | None:
    """validate.fitted's constant at the base's cap ``efficiency.<key>`` that ``base_name`` carries."""
    for c in FITTED_CONSTANTS:
        if c.path == ("accelerator", "efficiency", key) and base_name in c.systems:
            return c
    return None


def fitted_on(base_name: str, key: str) -> tuple[str, ...]:
    """Case files the base's cap ``efficiency.<key>`` was fitted on (``_constant``), () where the base carries
    no such fitted constant."""
    constant = _constant(base_name, key)
    return constant.fitted_on if constant else ()


@lru_cache(maxsize=64)
def _step_gemms(base_name: str, key: str) -> tuple[tuple[Call, ...], ...]:
    """Per step of the fit set (module docstring) whose plan runs its GEMMs on cap ``key`` and whose system
    carries the same fitted constant, that step's GEMM calls: each op of its op table (step.estimate
    ``with_ops``: count per GPU per micro-batch) as its forward and backward calls (cost.compute.gemm_calls)."""
    constant = _constant(base_name, key)
    if constant is None:
        return ()
    files, systems = constant.fitted_on, constant.systems
    steps = []
    for case in load_cases([p for p in bundled_case_files() if p.stem in files]):
        if not isinstance(case, Case):
            continue
        if case.system.name not in systems or gemm_cap_key(case.plan.dtype) != key:
            continue
        ops = estimate(case.model, case.system, case.plan, with_ops=True).ops or []
        calls = []
        for op in ops:
            if op.kind != "gemm" or op.gemm_shape is None:
                continue
            input_grad = op.bwd_flops > op.fwd_flops  # dgrad + wgrad, else wgrad alone
            for flops, shape in gemm_calls(op.fwd_flops, op.bwd_flops, op.gemm_shape, input_grad):
                calls.append((flops, shape, case.plan.dtype, op.count_per_gpu))
        steps.append(tuple(calls))
    return tuple(steps)


def fit_set_ratio(table_system: SystemSpec, base: SystemSpec, key: str) -> float | None:
    """r = mean over the fit set's steps (``_step_gemms``) of Σ table kernel time / Σ the base's in-step kernel
    time of the step's GEMM calls (``gemm_kernel_time_s``, the ramp left out as in calibrate.in_step), the
    table that ``table_system`` has attached read at in-step share 1; each step weighs as in the cap's fit
    (a mean of per-step errors). None where the base has no fitted cap ``key`` with such steps, or the table
    has no rows of their dtype."""
    steps = _step_gemms(base.name, key)
    if not steps:
        return None
    alone = with_fields(table_system, {f"accelerator.efficiency.table_in_step_share.{key}": 1.0})
    ratios = []
    for calls in steps:
        table = sum(n * gemm_kernel_time_s(f, s, alone.accelerator, d) for f, s, d, n in calls)
        priced = sum(n * gemm_kernel_time_s(f, s, base.accelerator, d) for f, s, d, n in calls)
        if priced <= 0:
            raise InputError(f"calibrate: no GEMM time in the fit set of {base.name} {key}")
        ratios.append(table / priced)
    return sum(ratios) / len(ratios)
