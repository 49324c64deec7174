"""The rows of the canonical plan space as arrays, and their candidates' StepInputs.

``RowTable`` enumerates every row of ``space.rows`` (same canonical order) and gathers, per row,
the same facts ``stages.row_facts`` gives the estimator — from the same cached functions
(``stages.block_cost_facts``, ``block_memory_facts``, ``gradient_group``, ``pipeline_links``)
— as one ``stages.RowFacts`` of arrays. Block terms then come from ``stages.row_blocks`` on
those arrays, and a batch of candidates (rows × grid options) becomes ``StepInputs`` through
``stages.build_step_inputs``: the estimator's own builder.
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from types import SimpleNamespace

from paraplan.search.arrays import stack, take
from paraplan.cost.moe import expert_dp_span
from paraplan.graph.ops import ExpertShape
from paraplan.graph.transformer import LayerShape
from paraplan.specs.moe_model import moe_shaped
from paraplan.step.compose import BLOCK_TERM_NAMES, RECOMPUTE_CODES, SCHEDULE_FLAGS, StepInputs
from paraplan.search.space import Row, SearchProblem
from paraplan.specs.plan import PLAN_COLUMNS, PlanSpec
from paraplan.specs.split import accounted_units, default_first_last, grouped_split
from paraplan.specs.tp_layout import TP_LAYOUTS, panel_count
from paraplan.step.build import (
    BlockFacts,
    GridKnobs,
    RowFacts,
    block_cost_facts,
    block_memory_facts,
    build_step_inputs,
    default_recompute_modules,
    gradient_group,
    head_params_with_embedding,
    model_gradient_groups,
    pipeline_links,
    row_blocks,
    system_terms,
)
from paraplan.units import GiB

RECOMPUTE_NAMES = np.array(sorted(RECOMPUTE_CODES, key=RECOMPUTE_CODES.get))
_GRID_DTYPES = {
    f.name: (np.int64 if f.name in ("vpp", "zero", "offload_activation_layers") else bool)
    for f in fields(GridKnobs)
}


# the grid_arrays fields a schedule option sets (constant inside a group of options, run._GridIndex)
SCHEDULE_FIELDS = ("vpp", *SCHEDULE_FLAGS.values(), "embedding_as_layer", "loss_as_layer")


def grid_arrays(parts: tuple[list, list, list]) -> dict[str, np.ndarray]:
    """The grid of ``space.grid_parts`` (schedule × state × offload options, in space.grid's order)
    as arrays: the GridKnobs fields plus the split's "embedding_as_layer" and "loss_as_layer" (0 or 1)."""
    schedules, states, offloads = parts
    n_s, n_t, n_o = len(schedules), len(states), len(offloads)

    def column(
        options: list[tuple], i: int, inner: int, outer: int, value=lambda x: x
    ) -> np.ndarray:
        return np.tile(np.repeat(np.array([value(o[i]) for o in options]), inner), outer)

    values = {
        "vpp": column(schedules, 0, n_t * n_o, 1),
        **{
            flag: column(schedules, 1, n_t * n_o, 1, lambda x, name=name: x == name)
            for name, flag in SCHEDULE_FLAGS.items()
        },
        "embedding_as_layer": column(schedules, 2, n_t * n_o, 1, lambda split: split[0]),
        "loss_as_layer": column(schedules, 2, n_t * n_o, 1, lambda split: split[1]),
        "zero": column(states, 0, n_o, n_s),
        "overlap_dp_grad_reduce": column(states, 1, n_o, n_s),
        "overlap_param_gather": column(states, 2, n_o, n_s),
        "offload_weights": column(offloads, 0, 1, n_s * n_t),
        "offload_activations": column(offloads, 1, 1, n_s * n_t),
        "offload_optimizer": column(offloads, 2, 1, n_s * n_t),
        # activation offload is all-or-nothing in the search (0: every layer; --offload-activation-layers is estimate-only)
        "offload_activation_layers": np.zeros(n_s * n_t * n_o),
    }
    out = {k: values[k].astype(_GRID_DTYPES[k]) for k in _GRID_DTYPES}
    for name in ("embedding_as_layer", "loss_as_layer"):
        out[name] = values[name].astype(np.int64)
    return out


def _modules(recompute: str) -> tuple[str, ...]:
    return default_recompute_modules(recompute)


def _expert_shape(problem: SearchProblem, choice: tuple) -> ExpertShape:
    """The ExpertShape of an expert option (space.expert_options) with the problem's fixed knobs."""
    ep, etp, dispatcher, a2a_overlap = choice
    return ExpertShape(
        ep, etp, dispatcher, problem.capacity_factor, problem.moe_balance, a2a_overlap
    )


def _expert_spans(spans: dict, tp: int, cp: int, dp: int, choice: tuple, system) -> dict:
    """A placement's spans with the expert gradient group's span for the option's ep and etp."""
    if "expert" not in spans:
        return spans
    degrees = SimpleNamespace(tp=tp, cp=cp, dp=dp, ep=choice[0], etp=choice[1])
    return {**spans, "expert": expert_dp_span(degrees, system)}


def layer_shape_of(
    problem: SearchProblem,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    layout: str,
    rows: int,
    expert: ExpertShape = ExpertShape(),
    modules: tuple[str, ...] = (),
) -> LayerShape:
    """The LayerShape of a row: estimate.layer_shape's rule (a 2D grid of ``rows`` rows states its
    activation split as sequence parallelism, with the default panel count; MoE-shaped models add
    the expert knobs and the modules selective recomputation re-runs)."""
    summa = layout == "2d"
    r = rows if summa else 1
    return LayerShape(
        tp,
        cp,
        micro_batch,
        problem.seq_length,
        (sp or summa) and tp > 1,
        problem.attention,
        problem.dtype,
        expert=expert,
        recompute_modules=modules,
        tp_layout=layout,
        tp_rows=r,
        summa_panels=panel_count(r, tp // r, None) if summa else 1,
        cp_algorithm=problem.cp_algorithm,
    )


def shape_keys_of(knobs: list[tuple]) -> list[tuple]:
    """(sequence parallel, layout, grid rows or 0) of each layer-knob option (space.layer_knobs)."""
    return [(sp, layout, rows or 0) for sp, _, _, layout, rows in knobs]


class RowTable:
    """Every row of the canonical space: columns (degrees, batch, knobs) and one RowFacts of arrays."""

    def __init__(self, problem: SearchProblem, progress=None):
        """``progress(done, total)``, when given, is called as the distinct layer costs are computed
        (the slow part of a large space: ``stages.block_cost_facts`` per layer shape and spans)."""
        self.problem = problem
        model, system = problem.model, problem.system
        names = (
            "tp",
            "pp",
            "cp",
            "dp",
            "micro_batch",
            "global_batch",
            "placement",
            "sp",
            "recompute",
            "overlap_tp",
            "layout",
            "tp_rows",
            "tp_domains",
            "cost_id",
            "memory_id",
            "p2p_id",
            "group_id",
            "expert",
        )
        cols: dict[str, list] = {k: [] for k in names}
        self.placement_names: list[str] = []
        ids: dict[str, dict] = {k: {} for k in ("placement", "cost", "memory", "p2p", "group")}
        costs: list[
            dict
        ] = []  # per (shape, tp span, cp span): BLOCK_KINDS -> (compute, comm, params)
        memories: list[dict] = []  # per (shape, recompute): BLOCK_KINDS -> (kept, held, buffer)
        transfers: list = []  # per (tp, cp, micro-batch, pp span): step.p2p.PipelineLinks
        groups: list[dict] = []  # per set of gradient-group spans: name -> GradientGroup
        expert_ids: dict[tuple, int] = {}  # (ep, etp, dispatcher, a2a overlap) -> id

        pending: list = []  # the makers of every distinct entry, run after the enumeration (in id order)

        def intern(kind: str, key, make) -> int:
            table = ids[kind]
            if key not in table:
                table[key] = len(table)
                pending.append(make)
            return table[key]

        reduced = model_gradient_groups(model)
        shaped = moe_shaped(
            model
        )  # its layer graphs read the expert knobs and the recomputed modules
        for tp, pp, cp, dp in problem.factorizations:
            knobs = [
                (*k, e)
                for k in problem.layer_knobs(tp, cp)
                for e in problem.expert_options(tp, cp, dp)
            ]
            if not knobs:
                continue
            placements = problem.placements(tp, pp, cp, dp)
            n_p, n_k = len(placements), len(knobs)
            pids = [
                intern("placement", name, lambda name=name: self.placement_names.append(name))
                for name, _ in placements
            ]
            experts = sorted({e for *_, e in knobs})
            expert_of = np.array([experts.index(e) for *_, e in knobs])
            # gradient groups per (placement, expert degrees): the expert group's span follows ep and etp
            group_of = np.array(
                [
                    [
                        intern(
                            "group",
                            (tuple(spans[g] for g in reduced), e[:2]),
                            lambda spans=spans, e=e, tp=tp, cp=cp, dp=dp: groups.append(
                                {
                                    g: gradient_group(
                                        system, _expert_spans(spans, tp, cp, dp, e, system)[g]
                                    )
                                    for g in reduced
                                }
                            ),
                        )
                        for e in experts
                    ]
                    for _, spans in placements
                ]
            )
            pairs: dict[tuple, int] = {}  # distinct (tp span, cp span) among the placements
            pair_of = np.array(
                [
                    pairs.setdefault((spans["tp"], spans["cp"]), len(pairs))
                    for _, spans in placements
                ]
            )
            knob_sp = np.array([k[0] for k in knobs])
            knob_rc = np.array([RECOMPUTE_CODES[k[1]] for k in knobs])
            knob_ov = np.array([k[2] for k in knobs])
            knob_ex = [k[5] for k in knobs]
            knob_layout = np.array([TP_LAYOUTS.index(k[3]) for k in knobs])
            knob_rows = np.array([k[4] or 0 for k in knobs])
            # the layer-shape inputs each knob fixes: costs per (sp, layout, grid rows, recomputed
            # modules, expert knobs), activation memory per (the same with the recompute mode)
            knob_keys = shape_keys_of([k[:5] for k in knobs])
            cost_states = [
                (key, _modules(k[1]) if shaped else (), k[5]) for key, k in zip(knob_keys, knobs)
            ]
            cost_keys = sorted(set(cost_states), key=cost_states.index)
            cost_state_of = np.array([cost_keys.index(k) for k in cost_states])
            memory_states = [(key, k[1], k[5]) for key, k in zip(knob_keys, knobs)]
            memory_keys = sorted(set(memory_states), key=memory_states.index)
            memory_state_of = np.array([memory_keys.index(k) for k in memory_states])
            batches = problem.micro_batches(dp)
            if not batches:
                continue
            p2p_ids, cost_ids, memory_ids = [], [], []
            for mb, gb in batches:
                # makers run after the enumeration (_run_makers): every loop variable they read is bound here
                def shape(key, modules, e, mb=mb, tp=tp, cp=cp):
                    return layer_shape_of(
                        problem,
                        tp,
                        cp,
                        mb,
                        *key,
                        _expert_shape(problem, e) if shaped else ExpertShape(),
                        modules,
                    )

                p2p_ids.append(
                    [
                        intern(
                            "p2p",
                            (tp, cp, mb, spans["pp"]),
                            lambda spans=spans, mb=mb, tp=tp, cp=cp: transfers.append(
                                pipeline_links(
                                    model,
                                    system,
                                    layer_shape_of(problem, tp, cp, mb, False, "1d", 0),
                                    spans["pp"],
                                )
                            ),
                        )
                        for _, spans in placements
                    ]
                )
                # block costs per (cost state, span pair), activation memory per memory state: computed once each
                cost_ids.append(
                    [
                        [
                            intern(
                                "cost",
                                (tp, cp, mb, key, pair),
                                lambda key=key, pair=pair, shape=shape: costs.append(
                                    block_cost_facts(model, system, shape(*key), *pair)
                                ),
                            )
                            for pair in pairs
                        ]
                        for key in cost_keys
                    ]
                )
                memory_ids.append(
                    [
                        intern(
                            "memory",
                            (tp, cp, mb, key),
                            lambda key=key, shape=shape: memories.append(
                                block_memory_facts(
                                    model,
                                    shape(key[0], _modules(key[1]) if shaped else (), key[2]),
                                    key[1],
                                )
                            ),
                        )
                        for key in memory_keys
                    ]
                )
            # every micro-batch of this factorization at once: rows ordered (micro-batch, placement, knob)
            n_b, per_batch = len(batches), n_p * n_k
            n = n_b * per_batch
            cost_of = np.array(cost_ids, dtype=np.int64)  # (micro-batch, cost state, span pair)
            memory_of = np.array(memory_ids, dtype=np.int64)  # (micro-batch, memory state)
            for name, value in (("tp", tp), ("pp", pp), ("cp", cp), ("dp", dp)):
                cols[name].append(np.full(n, value, dtype=np.int64))
            for name, i in (("micro_batch", 0), ("global_batch", 1)):
                cols[name].append(
                    np.repeat(np.array([b[i] for b in batches], dtype=np.int64), per_batch)
                )
            cols["placement"].append(np.tile(np.repeat(np.array(pids), n_k), n_b))
            cols["tp_domains"].append(
                np.tile(
                    np.repeat(np.array([spans["tp"].domains for _, spans in placements]), n_k), n_b
                )
            )
            cols["p2p_id"].append(np.repeat(np.array(p2p_ids, dtype=np.int64).reshape(-1), n_k))
            cols["group_id"].append(np.tile(group_of[:, expert_of].reshape(-1), n_b))
            cols["cost_id"].append(cost_of[:, cost_state_of[None, :], pair_of[:, None]].reshape(-1))
            cols["memory_id"].append(
                np.repeat(memory_of[:, None, :][:, :, memory_state_of], n_p, axis=1).reshape(-1)
            )
            expert_id = np.array([expert_ids.setdefault(e, len(expert_ids)) for e in knob_ex])
            for name, values in (
                ("sp", knob_sp),
                ("recompute", knob_rc),
                ("overlap_tp", knob_ov),
                ("layout", knob_layout),
                ("tp_rows", knob_rows),
                ("expert", expert_id),
            ):
                cols[name].append(np.tile(values, n_b * n_p))
        _run_makers(pending, progress)
        c = self.columns = {
            k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in cols.items()
        }
        self.size = len(c["tp"])
        self.layer_kinds = _layer_kinds(model)
        if not self.size:
            self.facts = self.blocks = None
            return
        cid, mid = c["cost_id"], c["memory_id"]
        block_facts = {
            kind: BlockFacts.of(
                stack([f[kind] for f in costs], cid), stack([m[kind] for m in memories], mid)
            )
            for kind in costs[0]
        }
        head_with_embedding = {
            tp: head_params_with_embedding(model, tp) for tp in set(c["tp"].tolist())
        }
        self.facts = RowFacts(
            blocks=block_facts,
            head_params_with_embedding=np.array([head_with_embedding[t] for t in c["tp"].tolist()]),
            recompute_code=c["recompute"],
            overlap_tp_comm=c["overlap_tp"].astype(bool),
            tp_domains=c["tp_domains"],
            pipeline=stack(transfers, c["p2p_id"]),
            layers=float(model.layers),
            pp=c["pp"].astype(float),
            microbatches=(c["global_batch"] // (c["dp"] * c["micro_batch"])).astype(float),
            gradient_groups=stack(groups, c["group_id"]),
            model=model,
            mtp_layers=model.mtp_layers,
        )
        self.expert_choices = list(expert_ids)
        self.blocks = row_blocks(self.facts)
        self.step_facts = replace(
            self.facts, blocks={}
        )  # what build_step_inputs reads besides the blocks
        self.constants = system_terms(system, problem.dtype, problem)

    def row(self, i: int) -> Row:
        c = self.columns
        return Row(
            int(c["tp"][i]),
            int(c["pp"][i]),
            int(c["cp"][i]),
            int(c["dp"][i]),
            self.placement_names[c["placement"][i]],
            {},
            int(c["micro_batch"][i]),
            int(c["global_batch"][i]),
            bool(c["sp"][i]),
            str(RECOMPUTE_NAMES[c["recompute"][i]]),
            bool(c["overlap_tp"][i]),
            TP_LAYOUTS[int(c["layout"][i])],
            int(c["tp_rows"][i]) or None,
            *self.expert_choices[c["expert"][i]],
        )

    def inputs(self, index: np.ndarray, grid_values: dict[str, np.ndarray]) -> StepInputs:
        """StepInputs of candidates (row ``index[i]``, grid option i): the estimator's builder on arrays."""
        facts = take(self.step_facts, index)
        first, last = default_first_last(
            facts.layers,
            facts.pp,
            *accounted_units(
                grid_values["embedding_as_layer"], grid_values["loss_as_layer"], facts.mtp_layers
            ),
        )
        split = grouped_split(facts.layers, facts.pp, first, last)
        knobs = GridKnobs(**{f.name: grid_values[f.name] for f in fields(GridKnobs)})
        return build_step_inputs(facts, take(self.blocks, index), knobs, split, self.constants)

    def lower_bounds(
        self, v_max: np.ndarray, split_backward: np.ndarray | bool = False
    ) -> np.ndarray:
        """Admissible step-time bound per row, with u the per-layer work of one micro-batch:
        m·(⌈L/p⌉·u + 1 exchange when pp > 1) + (L − ⌈L/p⌉)·u / v_max.

        Whatever the split, some stage holds F >= ⌈L/p⌉ layers, so the slowest stage does at
        least F·u (+ its transfers) per micro-batch and the other stages at least (L − F)·u in
        all; the bound is increasing in F (m >= 1 >= 1/v), so F = ⌈L/p⌉ gives a lower bound. The
        bubble divides the other stages' work by at most v_max, the largest vpp of the row's grid;
        data-parallel sync, optimizer and offload terms are >= 0. For models with several kinds of
        decoder layer (dense and MoE layers) u is the cheaper kind's work; MTP modules add >= 0.
        The split-backward schedules (ZB-H1, DualPipe) shrink the bubble below (L − F)·u / v_max
        (ZB-H1 by (F + B − 2W)/(F + B), DualPipe to (p/2 − 1)·(F&B + B − 3W)): a row whose grid has
        one (``split_backward``) keeps m·F·u only — with the bubble term, 140 of the 296 rows of a
        Mixtral problem had a bound above their best candidate's step."""
        unit = None
        for kind in self.layer_kinds:  # the cheapest kind of decoder layer the model has
            terms = self.blocks[kind].terms
            work = 0.0
            for name in (
                BLOCK_TERM_NAMES
            ):  # the time parts (``wgrad`` is a share of ``backward``, not added)
                work = work + getattr(terms, name)
            unit = work if unit is None else np.minimum(unit, work)
        facts = self.facts
        links = (
            facts.pipeline
        )  # every stage of a pipeline exchanges at least once (step.p2p.exchanges)
        p2p = np.where(facts.pp > 1, np.minimum(links.inner_s, links.outer_s), 0.0)
        layers, pp = self.problem.model.layers, self.columns["pp"]
        fullest = -(-layers // pp)
        bubble = np.where(split_backward, 0.0, (layers - fullest) * unit / v_max)
        return facts.microbatches * (fullest * unit + p2p) + bubble


def _run_makers(makers: list, progress, every: int = 256) -> None:
    """Run the deferred makers in order (each appends one entry to its table, so ids stay aligned),
    reporting ``progress(done, total)`` every ``every`` makers and at the end."""
    total = len(makers)
    if progress is not None:
        progress(0, total)
    for done, make in enumerate(makers, start=1):
        make()
        if progress is not None and (done % every == 0 or done == total):
            progress(done, total)


def _layer_kinds(model) -> tuple[str, ...]:
    """The decoder-layer block kinds a model's stages hold (stages.BLOCK_KINDS names)."""
    if not moe_shaped(model):
        return ("decoder",)
    kinds = ("dense_layer",) if (not model.is_moe or model.dense_layers > 0) else ()
    return kinds + (("moe_layer",) if model.is_moe else ())


def plan_columns(table: RowTable, index, grid_values: dict) -> dict[str, np.ndarray]:
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
        "recompute": RECOMPUTE_NAMES[c["recompute"][index]],
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
    for field, i in (("ep", 0), ("etp", 1), ("moe_dispatcher", 2), ("moe_a2a_overlap", 3)):
        values[field] = np.array([e[i] for e in experts])[chosen]
    values["capacity_factor"] = _default_column(table.problem.capacity_factor, len(index))
    values["moe_balance"] = np.full(len(index), table.problem.moe_balance)
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
    table: RowTable, index, grid_values: dict, step, obj, peak, tokens
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
