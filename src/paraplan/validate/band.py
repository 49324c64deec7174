"""Error bands: the range the true step time of an estimate falls in, with a stated coverage.

Residuals. A validation case's error is ``e = 100·(predicted/measured − 1)``; a case over-predicted by
e % means the true time may be ``predicted / (1 + e/100)``. The bands read the *cross-validated*
errors of the bundled cases (validate.residuals: each case predicted with the fitted constants refitted
without its group), never the in-sample ones: an estimate of a new plan is a prediction the constants
were not fitted to.

Conditioning. A band is built from the residuals of the cases that share the plan's software stack and
hardware generation (``features.band_keys``; the Megatron-LM family profiles and no profile are one
stack) and, as far as enough such cases exist, its traits (mixture-of-experts, fp8, pipeline, small
model, single GPU): the traits are dropped one at a time in ``TRAITS`` order (least telling first)
until the pool holds at least ``min_cases`` cases from at least ``MIN_GROUPS`` groups.

Quantiles. The band claims ``CLAIMED_COVERAGE_PCT`` coverage: for a pool of n residuals sorted
e₍₁₎ ≤ … ≤ e₍ₙ₎ it is [e₍ₖ₎, e₍ₙ₊₁₋ₖ₎] with k = ⌊(n+1)·(1 − c)/2⌋. The rank of a new residual exchangeable
with the pool is uniform on 1..n+1 (the argument of split conformal prediction: Lei et al. 2018,
"Distribution-free predictive inference for regression", JASA 113:1094), so it falls below e₍ₖ₎ or
above e₍ₙ₊₁₋ₖ₎ with probability k/(n+1) each, and inside with probability 1 − 2k/(n+1) ≥ c. Each tail is cut on its own, so the band is asymmetric where
the residuals are; it is widened to at least ±``RUN_TO_RUN_PCT`` (the run-to-run spread of measured
step times). A pool too small for k ≥ 1 (n < 9 at 80 %) says nothing at that coverage.

Wide prior. A stack or a generation no case ran, a stack that no case ran on this generation, or a
pool too small even without traits, gets ``PRIOR_ERROR_PCT`` (hulled with whatever residuals the
pool has), not the Megatron envelope. Its rationale: the errors issue 33 measured on published runs of
stacks the cases did not cover — FSDP stacks (torchtitan, llm-foundry, MaxText, metaseq) about 18 %
too fast, DeepSpeed's pipeline engine about 25 % too fast, Megatron-Bridge mixture-of-experts runs on
Blackwell 20–55 % too slow — with a margin on the too-fast side: errors from −30 % to +55 %, so the
true step time lies between 0.65× and 1.43× the estimate.

Unvalidated knobs. The knobs of a plan (``features.plan_features``) that no case exercised are
returned as ``extrapolated``, and the band is then hulled with the widest residuals of the cases of
its stack and generation: a plan that relies on unvalidated knobs never gets a narrower band than a
validated one.

``error_band`` is the one rule: estimate (text and --json), the search rows (and --objective robust),
the Python API and the held-out coverage of ``paraplan validate`` (validate.coverage) all call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.validate.features import TRAITS, BandKeys, band_keys, plan_features
from paraplan.validate.residuals import Residual, validation_residuals

RUN_TO_RUN_PCT = 3.0  # reference/README.md: measured runs vary by a few percent; below ~3 % is the level of the data
CLAIMED_COVERAGE_PCT = 80  # the share of true step times the band claims to hold (integer percent)
MIN_GROUPS = (
    3  # a pool speaks for new runs only when its cases come from this many groups (sources)
)
PRIOR_ERROR_PCT = (
    -30.0,
    55.0,
)  # wide prior (module docstring: issue 33's errors on uncovered stacks)


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
    coverage_pct: int = CLAIMED_COVERAGE_PCT  # claimed
    basis: str = ""  # which residuals the band is built from, or why it is the wide prior
    pool_cases: int = 0  # residuals in the pool
    prior: bool = False  # the wide prior (no case covers the stack / generation)

    @property
    def validated(self) -> bool:
        return not self.extrapolated and not self.prior

    def text(self) -> str:
        """'-3.0/+5.9 %', with '*' when a feature is extrapolated or the band is the wide prior."""
        return f"{self.low_pct:+.1f}/{self.high_pct:+.1f} %" + ("" if self.validated else "*")

    def to_dict(self) -> dict:
        return {
            "low_s": self.low_s,
            "high_s": self.high_s,
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "coverage_pct": self.coverage_pct,
            "basis": self.basis,
            "pool_cases": self.pool_cases,
            "prior": self.prior,
            "validated": self.validated,
            "extrapolated": list(self.extrapolated),
        }


def conformal_range(
    errors: Sequence[float], coverage_pct: int = CLAIMED_COVERAGE_PCT
) -> tuple[float, float] | None:
    """[e₍ₖ₎, e₍ₙ₊₁₋ₖ₎] with k = ⌊(n+1)(100 − coverage)/200⌋ (module docstring), None when k < 1."""
    n = len(errors)
    k = (n + 1) * (100 - coverage_pct) // 200  # integer arithmetic: no rounding at the edges
    if k < 1:
        return None
    ordered = sorted(errors)
    return ordered[k - 1], ordered[n - k]


def min_cases(coverage_pct: int = CLAIMED_COVERAGE_PCT) -> int:
    """The smallest pool with a finite conformal range: (n+1)(100 − c) ≥ 200."""
    return -(-200 // (100 - coverage_pct)) - 1


def band_pool(keys: BandKeys, records: Sequence[Residual]) -> tuple[list[Residual], str, bool]:
    """(pool, basis, prior): the residuals a band of ``keys`` is built from (module docstring)."""
    if not any(r.keys.stack == keys.stack for r in records):
        return [], f"wide prior: no validation case ran the {keys.stack} stack", True
    if not any(r.keys.generation == keys.generation for r in records):
        return [], f"wide prior: no validation case ran on {keys.generation}", True
    home = [
        r for r in records if (r.keys.stack, r.keys.generation) == (keys.stack, keys.generation)
    ]
    if not home:
        return [], f"wide prior: no validation case ran {keys.stack} on {keys.generation}", True
    for start in range(len(TRAITS) + 1):
        held = TRAITS[start:]  # traits still matched
        pool = [r for r in home if all((t in r.keys.traits) == (t in keys.traits) for t in held)]
        if len(pool) >= min_cases() and len({r.group for r in pool}) >= MIN_GROUPS:
            matched = BandKeys(keys.stack, keys.generation, keys.traits & frozenset(held))
            groups = len({r.group for r in pool})
            return pool, f"{len(pool)} cases of {groups} groups: {matched.label()}", False
    groups = len({r.group for r in home})
    return (
        home,
        f"wide prior: {len(home)} cases of {groups} groups ran {keys.stack} on {keys.generation}, "
        f"fewer than {min_cases()} of {MIN_GROUPS} groups",
        True,
    )


def error_band(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    step_time_s: float,
    framework: str | None = None,
    residuals: Sequence[Residual] | None = None,
) -> ErrorBand:
    """The band of one estimate (module docstring); ``residuals`` default: validate.residuals' records."""
    records = validation_residuals() if residuals is None else residuals
    keys = band_keys(model, system, plan, framework)
    features = plan_features(model, system, plan, framework)
    known = {f for r in records for f in r.features}
    extrapolated = tuple(f for f in features if f not in known)
    pool, basis, prior = band_pool(keys, records)
    if prior:
        lo_err, hi_err = PRIOR_ERROR_PCT
    else:  # band_pool returns a pool of at least min_cases()
        lo_err, hi_err = conformal_range([r.error_pct for r in pool])
    if prior or extrapolated:  # as far off as any case of the stack on this generation
        home = (keys.stack, keys.generation)
        seen = [r.error_pct for r in records if (r.keys.stack, r.keys.generation) == home]
        lo_err, hi_err = min([lo_err, *seen]), max([hi_err, *seen])
    lo_err, hi_err = min(lo_err, -RUN_TO_RUN_PCT), max(hi_err, RUN_TO_RUN_PCT)
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
        basis=basis,
        pool_cases=len(pool),
        prior=prior,
    )
