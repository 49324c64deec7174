"""Error bands: how far off an estimate may be, from the validation residuals of what it uses.

An estimate uses *features* (``plan_features``, each qualified by the GPU architecture): datatype, attention kind,
recomputation, ZeRO stage, which parallel dimensions are on and how they sit on the network, the
overlaps and offloads it relies on, the sequence-length range, the scale, the framework profile.
Every bundled validation case (paraplan/validate/cases) has the same features. The band of an
estimate is the union over its features of the range of signed step-time errors of the cases that
share the feature, widened to at least ``RUN_TO_RUN_PCT`` (the run-to-run spread of measured step
times, reference/README.md). Features no case has are returned as ``extrapolated`` and take the
widest error range of every case of the same population (model kind and framework family,
``case_population``; the validation says nothing specific about them, so the band assumes they may
be as far off as the worst case seen): a plan that relies on unvalidated knobs never gets a narrower
band than a validated one.

Features are qualified by the GPU architecture, for mixture-of-experts / MLA models by ``moe``,
and for frameworks outside the Megatron-LM family by the framework's name: kernels, networks and
calibrations differ by GPU generation; the MoE cases say nothing about dense models and the
reverse; and a run on another implementation (DeepSpeed's ZeRO-3 in Narayanan et al. 2021 Table 2)
says nothing about a Megatron-LM run of the same plan, nor the reverse. Plans estimated without a
framework profile belong to the Megatron-LM family (the profiles the constants were fitted under).

Errors are ``100·(predicted/measured − 1)``; a case that was over-predicted by e % means the true
time may be ``predicted / (1 + e/100)``. The band therefore runs from
``predicted / (1 + max_error)`` (optimistic) to ``predicted / (1 + min_error)`` (pessimistic).
The residuals are in-sample for calibration cases (``paraplan validate --cv`` reports how much
larger they are out of sample, docs/validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass


from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.validate.features import (
    ANY_FRAMEWORK_KEY,
    KIND_KEY,
    case_population,
    model_kind,
    plan_features,
)
from paraplan.validate.residuals import validation_residuals

RUN_TO_RUN_PCT = 3.0  # reference/README.md: measured runs vary by a few percent; below ~3 % is the level of the data


@dataclass(frozen=True)
class ErrorBand:
    """Plausible range of the true step time around an estimate, and the features no case validates."""

    step_time_s: float
    low_s: float  # optimistic end
    high_s: float  # pessimistic end
    low_pct: float  # (low_s / step_time_s − 1)·100, ≤ 0
    high_pct: float  # ≥ 0
    features: tuple[str, ...]
    extrapolated: tuple[str, ...]  # features of the plan no validation case has

    @property
    def validated(self) -> bool:
        return not self.extrapolated

    def text(self) -> str:
        """'-3.0/+5.9 %', with '*' when a feature is extrapolated (the search table's band cell)."""
        return f"{self.low_pct:+.1f}/{self.high_pct:+.1f} %" + ("*" if self.extrapolated else "")

    def to_dict(self) -> dict:
        return {
            "low_s": self.low_s,
            "high_s": self.high_s,
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "validated": self.validated,
            "extrapolated": list(self.extrapolated),
        }


def error_band(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    step_time_s: float,
    framework: str | None = None,
    residuals: dict[str, tuple[float, ...]] | None = None,
) -> ErrorBand:
    """The band of one estimate: union of its validated features' error ranges, at least ±RUN_TO_RUN_PCT."""
    table = validation_residuals() if residuals is None else residuals
    features = plan_features(model, system, plan, framework)
    extrapolated = tuple(f for f in features if f not in table)
    errors = [e for f in features for e in table.get(f, ())]
    if (
        extrapolated
    ):  # unvalidated knobs: as far off as any case of this population (module docstring)
        population = KIND_KEY + case_population(model, framework)
        # a framework no case ran: as far off as any case of the model kind, under any framework
        errors += table.get(population, table.get(ANY_FRAMEWORK_KEY + model_kind(model), ()))
    lo_err = min([-RUN_TO_RUN_PCT, *errors])  # most under-predicted case: the truth may be slower
    hi_err = max([RUN_TO_RUN_PCT, *errors])
    low_s = step_time_s / (1.0 + hi_err / 100.0)
    high_s = step_time_s / (1.0 + lo_err / 100.0)
    return ErrorBand(
        step_time_s=step_time_s,
        low_s=low_s,
        high_s=high_s,
        low_pct=100.0 * (low_s / step_time_s - 1.0),
        high_pct=100.0 * (high_s / step_time_s - 1.0),
        features=features,
        extrapolated=extrapolated,
    )
