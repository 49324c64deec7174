"""What a validation case or a plan is, for the error bands: its features (hardware generation,
framework, dtype, recompute, overlaps, scale, sequence length, ...), its model kind and population.
validate.residuals files each case's residual under these keys; validate.band reads them back for a
plan's own features."""

from __future__ import annotations

from paraplan.cost.comm import group_span
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec

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
    "nemo-24.09",  # recipe profiles on megatron-core (their ``base``)
    "megatron-bridge-25.11",
)  # the profiles the fitted constants were calibrated under


def case_population(model: ModelSpec, framework: str | None) -> str:
    """The population whose residuals speak for an estimate: the model kind ('dense' / 'moe'), followed by
    the framework's name outside the Megatron-LM family (no profile counts as Megatron-LM)."""
    kind = model_kind(model)
    return kind if framework is None or framework in MEGATRON_FAMILY else f"{kind} {framework}"


KIND_KEY = "all cases:"  # residual-table key of every case of one population (case_population): the extrapolation range
ANY_FRAMEWORK_KEY = "all cases, any framework:"  # every case of one model kind: the range for a framework no case ran
