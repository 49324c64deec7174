"""The rows of the canonical plan space as arrays, and their candidates' StepInputs.

``RowTable`` enumerates every row of ``space.rows`` (same canonical order) and gathers, per row,
the same facts ``step.build.row_facts`` gives the estimator — from the same cached functions
(``step.build.kind_cost_facts``, ``block_memory_facts``, ``gradient_group``, ``pipeline_links``)
— as one ``step.build.RowFacts`` of arrays. Block terms then come from ``step.build.kind_blocks`` on
those arrays, and a batch of candidates (rows × grid options) becomes ``StepInputs`` through
``step.build.build_step_inputs``: the estimator's own builder. The blocks are costed as the search
reads them (a floor of every row's bound from op times, a row's layer work when its bound is asked
for, every block kind when a candidate is evaluated: search.bound_order).
"""

from __future__ import annotations

import copy
from dataclasses import fields, replace
from functools import lru_cache

import numpy as np

from paraplan.search.arrays import allocate, at_rows, missing, padded, put, stack, take
from paraplan.search.bounds import SAFETY
from paraplan.search.columns import (
    MODE_CODES,
    SCHEDULE_FIELDS,
    feasible_columns,
    grid_arrays,
    plan_columns,
)
from paraplan.search.options import ExpertOption, Factorization, row_dims
from paraplan.search.order_floors import order_computes
from paraplan.search.position_blocks import position_keys, varying_rows
from paraplan.search.row_enumeration import RowEnumeration
from paraplan.search.shapes import expert_shape_of, layer_shape_of, shape_keys_of
from paraplan.search.space import Row, SearchProblem
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.specs.recompute import MODE_NAMES
from paraplan.specs.split import accounted_units, default_first_last, grouped_split
from paraplan.specs.tp_layout import TP_LAYOUTS
from paraplan.step.placement import StageDims, placed_stage_inputs, stages_tile
from paraplan.step.build import (
    BlockFacts,
    GridKnobs,
    RowFacts,
    build_step_inputs,
    head_params_with_embedding,
    head_tensors_shared_with_embedding,
    kind_blocks,
    kind_compute_floor,
    kind_cost_facts,
    kind_small_width,
    kind_statics,
    kind_terms,
    model_block_kinds,
    system_terms,
    tp_overlap,
)
from paraplan.step.block_terms import unpaired_ep_exposure_s, unpaired_passes_s
from paraplan.step.compose import BLOCK_TERM_NAMES, StepInputs
from paraplan.step.constants import system_pair_share
from paraplan.step.dualpipe import overlapped_pairs, pair_compute_s
from paraplan.step.layout import model_layer_counts

# a block search's row tables ask again for the cost ids (layer shape, spans) of earlier blocks' tables (DeepSeek-V3
# over every axis: 12,600 kind costings asked, 7,560 distinct): memoised across tables; pure functions of their
# arguments, cleared with search.bounds.blocks.SEARCH_CACHES
kind_cost_facts = lru_cache(maxsize=65536)(kind_cost_facts)
kind_statics = lru_cache(maxsize=65536)(kind_statics)
TABLE_CACHES = (kind_cost_facts, kind_statics)

# named here too: the search's columns (search.columns) and layer shapes (search.shapes)
__all__ = [
    "SCHEDULE_FIELDS",
    "RowTable",
    "feasible_columns",
    "grid_arrays",
    "layer_shape_of",
    "plan_columns",
    "shape_keys_of",
]
_expert_shape = expert_shape_of  # the name tests know


