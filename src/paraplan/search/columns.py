"""The search's candidates column-wise: a row's grid as arrays (``grid_arrays``), and the plan fields and metrics
of a batch of candidates (``plan_columns``, ``feasible_columns``: the CSV of ``--csv`` / ``--csv-all``)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from paraplan.search.options import ExpertOption, OffloadOption, ScheduleOption, StateOption
from paraplan.specs.plan import PLAN_COLUMNS, PlanSpec
from paraplan.specs.tp_layout import TP_LAYOUTS
from paraplan.step.build import GridKnobs
from paraplan.specs.recompute import MODE_NAMES, MODES
from paraplan.step.compose import SCHEDULE_FLAGS
from paraplan.units import GiB

# by a row's recompute_mode id (specs.recompute.MODE_NAMES): its step code, its plan's recompute and modules
MODE_CODES = np.array([MODES[n].code for n in MODE_NAMES])
_MODE_RECOMPUTE = np.array([MODES[n].recompute for n in MODE_NAMES])
_MODE_MODULES = np.empty(len(MODE_NAMES), dtype=object)
_MODE_MODULES[:] = [MODES[n].modules or None for n in MODE_NAMES]
_GRID_DTYPES = {
    f.name: (np.int64 if f.name in ("vpp", "zero", "offload_activation_layers") else bool)
    for f in fields(GridKnobs)
}


# the grid_arrays fields a schedule option sets (constant inside a group of options, run._GridIndex)
SCHEDULE_FIELDS = ("vpp", *SCHEDULE_FLAGS.values(), "embedding_as_layer", "loss_as_layer")


def grid_arrays(parts: tuple[list, list, list]) -> dict[str, np.ndarray]:
    """The grid of ``space.grid_parts`` (schedule × state × offload options, in space.grid's order)
    as arrays: the GridKnobs fields plus the split's "embedding_as_layer" and "loss_as_layer" (0 or 1)."""
    schedules = [ScheduleOption(*option) for option in parts[0]]
    states = [StateOption(*option) for option in parts[1]]
    offloads = [OffloadOption(*option) for option in parts[2]]
    n_s, n_t, n_o = len(schedules), len(states), len(offloads)

    def column(options: list[tuple], value, inner: int, outer: int) -> np.ndarray:
        return np.tile(np.repeat(np.array([value(o) for o in options]), inner), outer)

    values = {
        "vpp": column(schedules, lambda s: s.vpp, n_t * n_o, 1),
        **{
            flag: column(schedules, lambda s, name=name: s.schedule == name, n_t * n_o, 1)
            for name, flag in SCHEDULE_FLAGS.items()
        },
        "embedding_as_layer": column(schedules, lambda s: s.split[0], n_t * n_o, 1),
        "loss_as_layer": column(schedules, lambda s: s.split[1], n_t * n_o, 1),
        "zero": column(states, lambda t: t.zero, n_o, n_s),
        "overlap_dp_grad_reduce": column(states, lambda t: t.overlap_dp_grad_reduce, n_o, n_s),
        "overlap_param_gather": column(states, lambda t: t.overlap_param_gather, n_o, n_s),
        "offload_weights": column(offloads, lambda o: o.weights, 1, n_s * n_t),
        "offload_activations": column(offloads, lambda o: o.activations, 1, n_s * n_t),
        "offload_optimizer": column(offloads, lambda o: o.optimizer, 1, n_s * n_t),
        # activation offload is all-or-nothing in the search (0: every layer; --offload-activation-layers is estimate-only)
        "offload_activation_layers": np.zeros(n_s * n_t * n_o),
    }
    out = {k: values[k].astype(_GRID_DTYPES[k]) for k in _GRID_DTYPES}
    for name in ("embedding_as_layer", "loss_as_layer"):
        out[name] = values[name].astype(np.int64)
    return out


def plan_columns(table, index, grid_values: dict) -> dict[str, np.ndarray]:
    """The PlanSpec fields of a batch of candidates, column-wise, in PlanSpec's field order
    (specs.plan.PLAN_COLUMNS); fields the search does not vary keep their default."""
    c = table.columns
    values = {
        "tp": c["tp"][index],
        "pp": c["pp"][index],
        "cp": c["cp"][index],
        "dp": c["dp"][index],
        "vpp": grid_values["vpp"],
        "micro_batch": c["micro_batch"][index],
        "sequence_parallel": c["sp"][index].astype(bool),
        "recompute": _MODE_RECOMPUTE[c["recompute_mode"][index]],
        "recompute_modules": _MODE_MODULES[c["recompute_mode"][index]],
        "zero": grid_values["zero"],
        "schedule": np.select(
            [grid_values[flag] for flag in SCHEDULE_FLAGS.values()], list(SCHEDULE_FLAGS), "1f1b"
        ),
        "offload_weights": grid_values["offload_weights"],
        "offload_activations": grid_values["offload_activations"],
        "offload_optimizer": grid_values["offload_optimizer"],
        "overlap_dp_grad_reduce": grid_values["overlap_dp_grad_reduce"],
        "overlap_param_gather": grid_values["overlap_param_gather"],
        "overlap_tp_comm": c["overlap_tp"][index].astype(bool),
        "placement": np.array(table.placement_names)[c["placement"][index]],
        "embedding_as_layer": grid_values["embedding_as_layer"].astype(bool),
        "loss_as_layer": grid_values["loss_as_layer"].astype(bool),
        "tp_layout": np.array(TP_LAYOUTS)[c["layout"][index]],
        "tp_rows": np.where(c["tp_rows"][index] > 0, c["tp_rows"][index], None).astype(object),
    }
    experts = table.expert_choices
    chosen = c["expert"][index]
    for field in ("ep", "etp", "dispatcher", "a2a_overlap"):
        name = {"dispatcher": "moe_dispatcher", "a2a_overlap": "moe_a2a_overlap"}.get(field, field)
        values[name] = np.array([getattr(ExpertOption(*e), field) for e in experts])[chosen]
    values["capacity_factor"] = _default_column(table.problem.capacity_factor, len(index))
    values["moe_balance"] = np.full(len(index), table.problem.moe_balance)
    values["expert_load_cv"] = _default_column(table.problem.expert_load_cv, len(index))
    n = len(index)
    return {
        name: values[name]
        if name in values
        else _default_column(PlanSpec.model_fields[name].default, n)
        for name in PLAN_COLUMNS
    }


def _default_column(default, n: int) -> np.ndarray:
    """n copies of a plan field's default (object array; fill keeps sequence defaults such as () whole)."""
    column = np.empty(n, dtype=object)
    column.fill(default)
    return column


def feasible_columns(
    table, index, grid_values: dict, step, obj, peak, tokens
) -> dict[str, np.ndarray]:
    """Plan fields and metrics of a batch of candidates, column-wise (the CSV of ``--csv``)."""
    return {
        **plan_columns(table, index, grid_values),
        "global_batch": table.columns["global_batch"][index],
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "objective": obj,
        "peak_memory_gib": peak / GiB,
    }
