"""Plain result objects returned by the API; rendering lives in report/render.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from paraplan.specs.fields import picked
from paraplan.specs.plan_label import plan_text
from paraplan.step.margin import DOES_NOT_FIT, FIT_ORDER, fit_verdict
from paraplan.units import GiB


def _part(label: str, color: str):
    """A breakdown / memory field with its display label and plot colour (the one list of parts)."""
    return field(metadata={"label": label, "color": color})


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds per step on the critical path; the parts sum to ``step_time_s``. This class is the
    one list of time parts: labels, plot colours, CSV columns and the composition's output keys
    (step.compose.compose_step) all derive from its fields (``BREAKDOWN_PARTS``)."""

    forward_s: float = _part("forward", "#4C72B0")
    backward_s: float = _part("backward", "#8FAADC")
    recompute_s: float = _part("recompute", "#DD8452")
    optimizer_s: float = _part("optimizer step", "#937860")
    bubble_s: float = _part("pipeline bubble", "#C44E52")
    tp_comm_s: float = _part("TP comm (exposed)", "#55A868")
    cp_comm_s: float = _part("CP comm (exposed)", "#A1C9A3")
    pp_comm_s: float = _part("PP comm (exposed)", "#8172B3")
    ep_comm_s: float = _part("EP comm (exposed)", "#64B5CD")
    dp_comm_s: float = _part("DP comm (exposed)", "#DA8BC3")
    offload_s: float = _part("offload (exposed)", "#CCB974")

    def total_s(self) -> float:
        return sum(asdict(self).values())


@dataclass(frozen=True)
class Part:
    """One named part of a breakdown: result field, display label, plot colour."""

    name: str
    label: str
    color: str

    @property
    def key(self) -> str:
        """The field name without its unit suffix ("weights" for "weights_bytes")."""
        return self.name.rsplit("_", 1)[0]


def _parts(cls, names=None) -> tuple[Part, ...]:
    return tuple(
        Part(f.name, f.metadata["label"], f.metadata["color"])
        for f in fields(cls)
        if "label" in f.metadata and (names is None or f.name in names)
    )


BREAKDOWN_PARTS: tuple[Part, ...] = _parts(TimeBreakdown)
BREAKDOWN_FIELDS: tuple[str, ...] = tuple(p.name for p in BREAKDOWN_PARTS)


@dataclass(frozen=True)
class StageMemory:
    """Bytes per GPU of one pipeline stage at its peak. Its labelled fields are the one list of
    memory parts (``MEMORY_PARTS``): they sum to ``peak_bytes``."""

    stage: int
    weights_bytes: float = _part("weights", "#4C72B0")
    gradients_bytes: float = _part("gradients", "#55A868")
    optimizer_bytes: float = _part("optimizer state", "#937860")
    activations_bytes: float = _part("activations", "#DD8452")
    buffers_bytes: float = _part("working buffers", "#8172B3")
    reserved_bytes: float = _part("reserved (CUDA ctx, fragm.)", "#B0B0B0")
    capacity_bytes: float = 0.0
    transformer_weights_and_optimizer_bytes: float = 0.0
    transformer_activations_bytes: float = 0.0
    host_bytes: float = 0.0  # offloaded state and activations in host memory
    host_capacity_bytes: float = float("inf")

    @property
    def weights_and_optimizer_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def peak_bytes(self) -> float:
        return sum(getattr(self, p.name) for p in MEMORY_PARTS)

    @property
    def fits(self) -> bool:
        return (
            self.peak_bytes <= self.capacity_bytes and self.host_bytes <= self.host_capacity_bytes
        )

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            **{f"{p.key}_gib": getattr(self, p.name) / GiB for p in MEMORY_PARTS},
            "weights_and_optimizer_gib": self.weights_and_optimizer_bytes / GiB,
            "transformer_weights_and_optimizer_gib": self.transformer_weights_and_optimizer_bytes
            / GiB,
            "transformer_activations_gib": self.transformer_activations_bytes / GiB,
            "peak_gib": self.peak_bytes / GiB,
            "capacity_gib": self.capacity_bytes / GiB,
            "host_gib": self.host_bytes / GiB,
            "fits": self.fits,
        }


MEMORY_PARTS: tuple[Part, ...] = _parts(StageMemory)


@dataclass(frozen=True)
class OpCost:
    """One op of one block for one micro-batch on one GPU (the "GEMM breakdown")."""

    block: str
    name: str
    kind: str
    count_per_gpu: (
        int  # how many times per micro-batch this GPU runs the block (layers on the busiest stage)
    )
    fwd_flops: float
    bwd_flops: float
    fwd_bytes: float
    gemm_shape: tuple[int, int, int, int] | None
    efficiency: float | None
    fwd_time_s: float
    bwd_time_s: float


@dataclass(frozen=True)
class CommCost:
    """One collective of one block for one micro-batch, with its group's placement."""

    block: str
    name: str
    group: str
    kind: str
    bytes: float
    calls_fwd: int
    calls_bwd: int
    time_per_call_s: float
    group_size: int
    domains_spanned: int


