"""Error bands: the range the true step time of an estimate falls in, with a stated coverage.

Residuals. A validation case's error is ``e = 100·(predicted/measured − 1)``; a case over-predicted by
e % means the true time may be ``predicted / (1 + e/100)``. The bands read the *cross-validated*
errors of the bundled cases (validate.residuals: each case predicted with the fitted constants refitted
without its group), never the in-sample ones: an estimate of a new plan is a prediction the constants
were not fitted to.

Groups, not cases, are the units. The cases of one group (one source's runs of one model, say) share
most of their error, so a new run behaves like a new *group*: the band treats the G groups of a pool
as the exchangeable units and each case as 1/m of its group of m cases (the pooled-CDF construction
for two-layer data, Dunn, Wasserman & Ramdas 2023, "Distribution-free prediction sets for two-layer
hierarchical models", JASA 118:2491).

Quantiles. The band claims ``CLAIMED_COVERAGE_PCT`` = c, each tail cut at (1 − c)/2 on its own, so
it is asymmetric where the residuals are. Its upper error end is the smallest residual whose
cumulative group weight reaches (1 + c)/2 · (G + 1), its lower end the same from the top
(``conformal_range``). With one case per group this is [e₍ₖ₎, e₍ₙ₊₁₋ₖ₎], k = ⌊(n+1)(1 − c)/2⌋, the
split-conformal interval: the rank of a new exchangeable residual is uniform on 1..n+1, so it falls
inside with probability at least 1 − 2k/(n+1) ≥ c (Lei et al. 2018, "Distribution-free predictive
inference for regression", JASA 113:1094). A pool of fewer than ``min_groups()`` groups (9 at 80 %)
has no such end. The band is widened to at least ±``RUN_TO_RUN_PCT`` (the run-to-run spread of
measured step times). ``paraplan validate`` reports the coverage this reaches on held-out groups
(validate.coverage).

Conditioning. A band is built from the residuals of the cases of the plan's software stack
(``features.band_keys``; the Megatron-LM family profiles and no profile are one stack) and of its model
kind: a dense plan's from dense cases, a mixture-of-experts plan's from mixture-of-experts cases
(``KIND_TRAITS``, never dropped). An MoE step carries error sources a dense step has none of (token
dispatch and combine all-to-alls, routing imbalance, grouped expert GEMMs, host syncs on the routed
token counts), so its residuals are not exchangeable with dense ones: pooled, they widen every dense
band with errors no dense run showed, and narrow the MoE bands to the dense runs' errors. Within the
kind, where enough groups share them, the band keeps the hardware generation and the other traits
(fp8, pipeline, small model, single GPU): those are dropped one at a time in ``TRAITS`` order (least
telling first), then the generation, until the pool holds at least ``min_groups()`` groups. A kind
with fewer groups than that on every generation gets the wide prior (below): the widest finite band
of G exchangeable groups, their hull, holds a new one with probability (G − 1)/(G + 1), under the
claimed coverage until G reaches ``min_groups()``.

Nearest cases. A pool that had to drop traits of the plan (or its generation) holds groups unlike it:
its conformal ends describe the stack's runs of the plan's kind at large, not runs like this one. The
band is then hulled with the errors of the plan's nearest cases (``nearest_pool``): the stack's cases on
any generation that match the plan on every trait, dropping the least telling first (never the model
kind) until one group is left, so a band is never narrower than what the runs most like the plan showed
(a dense 2.7B pipeline plan on Hopper, say, whose pool is the dense bf16 Megatron groups of every
generation but whose nearest cases are the dense bf16 pipeline ones). One rule for every group; where
the pool keeps every trait it changes nothing.

Wide prior. A stack or a generation no case ran, a stack that no case ran on this generation, a trait of
the plan no case of its stack has (a single-GPU run, say), or a stack with too few groups of the plan's
model kind, gets ``PRIOR_ERROR_PCT`` (hulled with the errors of the cases of its stack, generation and
model kind), not the Megatron envelope. Its rationale: the errors issue 33 measured on published runs of
stacks the cases did not cover — FSDP stacks (torchtitan, llm-foundry, MaxText, metaseq) about 18 % too
fast, DeepSpeed's pipeline engine about 25 % too fast, Megatron-Bridge mixture-of-experts runs on
Blackwell 20–55 % too slow — with a margin on the too-fast side: errors from −30 % to +55 %, so the true
step time lies between 0.65× and 1.43× the estimate.

Unvalidated knobs. The knobs of a plan (``features.plan_features``) that no case exercised are returned
as ``extrapolated``, and the band is then hulled with the widest residuals of the cases of its stack,
generation and model kind: a plan that relies on unvalidated knobs never gets a narrower band than a
validated one.

``error_band`` is the one rule: estimate (text and --json), the search rows (and --objective robust),
the Python API and the held-out coverage of ``paraplan validate`` (validate.coverage) all call it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from paraplan.specs.fields import picked
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.validate.features import TRAITS, BandKeys, band_keys, plan_features
from paraplan.validate.residuals import Residual, validation_residuals

RUN_TO_RUN_PCT = 3.0  # reference/README.md: measured runs vary by a few percent; below ~3 % is the level of the data
CLAIMED_COVERAGE_PCT = 80  # the share of true step times the band claims to hold (integer percent)
# wide prior (module docstring: the errors issue 33 measured on stacks the cases do not cover)
PRIOR_ERROR_PCT = (-30.0, 55.0)
# traits never dropped (module docstring, "Conditioning"): the model kind; a pool holds only cases that
# match the plan on them
KIND_TRAITS = ("moe",)
# the others, dropped one at a time in TRAITS order while too few groups share them
DROPPABLE_TRAITS = tuple(t for t in TRAITS if t not in KIND_TRAITS)


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
        names = "low_s high_s low_pct high_pct coverage_pct basis pool_cases prior validated"
        return picked(self, names) | {"extrapolated": list(self.extrapolated)}


def conformal_range(
    residuals: Sequence[tuple[str, float]], coverage_pct: int = CLAIMED_COVERAGE_PCT
) -> tuple[float, float] | None:
    """(lower, upper) error end of (group, error) residuals (module docstring), None under ``min_groups``."""
    sizes = Counter(group for group, _ in residuals)
    # (1 + c)/2 · (G + 1) in exact arithmetic: no rounding at the edges
    need = Fraction((100 + coverage_pct) * (len(sizes) + 1), 200)
    if not sizes or need > len(sizes):
        return None

    def end(ordered: Iterable[tuple[str, float]]) -> float:
        mass = Fraction(0)
        for group, error in ordered:
            mass += Fraction(1, sizes[group])
            if mass >= need:
                return error
        raise AssertionError("the group weights sum to G ≥ need")

    ascending = sorted(residuals, key=lambda r: r[1])
    return end(reversed(ascending)), end(ascending)


def min_groups(coverage_pct: int = CLAIMED_COVERAGE_PCT) -> int:
    """The fewest groups with a finite band: (1 + c)/2 · (G + 1) ≤ G."""
    return -(-(100 + coverage_pct) // (100 - coverage_pct))


def _pairs(pool: Sequence[Residual]) -> list[tuple[str, float]]:
    return [(r.group, r.error_pct) for r in pool]


def _matching(where: Sequence[Residual], keys: BandKeys, held: Sequence[str]) -> list[Residual]:
    """The residuals of ``where`` that match ``keys`` on every trait of ``held`` (each trait present in
    both or absent from both)."""
    return [r for r in where if all((t in r.keys.traits) == (t in keys.traits) for t in held)]


def band_pool(
    keys: BandKeys,
    records: Sequence[Residual],
    stack: Sequence[Residual],
    kin: Sequence[Residual],
) -> tuple[list[Residual], str, bool]:
    """(pool, basis, prior): the residuals a band of ``keys`` is built from (module docstring); ``stack``: the
    residuals of the plan's stack, ``kin``: of those, the plan's model kind (``KIND_TRAITS`` matched)."""
    if not stack:
        return [], f"wide prior: no validation case ran the {keys.stack} stack", True
    if not any(r.keys.generation == keys.generation for r in records):
        return [], f"wide prior: no validation case ran on {keys.generation}", True
    home = [r for r in stack if r.keys.generation == keys.generation]
    if not home:
        return [], f"wide prior: no validation case ran {keys.stack} on {keys.generation}", True
    unseen = [t for t in TRAITS if t in keys.traits and not any(t in r.keys.traits for r in stack)]
    if unseen:
        return home, f"wide prior: no {keys.stack} case has {', '.join(unseen)}", True
    kin_home = [r for r in kin if r.keys.generation == keys.generation]
    for where, generation in ((kin_home, keys.generation), (kin, "any generation")):
        for start in range(len(DROPPABLE_TRAITS) + 1):
            held = DROPPABLE_TRAITS[start:] + KIND_TRAITS  # traits still matched
            pool = _matching(where, keys, held)
            groups = len({r.group for r in pool})
            if groups >= min_groups():
                traits = [t if t in keys.traits else f"no {t}" for t in reversed(held)]
                where_text = f"{keys.stack} on {generation}" + "".join(f", {t}" for t in traits)
                return pool, f"{len(pool)} cases of {groups} groups: {where_text}", False
    groups = len({r.group for r in kin})
    kind = "mixture-of-experts" if "moe" in keys.traits else "dense"
    basis = f"wide prior: {groups} groups ran {kind} models on the {keys.stack} stack"
    return list(kin), f"{basis}, fewer than {min_groups()}", True


def nearest_pool(keys: BandKeys, kin: Sequence[Residual]) -> list[Residual]:
    """The stack's cases nearest the plan on its traits, on any generation (``kin``: the residuals of its stack
    and model kind): those matching every trait of ``TRAITS`` (held and not held alike), dropping the least
    telling first (``TRAITS`` order) until one group remains, never the model kind (``KIND_TRAITS``); [] when
    no case of the stack and kind shares the rest. The band is hulled with their errors when its conformal
    pool is wider than they are (module docstring, "Nearest cases")."""
    for start in range(len(DROPPABLE_TRAITS) + 1):
        near = _matching(kin, keys, DROPPABLE_TRAITS[start:])
        if near:
            return near
    return []


def error_band(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    step_time_s: float,
    framework=None,
    residuals: Sequence[Residual] | None = None,
) -> ErrorBand:
    """The band of one estimate (module docstring); ``framework``: a catalog name or a FrameworkSpec (a
    profile file: its stack is its base chain's, catalog.framework_stack); ``residuals`` default:
    validate.residuals' records."""
    records = validation_residuals() if residuals is None else residuals
    keys = band_keys(model, system, plan, framework)
    features = plan_features(model, system, plan, framework)
    known = {f for r in records for f in r.features}
    extrapolated = tuple(f for f in features if f not in known)
    stack = [r for r in records if r.keys.stack == keys.stack]
    kin = _matching(stack, keys, KIND_TRAITS)  # the plan's stack and model kind
    pool, basis, prior = band_pool(keys, records, stack, kin)
    if prior:
        lo_err, hi_err = PRIOR_ERROR_PCT
    else:  # band_pool returns a pool of at least min_groups() groups
        lo_err, hi_err = conformal_range(_pairs(pool))
        # a pool that had to drop traits of the plan: no narrower than the nearest cases' own errors
        near = nearest_pool(keys, kin)
        if near and len({r.group for r in near}) < len({r.group for r in pool}):
            lo_err = min([lo_err, *(r.error_pct for r in near)])
            hi_err = max([hi_err, *(r.error_pct for r in near)])
    if prior or extrapolated:  # as far off as any case of the stack and kind on this generation
        seen = [r.error_pct for r in kin if r.keys.generation == keys.generation]
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
