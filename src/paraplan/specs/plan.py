"""The parallelization plan, and the rules that tie it to a model and a system.

Field-level rules are checked by pydantic when the plan is built; rules that involve the model or
the system (tp divides heads, the batch divides into micro-batches, ...) are returned by
``plan_violations`` as named :class:`Violation` s, so a search can count why candidates fail and the
CLI can print one clear line.
"""

from __future__ import annotations

from functools import lru_cache

from dataclasses import replace

from pydantic import Field, ValidationError, model_validator

from paraplan.specs.choices import (  # the choice fields' values, named here too
    Attention,
    CPAlgorithm,
    GradDtype,
    PlanDtype,
    Recompute,
    Schedule,
    Zero3GatherUnit,
    Zero3ReduceUnit,
)
from paraplan.specs.errors import InputError, Violation, input_error_from_pydantic
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_plan import MoEPlanFields
from paraplan.specs.parallel import (
    DEFAULT_PLACEMENT_LABEL,
    ParallelDims,
    derive_dp,
    parse_placement,
)
from paraplan.specs.rules import (
    batch_rule,
    cp_rule,
    degree_rule,
    pp_rule,
    recompute_violations,
    sequence_parallel_rule,
    split_violations,
    tp_layout_violations,
    tp_rules,
    ulysses_rule,
    vpp_rule,
)
from paraplan.specs.rules_moe import moe_plan_violations, moe_sequence_parallel_rule
from paraplan.specs.rules_offload import offload_layers_rule
from paraplan.specs.rules_schedule import (
    SCHEDULE_RULES,
    default_schedule,
    schedule_batch_rule,
    schedule_vpp_rule,
)
from paraplan.specs.split import (
    SplitGroup,
    accounted_units,
    default_first_last,
    explicit_split,
    grouped_split,
)
from paraplan.specs.strict import InputModel
from paraplan.specs.tp_layout import TPLayoutFields


class RuntimeFields(InputModel):
    """The plan fields an implementation sets for the whole run (RUNTIME_FIELDS): a plan's own, and the
    defaults a framework profile gives them (specs.framework.FrameworkSpec)."""

    grad_dtype: GradDtype = Field(
        "fp32",
        description="gradient accumulation and reduction dtype under mixed precision: fp32 main grads or bf16",
    )
    fp8_weight_copies: bool = Field(
        False,
        description="fp8 / FP4: Transformer Engine caches quantised weight copies beside bf16 weights (no fp8 "
        "primary weights; cost.memory.fp8_weight_copy_bytes_per_param)",
    )
    zero3_max_live_params: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="ZeRO-3: most gathered parameters resident per GPU at once (DeepSpeed "
        "stage3_max_live_parameters; a block's largest weight is always resident); None: two whole layers (FSDP)",
    )
    zero3_prefetch_layers: int = Field(
        1,
        ge=0,
        le=8,
        description="ZeRO-3/FSDP: layers whose weights are gathered ahead of use when the parameter "
        "gather overlaps (0: each gather waits for its layer; FSDP2 and DeepSpeed prefetch one)",
    )
    zero3_backward_prefetch_layers: int | None = Field(
        None,
        ge=0,
        le=8,
        description="ZeRO-3/FSDP: layers gathered ahead of use in the backward when the gather overlaps "
        "(0: each backward gather waits for its layer, FSDP1's backward_prefetch None); None: the forward's "
        "depth (zero3_prefetch_layers)",
    )
    zero3_gather_unit: Zero3GatherUnit = Field(
        "layer",
        description="ZeRO-3: one all-gather per layer (FSDP units, DeepSpeed >= 0.5.5) or one per weight "
        "tensor (DeepSpeed <= 0.5.4: per-parameter all_gather calls, coalesced by microsoft/DeepSpeed PR #1188)",
    )
    zero3_reduce_unit: Zero3ReduceUnit = Field(
        "layer",
        description="ZeRO-3: one gradient reduce-scatter per layer (FSDP units, DeepSpeed >= 0.6.0) or one per "
        "weight tensor (DeepSpeed <= 0.5.x: _reduce_scatter_gradient per parameter, each with an n-entry input list)",
    )
    zero3_regather_recompute: bool = Field(
        False,
        strict=True,
        description="ZeRO-3 with full recomputation: the recomputed forward gathers each layer's weights again "
        "(DeepSpeed v0.3.13-v0.3.16: every sub-module releases its weights after use, its trace-based keep and prefetch "
        "disabled by an off-by-one step id, microsoft/DeepSpeed issue #1069); False: gathered twice per micro-batch",
    )
    cp_algorithm: CPAlgorithm = Field(
        "ring",
        description="context parallelism: ring exchange of K/V beside the attention (ring attention, "
        "Megatron-Core's p2p) or all-to-all of Q, K, V and the output over the heads (DeepSpeed-Ulysses)",
    )