@dataclass(frozen=True)
class Estimate:
    """Everything paraplan predicts for one plan, uniform (step.estimate) or per-stage
    (step.per_stage.estimate_stage_plan: ``plan`` is then a StagePlanSpec's dump, ``system`` the name
    of the one system its stages use or else the cluster's, ``peak_flops_per_gpu`` the mean over its
    GPUs). A per-stage plan also fills ``stage_work_s`` (each stage's work per micro-batch),
    ``stage_tail_s`` (each stage's exposed DP sync + optimizer), ``stage_summary`` (each stage's
    blocks, devices and degrees) and ``problems`` (why it cannot run whatever its memory); a uniform
    plan leaves them empty."""

    model: str
    system: str
    plan: dict
    step_time_s: float
    breakdown: TimeBreakdown
    stages: tuple[StageMemory, ...]
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_flops_per_gpu: float
    gpus: int
    ops: tuple[OpCost, ...] = field(default=())
    comms: tuple[CommCost, ...] = field(default=())
    stage_work_s: tuple[float, ...] = ()
    stage_tail_s: tuple[float, ...] = ()
    stage_summary: tuple[dict, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def per_stage(self) -> bool:
        """True for a per-stage plan's result (its stage fields are filled)."""
        return bool(self.stage_summary)

    def __repr__(self) -> str:
        """One line: model, system, plan label, step time, MFU, peak memory, fit (the fields are in
        ``to_dict()``)."""
        fit = "fits" if self.fits else "DOES NOT FIT"
        return (
            f"<Estimate {self.model} on {self.gpus} x {self.system}: {plan_text(self.plan)}; "
            f"step {self.step_time_s:.4g} s, MFU {self.mfu:.1%}, "
            f"peak {self.peak_stage.peak_bytes / GiB:.1f} GiB ({fit})>"
        )

    def to_record(self) -> dict:
        """One flat record: the plan's label and scalar fields, step time, throughput, utilisation,
        peak memory, whether it fits, and the time breakdown (``<part>_s``); report.frames makes
        tables and DataFrames of these, ``paraplan.api.to_dataframe`` for pandas."""
        record = {
            "model": self.model,
            "system": self.system,
            "plan_label": plan_text(self.plan),
            **{k: v for k, v in self.plan.items() if not isinstance(v, (list, dict))},
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "peak_memory_gib": self.peak_stage.peak_bytes / GiB,
            "peak_stage": self.peak_stage.stage,
            "capacity_gib": self.peak_stage.capacity_bytes / GiB,
            "fits": self.fits,
        }
        record.update(asdict(self.breakdown))
        return record

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.gpus / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation (Chowdhery et al. 2022, App. B): model FLOP/s ÷ (GPUs · peak)."""
        return self.model_flops_per_step / self.step_time_s / (self.gpus * self.peak_flops_per_gpu)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation (Korthikanti et al. 2022, §6.3): counts recomputed FLOPs too."""
        return (
            self.hardware_flops_per_step / self.step_time_s / (self.gpus * self.peak_flops_per_gpu)
        )

    @property
    def first_stage(self) -> StageMemory:
        return self.stages[0]

    @property
    def peak_stage(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.peak_bytes)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages) and not self.problems

    @property
    def fit(self) -> str:
        """'fits', 'uncertain' or 'does not fit' (step.margin.fit_verdict on each stage's GPU memory; a stage
        whose offload overflows the host memory does not fit): the worst stage's verdict; a plan with
        ``problems`` does not fit."""
        if self.problems:
            return DOES_NOT_FIT
        verdicts = [
            DOES_NOT_FIT
            if s.host_bytes > s.host_capacity_bytes
            else fit_verdict(s.peak_bytes, s.capacity_bytes)
            for s in self.stages
        ]
        return max(verdicts, key=FIT_ORDER.index)

    def run_totals(self, tokens: float, price_per_gpu_hour: float | None) -> dict:
        """Days, GPU-hours and cost of training on ``tokens`` tokens at this step time."""
        steps = tokens / self.tokens_per_step
        seconds = steps * self.step_time_s
        gpu_hours = seconds / 3600 * self.gpus
        return {
            "tokens": tokens,
            "steps": steps,
            "days": seconds / 86400,
            "gpu_hours": gpu_hours,
            "cost_usd": None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour,
            "price_per_gpu_hour": price_per_gpu_hour,
        }

    def to_dict(self, include_ops: bool = False) -> dict:
        first = self.first_stage
        names = "model system plan step_time_s tokens_per_s mfu hfu model_tflops_per_gpu"
        out = picked(self, names + " model_flops_per_step hardware_flops_per_step")
        out |= {
            "breakdown": asdict(self.breakdown),
            "memory": {
                "weights_and_optimizer_gib": first.weights_and_optimizer_bytes / GiB,
                "activations_gib": first.activations_bytes / GiB,
                "peak_gib": self.peak_stage.peak_bytes / GiB,
                "peak_stage": self.peak_stage.stage,
                "capacity_gib": first.capacity_bytes / GiB,
                "fits": self.fits,
                "fit": self.fit,
                "per_stage": [s.to_dict() for s in self.stages],
            },
        }
        if include_ops:
            out["ops"] = [asdict(o) for o in self.ops]
            out["communication"] = [asdict(c) for c in self.comms]
        if self.per_stage:
            out |= self._stage_dict()
        return out

    def _stage_dict(self) -> dict:
        """A per-stage plan's keys: fits, problems, gpus and each stage's summary, work per
        micro-batch, tail and memory (``stages``)."""
        return {
            "fits": self.fits,
            "problems": list(self.problems),
            "gpus": self.gpus,
            "stages": [
                s | {"work_per_microbatch_s": w, "tail_s": t} | m.to_dict()
                for s, w, t, m in zip(
                    self.stage_summary, self.stage_work_s, self.stage_tail_s, self.stages
                )
            ],
        }
