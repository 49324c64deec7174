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

from paraplan.cost.comm import group_span
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.validate.residuals import validation_residuals

RUN_TO_RUN_PCT = 3.0  # reference/README.md: measured runs vary by a few percent; below ~3 % is the level of the data
SEQ_BUCKETS = (2048, 8192, 32768)  # sequence-length ranges: <=2k, <=8k, <=32k, longer
GPU_BUCKETS = (64, 512, 2048)  # scale ranges: <=64, <=512, <=2048, larger


def _bucket(value: int, edges: tuple[int, ...], unit: str) -> str:
    for edge in edges:
        if value <= edge:
            return f"<={edge}{unit}"
    return f">{edges[-1]}{unit}"


def plan_features(
    model: ModelSpec, system: SystemSpec, plan: PlanSpec, framework: str | None = None
) -> tuple[str, ...]:
    """The named features an estimate of this plan relies on (module docstring)."""
    acc = system.accelerator
    out = [
        f"architecture:{acc.architecture or acc.name}",
        f"dtype:{plan.dtype}",
        f"attention:{plan.attention}",
        f"recompute:{plan.recompute}",
        f"zero:{plan.zero}",
        f"seq:{_bucket(plan.seq_length, SEQ_BUCKETS, ' tokens')}",
        f"gpus:{_bucket(plan.gpus, GPU_BUCKETS, '')}",
        f"mlp:{model.mlp}",
    ]
    if plan.tp > 1:
        out.append("tp")
        if group_span(plan, system, "tp").domains > 1:
            out.append("tp across NVLink domains")
        if plan.sequence_parallel:
            out.append("sequence parallel")
        if plan.tp_layout != "1d":  # 2D SUMMA / 2D sequence-context layouts (specs/tp_layout.py)
            out.append(f"tp layout {plan.tp_layout}")
    if plan.pp > 1:
        out.append(
            "pp interleaved"
            if plan.pipeline_schedule == "interleaved"
            else f"pp {plan.pipeline_schedule}"
        )
    if plan.cp > 1:
        out.append("cp")
    if plan.dp > 1:
        out.append("dp")
        if plan.overlap_dp_grad_reduce:
            out.append("dp grad-reduce overlap")
        if plan.zero >= 1 and plan.overlap_param_gather:
            out.append("param-gather overlap")
    if plan.overlap_tp_comm and plan.tp > 1:
        out.append("tp comm overlap")
    for kind in ("weights", "activations", "optimizer"):
        if getattr(plan, f"offload_{kind}"):
            out.append(f"offload {kind}")
    if (
        model.architecture != "decoder"
    ):  # encoders (BERT, ViT): bidirectional attention, other input/output blocks
        out.append(f"architecture {model.architecture}")
    if framework:
        out.append(f"framework:{framework}")
    # kernels, networks and calibrations differ by GPU generation, MoE from dense, and implementations
    # outside the Megatron-LM family from it (module docstring)
    arch = out[0].split(":", 1)[1]
    population = case_population(model, framework)
    qualifier = arch if population == "dense" else f"{arch} {population}"
    return (
        out[0] if population == "dense" else f"{out[0]} {population}",
        *(f"{qualifier} {f}" for f in out[1:]),
    )


def model_kind(model: ModelSpec) -> str:
    """'moe' for the models graph/moe.py builds (experts, MLA, window patterns, MTP), else 'dense'."""
    return "moe" if moe_shaped(model) else "dense"


MEGATRON_FAMILY = (
    "megatron-core",
    "megatron-lm-2021",
)  # the profiles the fitted constants were calibrated under


def case_population(model: ModelSpec, framework: str | None) -> str:
    """The population whose residuals speak for an estimate: the model kind ('dense' / 'moe'), followed by
    the framework's name outside the Megatron-LM family (no profile counts as Megatron-LM)."""
    kind = model_kind(model)
    return kind if framework is None or framework in MEGATRON_FAMILY else f"{kind} {framework}"


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


KIND_KEY = "all cases:"  # residual-table key of every case of one population (case_population): the extrapolation range
ANY_FRAMEWORK_KEY = "all cases, any framework:"  # every case of one model kind: the range for a framework no case ran


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