class PlanSpec(RuntimeFields, MoEPlanFields, TPLayoutFields):
    """One way to run a training step. ``dp`` may be omitted: it is gpus / (tp·pp·cp). The
    mixture-of-experts knobs (etp, moe_dispatcher, capacity_factor, moe_balance, moe_a2a_overlap,
    recompute_modules) come from specs.moe_plan.MoEPlanFields; ``ep`` is carved out of tp·cp·dp. The
    tensor-parallel layout (tp_layout, tp_rows, summa_panels) comes from specs.tp_layout.TPLayoutFields."""

    gpus: int = Field(gt=0)
    tp: int = Field(
        1, gt=0, description="tensor-parallel degree (Megatron 1D); must divide heads and kv_heads"
    )
    pp: int = Field(
        1,
        gt=0,
        description="pipeline stages; uneven splits follow PlanSpec.split (specs/split.py)",
    )
    dp: int = Field(0, ge=0, description="data-parallel degree; 0 = infer from gpus")
    cp: int = Field(1, gt=0, description="context-parallel degree; splits the sequence")
    vpp: int = Field(1, gt=0, description="virtual stages per GPU (interleaved schedule)")
    ep: int = Field(1, gt=0, description="expert-parallel degree (dense models: 1)")
    micro_batch: int = Field(1, gt=0)
    global_batch: int = Field(gt=0)
    seq_length: int = Field(gt=0)
    sequence_parallel: bool = False
    recompute: Recompute = "none"
    recompute_num_layers: int | None = Field(
        None,
        ge=1,
        description="with recompute=full: layers of each pipeline chunk fully recomputed, the others "
        "keep their activations (Megatron-LM --recompute-method block --recompute-num-layers; torchtitan's every k-th "
        "layer is ⌊layers per chunk / k⌋)",
    )
    zero: int = Field(
        0,
        ge=0,
        le=3,
        description="0 none, 1 optimizer state (distributed optimizer), 2 +grads, 3 +weights",
    )
    dtype: PlanDtype = "bf16"
    attention: Attention = "flash"
    schedule: Schedule | None = Field(
        None, description="default: interleaved when vpp > 1, else 1f1b"
    )
    offload_weights: bool = False
    offload_activations: bool = False
    offload_activation_layers: int | None = Field(
        None,
        ge=1,
        strict=True,
        description="with offload_activations: only this many decoder layers per pipeline stage (per "
        "GPU) offload their activations, the others keep them (Megatron-LM --cpu-offloading-num-layers); "
        "default: every layer",
    )
    offload_optimizer: bool = False
    overlap_dp_grad_reduce: bool = Field(
        True, description="DP gradient reduction overlaps backward"
    )
    overlap_param_gather: bool = Field(
        True, description="ZeRO parameter all-gather overlaps forward"
    )
    overlap_tp_comm: bool = Field(
        False, description="TP collectives overlap GEMMs (userbuffers / AsyncTP)"
    )
    placement: str = Field(
        DEFAULT_PLACEMENT_LABEL, description="group order on the network, innermost first"
    )
    # how the decoder layers are split over the pipeline stages (specs/split.py; default rule when unset)
    stage_layers: tuple[int, ...] | None = Field(
        None, description="decoder layers of every pipeline stage"
    )
    layers_first_stage: int | None = Field(
        None, ge=0, description="decoder layers on the first stage"
    )
    layers_last_stage: int | None = Field(
        None, ge=0, description="decoder layers on the last stage"
    )
    embedding_as_layer: bool = Field(
        False, description="count the input embedding as a layer when splitting"
    )
    loss_as_layer: bool = Field(
        False, description="count the LM head and loss as a layer when splitting"
    )

    @model_validator(mode="before")
    @classmethod
    def _infer_dp(cls, data):
        if isinstance(data, dict) and not data.get("dp"):
            data = dict(data)
            gpus = data.get("gpus")
            degrees = {k: data.get(k) for k in ("tp", "pp", "cp")}
            if isinstance(gpus, int) and all(
                v is None or (isinstance(v, int) and v > 0) for v in degrees.values()
            ):
                dp = derive_dp(gpus, degrees)
                if dp:
                    data["dp"] = dp
        return data

    @model_validator(mode="after")
    def _check_self(self) -> "PlanSpec":
        parse_placement(self.placement)
        if self.schedule is not None and (rule := schedule_vpp_rule(self.schedule, self.vpp)):
            raise ValueError(rule)
        given = [
            n for n in ("layers_first_stage", "layers_last_stage") if getattr(self, n) is not None
        ]
        accounted = [n for n in ("embedding_as_layer", "loss_as_layer") if getattr(self, n)]
        if self.stage_layers is not None and (given or accounted):
            raise ValueError(f"stage_layers cannot be combined with {', '.join(given + accounted)}")
        if given and accounted:
            raise ValueError(
                f"{given[0]} cannot be combined with {accounted[0]} (Megatron-LM refuses it too)"
            )
        if rule := offload_layers_rule(self.offload_activation_layers, self.offload_activations):
            raise ValueError(rule)
        return self

    @property
    def pipeline_schedule(self) -> Schedule:
        if self.schedule is not None:
            return self.schedule
        return default_schedule(self.vpp)

    def __repr_args__(self):
        """Short reprs: only the fields that differ from their defaults (and the required ones)."""
        for name, value in super().__repr_args__():
            info = type(self).model_fields.get(name)
            if info is None or info.is_required() or value != info.default:
                yield name, value

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp · micro_batch)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def placement_order(self) -> tuple[str, ...]:
        return parse_placement(self.placement)

    @property
    def dims(self) -> ParallelDims:
        """The plan's degrees and their placement order."""
        return ParallelDims(
            self.tp, self.cp, self.dp, self.pp, self.ep, self.etp, self.placement_order
        )

    @property
    def embedding_units(self) -> int:
        return int(self.embedding_as_layer)

    @property
    def loss_units(self) -> int:
        return int(self.loss_as_layer)

    def split(self, layers: int, mtp_layers: int = 0) -> tuple[SplitGroup, ...]:
        """The plan's split of ``layers`` decoder layers over its stages (specs/split.py); with
        ``loss_as_layer`` each MTP module counts as one more unit beside the loss (Megatron-LM's
        pipeline layout places its 'm' next to 'L')."""
        if self.stage_layers is not None:
            return explicit_split(self.stage_layers)
        first, last = default_first_last(
            layers, self.pp, *accounted_units(self.embedding_units, self.loss_units, mtp_layers)
        )
        if self.pp > 1 and (
            self.layers_first_stage is not None or self.layers_last_stage is not None
        ):
            rest_stages = self.pp - 1
            if self.layers_first_stage is not None and self.layers_last_stage is not None:
                first, last = self.layers_first_stage, self.layers_last_stage
            elif self.layers_first_stage is not None:
                first, last = (
                    self.layers_first_stage,
                    (layers - self.layers_first_stage) // rest_stages,
                )
            else:
                first, last = (
                    (layers - self.layers_last_stage) // rest_stages,
                    self.layers_last_stage,
                )
        return _split_groups(layers, self.pp, int(first), int(last))


