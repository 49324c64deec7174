"""What a validation case or a plan is, for the error bands.

Two descriptions, both computed the same way for a case and for a plan:

- ``band_keys``: what the band is conditioned on (validate.band): the software stack (framework
  profile), the hardware generation (the accelerator's architecture) and a few traits that move the
  error of a run (``TRAITS``: mixture-of-experts, fp8, pipeline, small model, single GPU);
- ``plan_features``: every knob the estimate relies on (dtype, attention, recompute, ZeRO stage, the
  parallel dimensions and how they sit on the network, overlaps, offloads, sequence length, scale),
  qualified by generation and population; a knob no case has is reported as extrapolated.

validate.residuals stores both with each case's cross-validated residual."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from paraplan.catalog import MEGATRON_STACK, framework_stack
from paraplan.cost.comm import group_span
from paraplan.graph.params import parameter_counts
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import LOW_PRECISION, SystemSpec

if TYPE_CHECKING:  # a framework profile's spec loads with a profile (catalog.load_framework)
    from paraplan.specs.framework import FrameworkSpec

SEQ_BUCKETS = (2048, 8192, 32768)  # sequence-length ranges: <=2k, <=8k, <=32k, longer
GPU_BUCKETS = (64, 512, 2048)  # scale ranges: <=64, <=512, <=2048, larger


def _bucket(value: int, edges: tuple[int, ...], unit: str) -> str:
    for edge in edges:
        if value <= edge:
            return f"<={edge}{unit}"
    return f">{edges[-1]}{unit}"


def plan_features(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    framework: str | FrameworkSpec | None = None,
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
    if framework:  # a catalog name, or a FrameworkSpec (a profile file) by its name
        out.append(f"framework:{getattr(framework, 'name', framework)}")
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


def case_population(model: ModelSpec, framework: str | FrameworkSpec | None) -> str:
    """The population whose residuals speak for an estimate: the model kind ('dense' / 'moe'), followed by
    the framework's stack outside the Megatron-LM family (catalog.framework_stack, the stack band_keys
    conditions on: no profile counts as Megatron-LM; a recipe pools with the stack it refines)."""
    kind, stack = model_kind(model), framework_stack(framework)
    return kind if stack == MEGATRON_STACK else f"{kind} {stack}"


# traits a band is conditioned on, least telling first: validate.band drops them in this order when
# too few cases share all of a plan's traits ("fp8": GEMM inputs quantised by a Transformer Engine recipe,
# fp8 or FP4, specs.system.LOW_PRECISION)
TRAITS = ("single gpu", "small model", "pipeline", "fp8", "moe")
SMALL_MODEL_ACTIVE_PARAMS = 15e9  # below ~15B active parameters per token GEMMs are small and
# per-kernel host and launch costs weigh (the 8B cases' errors differ from the 70B ones, docs/validation.md)


@dataclass(frozen=True)
class BandKeys:
    """What a band is conditioned on: stack, hardware generation, and the traits of ``TRAITS`` that hold."""

    stack: str
    generation: str
    traits: frozenset[str]


def band_keys(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    framework: str | FrameworkSpec | None = None,
) -> BandKeys:
    """The stack, generation and traits of a case or plan (module docstring)."""
    acc = system.accelerator
    traits = {
        "single gpu": plan.gpus == 1,
        "small model": parameter_counts(model).active < SMALL_MODEL_ACTIVE_PARAMS,
        "pipeline": plan.pp > 1,
        "fp8": plan.dtype in LOW_PRECISION,  # quantised GEMM inputs: fp8 and the FP4 recipes
        "moe": model_kind(model) == "moe",
    }
    return BandKeys(
        stack=framework_stack(framework),
        generation=acc.architecture or acc.name,
        traits=frozenset(t for t, on in traits.items() if on),
    )