class RowTable:
    """Every row of the canonical space: columns (degrees, batch, knobs) and one RowFacts of arrays. The blocks are
    costed per *unit* — rows alike in what their blocks read: cost id, memory id, recompute mode, TP overlap switch
    (the cost id fixes the TP span), ~4x fewer than the rows — and only for the units a caller reads: a floor of
    every row's layer work from op times alone (``work_floors``), each unit's layer work when a row's bound is asked
    for (``lower_bounds``), its every block kind and activation memory when a candidate of it is evaluated
    (``inputs``). Each value is the one a table costing every unit gives, bit for bit (elementwise arithmetic)."""

    def __init__(self, problem: SearchProblem, progress=None):
        """``progress(done, total)``, when given, is called as the distinct entries the rows name are computed
        (their count first: a large space's layer costings are the slow part)."""
        self.problem = problem
        walk = RowEnumeration(problem)
        walk.run(progress)
        self.costings = costings = walk.costings
        self.placement_names = costings.placement_names
        c = self.columns = {
            k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64))
            for k, v in walk.columns.items()
        }
        c["recompute"] = MODE_CODES[c["recompute_mode"]]  # the step code of each row's mode
        self.size = len(c["tp"])
        self.layer_counts = model_layer_counts(
            problem.model
        )  # (kind, its layers): pp 1's one stage
        self.layer_kinds = tuple(kind for kind, _ in self.layer_counts)
        # a floor of a pp-1 row above m·L·u where the layers differ or may dispatch (``_one_stage_s``)
        self._one_stage = problem.model.is_moe or len(self.layer_counts) > 1
        self.expert_choices = list(walk.expert_ids)
        if not self.size:
            self.facts = None
            return
        key = c["cost_id"] * (int(c["memory_id"].max()) + 1) + c["memory_id"]
        key = (key * len(MODE_CODES) + c["recompute"]) * 2 + c["overlap_tp"]
        _, self.first, unit = np.unique(key, return_index=True, return_inverse=True)
        self.unit = unit.reshape(-1)  # each row's unit; ``first``: each unit's first row
        # what build_step_inputs reads besides the blocks, per row
        self.facts = self.step_facts = self._facts(costings)
        self.constants = system_terms(problem.system, problem.dtype, problem.runtime)
        self.kinds = tuple(model_block_kinds(problem.model))
        self._kind_facts = {kind: {} for kind in self.kinds}  # cost id -> step.build.BlockCostFacts
        self._work = np.zeros(len(self.first))  # each unit's layer work (``_unit_work``)
        # its floor of what a DualPipe pair cannot hide: less its EP parts, compute over the pair's SM share
        self._kept = np.zeros(len(self.first))
        self._layers = np.zeros((2, len(self.first)))  # every layer's work, their unpaired passes
        self._share = system_pair_share(problem.system)
        self._worked = np.zeros(len(self.first), dtype=bool)
        self.blocks = None  # per kind, every unit's BlockCost (allocate), filled as read
        self._costed = np.zeros(len(self.first), dtype=bool)
        self._tiles: np.ndarray | None = None  # per row: its stages tile the nodes (``_placed``)
        self._all_tile = False
        self._varies: np.ndarray | None = None  # per row: its stages' spans differ (``_placed``)
        self._floors: np.ndarray | None = None  # ``work_floors``, once
        self._order: np.ndarray | None = None  # ``order_floors``, once
        self._statics: dict | None = None  # per kind, each cost id's step.build.kind_statics
        self._widths: dict | None = None  # per kind, the longest small-tensor list of its statics

    def _facts(self, costings) -> RowFacts:
        """The rows' RowFacts but their blocks, pipeline links and gradient groups: each row's entries of the
        costings, stacked into arrays. The links and groups are stacked per entry (``links``, ``groups``: a few
        thousand and a few dozen) and each candidate takes its row's by id (``inputs``)."""
        model, c = self.problem.model, self.columns
        self.links = stack(costings.transfers, np.arange(len(costings.transfers)))
        self.groups = stack(costings.groups, np.arange(len(costings.groups)))
        tps = np.flatnonzero(np.bincount(c["tp"]))  # the distinct tp degrees, in order
        head = np.array([head_params_with_embedding(model, int(tp)) for tp in tps])
        return RowFacts(
            blocks={},
            head_params_with_embedding=head[np.searchsorted(tps, c["tp"])],
            recompute_code=c["recompute"],
            overlap_tp_comm=c["overlap_tp"].astype(bool),
            tp_domains=c["tp_domains"],
            pipeline=None,  # ``links`` by p2p id
            layers=float(model.layers),
            pp=c["pp"].astype(float),
            microbatches=(c["global_batch"] // (c["dp"] * c["micro_batch"])).astype(float),
            gradient_groups={},  # ``groups`` by group id
            model=model,
            mtp_layers=model.mtp_layers,
            head_shared_tensors=head_tensors_shared_with_embedding(model),
        )

    def row(self, i: int) -> Row:
        c = self.columns
        expert = ExpertOption(*self.expert_choices[c["expert"][i]])
        return Row(
            row_dims(
                Factorization(*(int(c[name][i]) for name in Factorization._fields)),
                self.placement_names[c["placement"][i]],
                expert,
            ),
            {},
            int(c["micro_batch"][i]),
            int(c["global_batch"][i]),
            bool(c["sp"][i]),
            MODE_NAMES[int(c["recompute_mode"][i])],
            bool(c["overlap_tp"][i]),
            TP_LAYOUTS[int(c["layout"][i])],
            int(c["tp_rows"][i]) or None,
            expert.dispatcher,
            expert.a2a_overlap,
        )

    def inputs(self, index: np.ndarray, grid_values: dict[str, np.ndarray]) -> StepInputs:
        """StepInputs of candidates (row ``index[i]``, grid option i): the estimator's builder on arrays."""
        c = self.columns
        facts = replace(
            take(self.step_facts, index),
            pipeline=take(self.links, c["p2p_id"][index]),
            gradient_groups=take(self.groups, c["group_id"][index]),
        )
        first, last = default_first_last(
            facts.layers,
            facts.pp,
            *accounted_units(
                grid_values["embedding_as_layer"], grid_values["loss_as_layer"], facts.mtp_layers
            ),
        )
        split = grouped_split(facts.layers, facts.pp, first, last)
        knobs = GridKnobs(**{f.name: grid_values[f.name] for f in fields(GridKnobs)})
        units = self.unit[index]
        self._cost_units(units)
        blocks = take(self.blocks, units)
        inp = build_step_inputs(facts, blocks, knobs, split, self.constants)

        def entries_at(
            position: int,
        ):  # the entries of ``inp`` with a stage's blocks on its own spans
            mixed = self._position_blocks(blocks, index, units, position)
            return build_step_inputs(facts, mixed, knobs, split, self.constants).stages

        return self._placed(inp, index, split, facts.pipeline, entries_at)

    def _placed(self, inp: StepInputs, index: np.ndarray, split, links, entries_at) -> StepInputs:
        """``inp`` with the candidates whose stages do not tile the nodes laid out stage by stage, as the
        estimator lays out such a plan (step.placement.placed_stage_inputs), where some stages' tp/cp spans
        differ each stage's blocks on its own (``entries_at``: ``_position_blocks``); ``inp`` itself when none."""
        if self._all_tiles():
            return inp
        tiles = self._tiles[index]
        if tiles.all():
            return inp
        c, system = self.columns, self.problem.system
        dims = StageDims(*(c[name][index] for name in StageDims._fields))
        varies = self._varies[index].any()  # search.position_blocks
        return placed_stage_inputs(
            inp, split, links, system, dims, ~tiles, entries_at if varies else None
        )

    def _all_tiles(self) -> bool:
        """Whether every row's stages tile the nodes (per row, once, in ``_tiles``; where not, ``_varies``: the
        rows whose stages' tp/cp spans differ, search.position_blocks.varying_rows)."""
        if self._tiles is None:  # most spaces (powers of two) tile throughout
            c, domain = self.columns, self.problem.system.node.gpus_per_domain
            default = np.array([name == DEFAULT_PLACEMENT_LABEL for name in self.placement_names])
            self._tiles = stages_tile(c["tp"] * c["cp"] * c["dp"], domain, default[c["placement"]])
            self._all_tile = bool(self._tiles.all())
            self._varies = varying_rows(c, self._tiles, domain)
        return self._all_tile

    def _position_blocks(self, blocks: dict, index: np.ndarray, units: np.ndarray, position: int):
        """``blocks`` (the candidates' units' blocks) with those of the candidates whose stages' spans differ and
        whose pipeline has a stage at ``position`` costed on that stage's tp and cp spans (step.placement's
        position_spans, as the estimator costs them: step.build.kind_cost_facts, kind_blocks)."""
        c = self.columns
        live = self._varies[index] & (position < c["pp"][index])
        if not live.any():
            return blocks
        live = np.nonzero(live)  # ``index`` may have any shape (search.grid_index.evaluate_groups)
        domain = self.problem.system.node.gpus_per_domain
        keys, which = position_keys(c, index[live], units[live], position, domain)
        rows = self.first[np.array([u for u, _ in keys], dtype=np.int64)]
        mids, memories = c["memory_id"][rows], {}
        for m in np.unique(mids).tolist():
            memories[m] = self.costings.entries("memory", [m])[0]
        model, system, widths = self.problem.model, self.problem.system, self._small_widths()
        facts = {}
        for kind in self.kinds:
            costs = [
                padded(
                    kind_cost_facts(model, system, self.costings.costs[cid].shape, *pair, kind),
                    widths[kind],
                )
                for cid, (_, pair) in zip(c["cost_id"][rows].tolist(), keys)
            ]
            every = np.arange(len(keys))
            facts[kind] = BlockFacts.of(
                stack(costs, every), stack([memories[m][kind] for m in mids.tolist()], every)
            )
        domains = np.array([pair[0].domains for _, pair in keys])
        costed = kind_blocks(
            facts, c["recompute"][rows], c["overlap_tp"][rows].astype(bool), domains
        )
        mixed = copy.deepcopy(blocks)
        put(mixed, live, take(costed, which))
        return mixed

    # ---- the blocks, costed per unit as they are read ------------------------------------------
    def _kind_cost(self, kind: str, ids) -> list:
        """step.build.kind_cost_facts of a block kind at the cost ids ``ids`` (each computed once)."""
        known, inputs = self._kind_facts[kind], self.costings.costs
        model, system = self.problem.model, self.problem.system
        out = []
        for i in ids:
            found = known.get(i)
            if found is None:
                found = known[i] = kind_cost_facts(model, system, *inputs[i], kind)
            out.append(found)
        return out

    def _all_statics(self) -> dict[str, list]:
        """Per kind of decoder layer, step.build.kind_statics at every cost id (op times and weight-tensor facts: no
        collective costed), worked out once per layer shape (``work_floors``)."""
        if self._statics is None:
            model, system = self.problem.model, self.problem.system
            shapes = [inputs.shape for inputs in self.costings.costs]
            distinct = list(dict.fromkeys(shapes))
            self._statics = {}
            for kind in self.layer_kinds:
                of = {shape: kind_statics(model, system, shape, kind) for shape in distinct}
                self._statics[kind] = [of[shape] for shape in shapes]
        return self._statics

    def _small_widths(self) -> dict[str, int]:
        """Per block kind, the longest small-tensor list of kind_statics over every cost id (step.build.kind_small_width:
        the kind's weight tensors only, no op costed), worked out once per layer shape when first read; a layer kind's
        from the floors' statics (``_all_statics``) when they are worked out."""
        if self._widths is None:
            model, statics = self.problem.model, self._statics or {}
            distinct = list(dict.fromkeys(inputs.shape for inputs in self.costings.costs))
            self._widths = {
                kind: max(len(s[3]) for s in statics[kind])
                if kind in statics
                else kind_small_width(model, distinct, kind)
                for kind in self.kinds
            }
        return self._widths

    def _cost_units(self, units: np.ndarray) -> None:
        """Cost every block kind of the units ``units`` not costed yet into ``blocks``: the BlockCost
        ``step.build.kind_blocks`` gives their rows' facts (the small-tensor lists padded to the width a table of
        every unit has, the longest list of the kind: arrays.stack)."""
        need = missing(units, self._costed)
        if not need.size:
            return
        rows, c = self.first[need], self.columns
        cid, ids = np.unique(c["cost_id"][rows], return_inverse=True)
        mid, mids = np.unique(c["memory_id"][rows], return_inverse=True)
        memories = self.costings.entries("memory", mid.tolist())
        widths = self._small_widths()
        facts = {}
        for kind in self.kinds:
            costs = [padded(f, widths[kind]) for f in self._kind_cost(kind, cid.tolist())]
            facts[kind] = BlockFacts.of(
                stack(costs, ids.reshape(-1)), stack([m[kind] for m in memories], mids.reshape(-1))
            )
        blocks = kind_blocks(
            facts, c["recompute"][rows], c["overlap_tp"][rows].astype(bool), c["tp_domains"][rows]
        )
        if self.blocks is None:
            self.blocks = {
                kind: allocate(b, len(self.first), {"small_numels": widths[kind]})
                for kind, b in blocks.items()
            }
        put(self.blocks, need, blocks)
        self._costed[need] = True

    def _unit_work(self, units: np.ndarray) -> np.ndarray:
        """Each unit's layer work u: the per-micro-batch terms of its cheapest kind of decoder layer, summed
        (``lower_bounds``); the layer kinds' blocks costed for the units not worked out yet."""
        need = missing(units, self._worked)
        if need.size:
            rows, c = self.first[need], self.columns
            cid, ids = np.unique(c["cost_id"][rows], return_inverse=True)
            overlap = tp_overlap(c["overlap_tp"][rows].astype(bool), c["tp_domains"][rows])
            least = kept = None
            whole = unpaired = 0.0
            for kind, layers in self.layer_counts:
                facts = stack(self._kind_cost(kind, cid.tolist()), ids.reshape(-1))
                terms = kind_terms(kind, facts.compute, facts.comm, c["recompute"][rows], overlap)
                work = 0.0
                for (
                    name
                ) in BLOCK_TERM_NAMES:  # the time parts (``wgrad`` is a share of ``backward``)
                    work = work + getattr(terms, name)
                least = work if least is None else np.minimum(least, work)
                if self._one_stage:
                    whole = whole + layers * work
                    unpaired = unpaired + layers * unpaired_ep_exposure_s(terms)
                # what a DualPipe pair cannot hide (step.dualpipe.overlapped_pair_s): C/s + X, s where it dispatches
                compute = terms.forward + terms.backward + terms.recompute
                paired = pair_compute_s(compute, terms.ep_comm > 0.0, self._share)
                rest = work - terms.ep_forward - terms.ep_backward - compute + paired
                kept = rest if kept is None else np.minimum(kept, rest)
            self._work[need] = least
            self._kept[need] = np.maximum(kept, 0.0)
            self._layers[0, need], self._layers[1, need] = whole, unpaired  # either may be a number
            self._worked[need] = True
        return self._work[units]

    def work_floors(self) -> np.ndarray:
        """Per row, a floor of its layer work u (``_unit_work``) from op times alone: the least over its kinds of
        decoder layer of step.build.kind_compute_floor, which is the first three of the terms u sums — so at most
        u, bit for bit — and costs no collective."""
        if self._floors is None:
            statics = self._all_statics()
            self._floors = self._least_floor(
                {kind: [compute for compute, *_ in statics[kind]] for kind in self.layer_kinds}
            )
        return self._floors

    def order_floors(self) -> np.ndarray:
        """Per row, a floor of ``work_floors``' (so of u) for the bound order (search.row_scan, the same order from
        any floor of the bounds): search.order_floors.order_computes, a dense decoder layer costed without its graph
        (Llama 3.1 405B: 120 graphs for 880 shapes); ``work_floors`` itself where that does not pay, and where some
        row's stages' spans differ (``lower_bounds`` reads ``work_floors`` then)."""
        if self._order is None:
            varied = not self._all_tiles() and self._varies.any()
            costs, kinds = self.costings.costs, self.layer_kinds
            computes = None if varied else order_computes(self.problem, costs, kinds)
            self._order = self.work_floors() if computes is None else self._least_floor(computes)
        return self._order

    def _least_floor(self, computes: dict) -> np.ndarray:
        """Per row, the least over the layer kinds of step.build.kind_compute_floor of its cost id's compute
        (``computes``: per kind, one per cost id)."""
        c, least = self.columns, None
        for kind in self.layer_kinds:
            work = kind_compute_floor(kind, stack(computes[kind], c["cost_id"]), c["recompute"])
            least = work if least is None else np.minimum(least, work)
        return np.broadcast_to(least, (self.size,))

    def lower_bounds(
        self,
        v_max: np.ndarray,
        split_backward: np.ndarray | bool,
        rows: np.ndarray | None = None,
        work: np.ndarray | None = None,
        dualpipe: np.ndarray | bool = False,
        dualpipe_only: np.ndarray | bool = False,
    ) -> np.ndarray:
        """Admissible step-time bound per row (of ``rows``, default every row), with u the per-layer work of one
        micro-batch (``work`` per row of ``rows`` when given, else ``_unit_work``):
        m·(⌈L/p⌉·u + 1 exchange when pp > 1) + (L − ⌈L/p⌉)·u / v_max.

        Whatever the split, some stage holds F >= ⌈L/p⌉ layers, so the slowest stage does at
        least F·u (+ its transfers) per micro-batch and the other stages at least (L − F)·u in
        all; the bound is increasing in F (m >= 1 >= 1/v), so F = ⌈L/p⌉ gives a lower bound. The
        bubble divides the other stages' work by at most v_max, the largest vpp of the row's grid;
        the exchange is left out only where the runtime overlaps its transfers (p2p_overlap) and the row's
        grid has the interleaved schedule (v_max > 1: the other schedules run at vpp 1,
        search.grid_axes.schedule_options), the one condition under which step.compose hides them;
        data-parallel sync, optimizer and offload terms are >= 0. For models with several kinds of
        decoder layer (dense and MoE layers) u is the cheaper kind's work; MTP modules add >= 0.
        The split-backward schedules (ZB-H1, DualPipe) shrink the bubble below (L − F)·u / v_max
        (ZB-H1 by (F + B − 2W)/(F + B), DualPipe to (p/2 − 1)·(F&B + B − 3W)): a row whose grid has
        one (``split_backward``) keeps m·F·u only — with the bubble term, 140 of the 296 rows of a
        Mixtral problem had a bound above their best candidate's step. DualPipe's steady state is
        (m − n)·S + n·F&B, n = max(m − p − 1, 0) overlapped pairs (step.dualpipe.overlapped_pairs), and its pair
        F&B = max(C/s, E + P) + X >= C/s + X and >= S/2 (step.schedules._dualpipe_stage_floor_s), so with u' the
        least over the kinds of a layer's C/s + X (s where the layer dispatches; the compute floor itself where
        ``work`` is given) DualPipe's step is at least (m − n)·S_F + n·max(F·u', S_F/2), S_F = F·u + 1 exchange:
        a row whose grid has DualPipe alone (``dualpipe_only``) keeps that, one whose grid has it among others
        (``dualpipe``) the lesser of that and the bound above.
        The bound is non-decreasing in u: a floor of u gives a floor of the bound (``work_floors``)."""
        rows = np.arange(self.size) if rows is None else rows
        unit = self._unit_work(self.unit[rows]) if work is None else work
        kept = self._kept[self.unit[rows]] if work is None else work
        if work is None and not self._all_tiles() and self._varies[rows].any():
            # a stage on its own tp/cp spans may work less than the unit (the plan's slowest): its op-time floor
            floor = self.work_floors()[rows]
            unit = np.where(self._varies[rows], floor, unit)
            kept = np.where(self._varies[rows], floor, kept)
        facts = self.facts
        links = self.links  # every stage of a pipeline exchanges at least once (step.p2p.exchanges)
        ids = self.columns["p2p_id"][rows]
        least_link = np.minimum(at_rows(links.inner_s, ids), at_rows(links.outer_s, ids))
        # an interleaved schedule that overlaps its transfers may hide them all (step.p2p.overlapped_p2p_exposed_s);
        # step.compose hides them only there, so a row keeps one exchange unless its grid has that schedule
        overlap = self.problem.system.accelerator.efficiency.runtime.p2p_overlap
        hidden = (at_rows(v_max, rows) > 1) & bool(overlap)
        p2p = np.where((facts.pp[rows] > 1) & ~hidden, least_link, 0.0)
        layers, pp = self.problem.model.layers, self.columns["pp"][rows]
        fullest = -(-layers // pp)
        bubble = np.where(
            at_rows(split_backward, rows), 0.0, (layers - fullest) * unit / at_rows(v_max, rows)
        )
        m = facts.microbatches[rows]
        bound = m * (fullest * unit + p2p) + bubble
        if work is None and self._one_stage:
            one = np.flatnonzero(pp == 1)
            if one.size:  # rows with one stage (``_one_stage_s``)
                bound[one] = np.maximum(bound[one], self._one_stage_s(rows[one], m[one], pp[one]))
        if not np.any(dualpipe):
            return bound
        pairs = overlapped_pairs(pp, m)
        stage = fullest * unit + p2p
        paired = (m - pairs) * stage + pairs * np.maximum(fullest * kept, stage / 2.0) + bubble
        paired = np.where(at_rows(dualpipe_only, rows), paired, np.minimum(paired, bound))
        return np.where(at_rows(dualpipe, rows), paired, bound)

    def _one_stage_s(self, rows: np.ndarray, m: np.ndarray, pp: np.ndarray) -> np.ndarray:
        """Per row of ``rows`` (units worked out), a floor of its step where it has one stage (pp 1), 0 elsewhere: the
        stage holds every layer (``layer_counts``: n_k of kind k) and compose_step adds the A2A overlap's unpaired passes
        (step.block_terms.unpaired_passes_s), so the step is at least m·Σ_k n_k·w_k + Σ_k n_k·U_k, w_k the unit's work
        of kind k, U_k its unpaired_ep_exposure_s, other blocks and the tail >= 0; times SAFETY (sums in another order)."""
        units = self.unit[rows]
        whole, unpaired = self._layers[:, units]
        step = (np.where(pp == 1, m * whole, 0.0) + unpaired_passes_s(pp, unpaired)) * SAFETY
        if not self._all_tiles() and self._varies[rows].any():  # stages on their own spans
            step = np.where(self._varies[rows], 0.0, step)
        return step