# Fields a search problem fixes for every candidate; the other fields are the plan's choices,
# in this order the columns of search --csv and sweep.csv.
# plan fields an implementation sets for the whole run (a framework profile's defaults, frameworks.PLAN_DEFAULTS):
# the search holds them at its problem's values (search.space.SearchProblem.runtime): RuntimeFields' fields
RUNTIME_FIELDS: tuple[str, ...] = tuple(RuntimeFields.model_fields)


def runtime_fields_of(obj) -> dict:
    """The run-wide knobs (RUNTIME_FIELDS) of ``obj`` (a plan, a stage plan, a framework profile) by name."""
    return {name: getattr(obj, name) for name in RUNTIME_FIELDS}


def runtime_of(obj) -> RuntimeFields:
    """The run-wide knobs of ``obj`` (runtime_fields_of) as one RuntimeFields, as the search problems hold them."""
    return RuntimeFields(**runtime_fields_of(obj))


def runtime_folded(fields: dict) -> dict:
    """``fields`` of a search problem with the run-wide knobs given by name (RUNTIME_FIELDS) folded into its
    ``runtime`` (a RuntimeFields, as search.space.SearchProblem holds them); a bad value an InputError naming it."""
    given = {name: fields[name] for name in RUNTIME_FIELDS if name in fields}
    out = {k: v for k, v in fields.items() if k not in given}
    if given:
        base = out.get("runtime") or RuntimeFields()
        try:
            out["runtime"] = RuntimeFields(**{**base.model_dump(), **given})
        except ValidationError as exc:
            raise input_error_from_pydantic(exc, "runtime", RuntimeFields) from None
    return out


