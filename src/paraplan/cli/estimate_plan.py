"""The plan and specs of ``paraplan estimate`` from its options: the plan fields of the options given
(``plan_fields``), which were typed (``given_plan_options``), a framework profile's defaults for the
rest (``framework_defaults``) and ``--set`` applied to the specs (``apply_sets``, ``set_overrides``)."""

from __future__ import annotations

from enum import Enum

import typer

from paraplan.cli.app import explicit_options
from paraplan.specs.errors import InputError

# The PlanSpec fields of the estimate's plan options, in the order of the options.
PLAN_FIELDS = (
    "gpus tp pp cp vpp micro_batch global_batch seq_length recompute recompute_num_layers"
    " sequence_parallel zero dtype grad_dtype fp8_weight_copies zero3_max_live_params"
    " zero3_prefetch_layers zero3_backward_prefetch_layers zero3_gather_unit zero3_reduce_unit"
    " zero3_regather_recompute"
    " cp_algorithm schedule attention offload_weights offload_activations offload_activation_layers"
    " offload_optimizer overlap_tp_comm overlap_dp_grad_reduce overlap_param_gather placement"
    " stage_layers layers_first_stage layers_last_stage embedding_as_layer loss_as_layer ep etp"
    " moe_dispatcher capacity_factor moe_balance expert_load_cv moe_a2a_overlap recompute_modules tp_layout"
    " tp_rows summa_panels"
).split()


def plan_fields(params: dict) -> dict:
    """{PlanSpec field: value} of the estimate's plan options (``params``: the command's parameters
    by name): choices as their values, the two ``--no-overlap-*`` switches turned round, the lists
    of ``--stage-layers`` and ``--recompute-modules`` split."""
    fields = {}
    for field in PLAN_FIELDS:
        value = params[FIELD_PARAMETER.get(field, field)]
        fields[field] = value.value if isinstance(value, Enum) else value
    fields["overlap_dp_grad_reduce"] = not params["no_overlap_dp"]
    fields["overlap_param_gather"] = not params["no_overlap_param_gather"]
    fields["stage_layers"] = _int_list(params["stage_layers"], "--stage-layers")
    modules = params["recompute_modules"]
    fields["recompute_modules"] = [m for m in modules.split(",") if m] if modules else None
    return fields


def apply_sets(model_spec, system_spec, sets: list[str]):
    """``--set PATH=VALUE`` (the paths of ``paraplan sweep --set``, and the system's switches and choices,
    sweep.params.choice_fields; one value each) applied to the model and the system, re-validated."""
    if not sets:  # the sweep package loads only when a --set is given (issue 31)
        return model_spec, system_spec
    from paraplan.sweep.params import apply_overrides, override_values, parse_sets

    axes = parse_sets(sets, choices=True)
    for axis in axes:
        if len(axis.values) != 1:
            raise InputError(
                f"--set {axis.path}: {','.join(axis.values)!r} gives {len(axis.values)} values; "
                "estimate takes one (paraplan sweep takes lists)"
            )
    if not axes:
        return model_spec, system_spec
    overrides = override_values(axes, tuple(a.values[0] for a in axes))
    state = overrides.get(OPTIMIZER_STATE)
    if state is not None:  # its traffic follows, as from a profile (None: the system's stays)
        from paraplan.cost.frameworks import put_step_bytes

        put_step_bytes(overrides, STEP_BYTES, overrides.get(STEP_BYTES), state)
    return apply_overrides(model_spec, system_spec, overrides)


def set_overrides(sets: list[str] | None):
    """The ``--set`` values as the overrides of cost.frameworks.run_specs (applied after the framework
    profile, so they win over it, by every command alike); None when none is given."""
    if not sets:
        return None
    return lambda model_spec, system_spec: apply_sets(model_spec, system_spec, sets)


# a --set of the optimizer-state precision also sets the step's traffic it implies (cost.frameworks.put_step_bytes)
OPTIMIZER_STATE = "accelerator.efficiency.runtime.optimizer_state"
STEP_BYTES = "accelerator.efficiency.optimizer_step_bytes"


def _int_list(text: str | None, option: str) -> tuple[int, ...] | None:
    """'15,16,15' -> (15, 16, 15); InputError naming the option otherwise."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InputError(
            f"{option}: {text!r} is not allowed; give whole numbers separated by commas"
        ) from None


# plan fields whose estimate option has another name (the rest: the option's parameter is the field)
FIELD_PARAMETER = {
    "overlap_dp_grad_reduce": "no_overlap_dp",
    "overlap_param_gather": "no_overlap_param_gather",
}


# options besides the plan's an encoder-decoder's per-stage estimate honours (parameter names); others are refused
STAGED_ESTIMATE_OPTIONS = frozenset(
    {"model", "system", "gpus", "plan_file", "set_", "as_json", "width"}
)


def given_plan_options(ctx: typer.Context, fields: dict) -> dict[str, str]:
    """{plan field: option as typed} of the plan options given on the command line (not defaults)."""
    options = {p.name: p.opts[0] for p in ctx.command.params}
    out = {}
    for field in fields:
        param = FIELD_PARAMETER.get(field, field)
        source = ctx.get_parameter_source(param)  # typer may vendor click: compare the enum by name
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            out[field] = options[param]
    return out


def framework_defaults(ctx: typer.Context, plan_fields: dict, profile) -> dict:
    """``plan_fields`` with the plan fields a profile sets (cost.frameworks.PLAN_DEFAULTS) whose option
    (FIELD_PARAMETER) the user left at its CLI default replaced by the profile's defaults."""
    if profile is None:
        return plan_fields
    from paraplan.cost.frameworks import PLAN_DEFAULTS, framework_plan_fields

    options = {key: FIELD_PARAMETER.get(key, key) for key in PLAN_DEFAULTS}
    given = explicit_options(ctx, tuple(options.values()))
    unset = {key for key, option in options.items() if option not in given}
    return framework_plan_fields(profile, {k: v for k, v in plan_fields.items() if k not in unset})


def plan_file_sources(plan_file, model, system, framework):
    """(model, system, framework, the names taken from the file): what ``--plan FILE`` names (a
    search JSON's problem, an estimate JSON's top level) fills the options not given (issue 34)."""
    named: set[str] = set()
    if plan_file is not None:
        from paraplan.export.planfile import source_framework, source_names

        file_model, file_system = source_names(plan_file)
        if model is None and file_model:
            model, named = file_model, named | {"model"}
        if system is None and file_system:
            system, named = file_system, named | {"system"}
        framework = framework or source_framework(plan_file)
    if model is None:
        raise InputError(
            "--model: missing; give --model (or --plan FILE from search --json / estimate --json)"
        )
    return model, system, framework, named