# the plan's ZeRO stage, DP overlap switches and offloads: a search candidate's state and offload
# option (search.options.GridOption) and the step composition's knobs (step.inputs.GridKnobs)
STATE_FIELDS = (
    "zero",
    "overlap_dp_grad_reduce",
    "overlap_param_gather",
    "offload_weights",
    "offload_activations",
    "offload_optimizer",
)
# the offload fields a per-stage plan carries as a uniform plan states them (specs.uniform_stages)
OFFLOAD_FIELDS = (
    "offload_weights",
    "offload_activations",
    "offload_activation_layers",
    "offload_optimizer",
)
PROBLEM_FIELDS = ("gpus", "global_batch", "seq_length", "dtype", *RUNTIME_FIELDS, "attention")
PLAN_COLUMNS: tuple[str, ...] = tuple(n for n in PlanSpec.model_fields if n not in PROBLEM_FIELDS)


def plan_input_error(exc: ValidationError) -> InputError:
    """One-line InputError for a rejected plan. Rules checked on the whole plan (placement, schedule
    with vpp) name the plan itself; their message already names the field, so the plan's dict of
    values is left out instead of being printed as the offending value."""
    err = input_error_from_pydantic(exc, "plan", PlanSpec)
    first = err.violations[0] if err.violations else None
    if first is not None and first.field == "plan" and isinstance(first.value, dict):
        more = f" (and {len(err.violations) - 1} more)" if len(err.violations) > 1 else ""
        return InputError(f"plan: {first.rule}{more}", err.violations)
    return err


def plan_violations(plan: PlanSpec, model: ModelSpec) -> list[Violation]:
    """Every rule the plan breaks for this model, each naming the field, the value and the rule
    (the rules: specs/rules.py)."""
    dims = plan.dims
    out: list[Violation] = []
    if broken := degree_rule(plan.gpus, dims):
        out.append(broken)
    if plan.tp_layout != "2d":  # a 2D grid needs whole heads per column only (rules.grid_rules)
        out += [Violation("plan.tp", plan.tp, rule) for rule in tp_rules(model, plan.tp)]
    out += tp_layout_violations(model, plan)
    ulysses = ulysses_rule(model, plan.tp, plan.cp, plan.cp_algorithm, plan.tp_layout)
    for field, rule in (
        ("pp", pp_rule(model, plan.pp)),
        ("seq_length", cp_rule(plan.seq_length, plan.cp)),
        ("cp_algorithm", ulysses),
    ):
        if rule:
            out.append(Violation(f"plan.{field}", getattr(plan, field), rule))
    if not pp_rule(model, plan.pp):
        out += split_violations(plan, model)
    out += _batch_and_schedule_violations(plan)
    out += moe_plan_violations(model, dims if plan.dp else replace(dims, dp=1), plan)
    if rule := moe_sequence_parallel_rule(model, plan.tp, plan.sequence_parallel):
        out.append(Violation("plan.sequence_parallel", False, rule))
    return out + recompute_violations(plan, model)


def plan_only_violations(plan: PlanSpec) -> list[Violation]:
    """The rules of ``plan_violations`` that read no model (for a plan exported or imported without
    --model): the degrees multiply to the GPUs, cp splits the sequence, the batch splits into
    micro-batches, sequence parallelism splits the sequence, the schedule's rules."""
    dims = plan.dims
    out: list[Violation] = []
    if broken := degree_rule(plan.gpus, dims):
        out.append(broken)
    if rule := cp_rule(plan.seq_length, plan.cp):
        out.append(Violation("plan.seq_length", plan.seq_length, rule))
    return out + _batch_and_schedule_violations(plan)


def _batch_and_schedule_violations(plan: PlanSpec) -> list[Violation]:
    """The batch splits into micro-batches, sequence parallelism splits the sequence, and the
    schedule's rules (its batch rules only where the batch split holds)."""
    out: list[Violation] = []
    broken = batch_rule(plan.global_batch, plan.dp, plan.micro_batch) if plan.dp else None
    if broken:
        out.append(Violation("plan.global_batch", plan.global_batch, broken))
    if plan.sequence_parallel and (
        rule := sequence_parallel_rule(plan.seq_length, plan.cp, plan.tp)
    ):
        out.append(Violation("plan.seq_length", plan.seq_length, rule))
    return out + _schedule_violations(plan, batch_ok=bool(plan.dp) and not broken)


def _schedule_violations(plan: PlanSpec, batch_ok: bool) -> list[Violation]:
    """The schedule's rules: vpp with pp > 1, and the micro-batch counts its entry runs
    (specs.rules_schedule.schedule_batch_rule: DualPipe's even counts, the interleaved schedule's
    multiple of pp), a count of 0 where the batch does not split into whole micro-batches (``batch_ok``
    False: the interleaved schedule says nothing then, DualPipe its pipeline rule)."""
    out: list[Violation] = []
    if rule := vpp_rule(plan.pp, plan.vpp):
        out.append(Violation("plan.vpp", plan.vpp, rule))
    schedule = plan.pipeline_schedule
    if rule := schedule_batch_rule(schedule, plan.pp, plan.microbatches if batch_ok else 0):
        field = SCHEDULE_RULES[schedule].batch_field
        value = schedule if field == "schedule" else getattr(plan, field)
        out.append(Violation(f"plan.{field}", value, rule))
    return out


@lru_cache(maxsize=4096)
def _split_groups(layers: int, pp: int, first: int, last: int) -> tuple[SplitGroup, ...]:
    """specs.split.grouped_split of one plan, as Python integers (memoised: an estimate reads its
    plan's split several times)."""
    return tuple(
        SplitGroup(int(g.index), int(g.count), int(g.layers), int(g.embedding), int(g.head))
        for g in grouped_split(layers, pp, first, last)
    )
