"""The rows of the canonical space as columns, each row naming its costings by id (search.table.RowTable).

``enumerate_rows`` walks space.rows' order (factorization, micro-batch, placement, layer knob, expert option) a
factorization and a micro-batch at a time, on arrays, and gives every row the ids of the distinct entries its facts
come from: its block costs per (layer shape, tp span, cp span), its activation memory per (layer shape, recompute
mode), its pipeline transfer, its gradient groups and its placement's name. ``Costings`` interns those entries and
computes each once: after the walk, in id order (``progress`` reports the count), or, for the activation memories,
when the search asks for them; the blocks are costed from the inputs it keeps per cost id (search.table.RowTable).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from paraplan.graph.ops import ExpertShape
from paraplan.search.options import BatchOption, ExpertOption, Factorization, LayerKnob
from paraplan.search.shapes import expert_shape_of, expert_spans, layer_shape_of
from paraplan.search.space import SearchProblem
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.recompute import MODE_NAMES, MODES, mode_modules
from paraplan.specs.tp_layout import TP_LAYOUTS
from paraplan.step.blocks import p2p_bytes
from paraplan.step.build import block_memory_facts, gradient_group, model_gradient_groups
from paraplan.step.p2p import link_tp_span, links_of

# the columns of the row table: degrees, batch, placement, layer knobs, and the ids of the rows' entries
COLUMNS = (
    *Factorization._fields,
    *BatchOption._fields,
    "placement",
    "sp",
    "recompute_mode",
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


class Costings:
    """The distinct entries the rows refer to, by kind, each computed once: placements, pipeline transfers, gradient
    groups and the inputs of block costs by ``compute`` (every row's bound reads them), in id order (entry i of a
    kind's list is the one id i names); activation memories when a caller asks for them (``entries``: the search
    costs the memory of the rows it evaluates, search.table.RowTable, which also costs the blocks)."""

    LAZY = ("memory",)

    def __init__(self) -> None:
        self.placement_names: list[str] = []
        self.costs: list[CostInputs] = []  # per (shape, tp span, cp span): _cost_inputs
        self.memories: list = []  # per (shape, recompute): block kind -> BlockMemoryFacts (None: not yet)
        self.transfers: list = []  # per (exchange bytes, tp, pp span, link tp span): step.p2p.PipelineLinks
        self.groups: list[dict] = []  # per set of gradient-group spans: name -> GradientGroup
        self._out = {
            "placement": self.placement_names,
            "cost": self.costs,
            "memory": self.memories,
            "p2p": self.transfers,
            "group": self.groups,
        }
        self._ids: dict[str, dict] = {kind: {} for kind in self._out}
        self._pending: list[
            tuple
        ] = []  # (list, function, arguments) of every eager entry, in id order
        self._lazy: dict[str, list] = {
            kind: [] for kind in self.LAZY
        }  # (function, arguments) by id
        self.computed = 0  # entries computed so far (the progress count)

    def intern(self, kind: str, key, compute, *args) -> int:
        """The id of the entry ``key`` of ``kind``; a new one's value is ``compute(*args)``, computed later."""
        table = self._ids[kind]
        found = table.get(key)
        if found is None:
            found = table[key] = len(table)
            if kind in self._lazy:
                self._lazy[kind].append((compute, args))
                self._out[kind].append(None)
            else:
                self._pending.append((self._out[kind], compute, args))
        return found

    def compute(self, progress, every: int = 256) -> None:
        """Compute the eager entries interned so far, reporting ``progress(done, total)`` every ``every`` and at the
        end; ``total`` counts every entry, the lazy ones too (a caller sees the size of the costing at once), and
        ``entries`` reports on."""
        pending, self._pending = self._pending, []
        total = len(pending) + sum(len(v) for v in self._lazy.values())
        if progress is not None:
            progress(0, total)
        for out, compute, args in pending:
            out.append(compute(*args))
            self.computed += 1
            if progress is not None and self.computed % every == 0:
                progress(self.computed, total)
        if progress is not None:
            progress(self.computed, total)

    def entries(self, kind: str, ids) -> list:
        """The entries ``ids`` (an iterable of ints) of a lazy kind, computed where not yet."""
        out, lazy = self._out[kind], self._lazy[kind]
        values = []
        for i in ids:
            value = out[i]
            if value is None:
                compute, args = lazy[i]
                value = out[i] = compute(*args)
                self.computed += 1
            values.append(value)
        return values


class KnobColumns(NamedTuple):
    """The layer-knob × expert options of a (tp, cp) and expert options, as the columns and keys the rows need."""

    count: int
    columns: dict[
        str, np.ndarray
    ]  # sp, recompute_mode (specs.recompute.MODE_NAMES ids), overlap_tp, layout, tp_rows, expert (ids)
    experts: list[ExpertOption]  # the distinct expert options, sorted
    expert_of: np.ndarray  # each option's index in ``experts``
    cost_keys: list[tuple]  # distinct (shape key, recomputed modules, expert option)
    cost_state_of: np.ndarray
    memory_keys: list[tuple]  # distinct (shape key, recompute mode, expert option)
    memory_state_of: np.ndarray
    # each cost and memory key's tag (RowEnumeration._tag): the entries are interned on these ints
    cost_tags: tuple = ()
    memory_tags: tuple = ()
    offset: int = 0  # where its options start in the walk's knob table (RowEnumeration._knob_table)


class BatchIds(NamedTuple):
    """The entry ids of one factorization's rows at one micro-batch (RowEnumeration._batch_ids)."""

    p2p: list[int]  # per placement
    cost: list[list[int]]  # per (cost key, span pair)
    memory: list[int]  # per memory key


def _placement_name(name: str) -> str:
    return name


def _gradient_groups(problem: SearchProblem, reduced, spans, tp, cp, dp, expert) -> dict:
    """The model's gradient groups on a placement's spans (the expert group's span from the expert option)."""
    system = problem.system
    placed = expert_spans(spans, tp, cp, dp, expert, system)
    return {g: gradient_group(system, placed[g]) for g in reduced}


def _exchange_bytes(problem: SearchProblem, tp: int, cp: int, micro_batch: int) -> float:
    """step.blocks.p2p_bytes of the layer shape at (tp, cp, micro-batch): what the pipeline's links read of it,
    memoised per problem."""
    memo = problem._memo.setdefault("exchange_bytes", {})
    size = memo.get((tp, cp, micro_batch))
    if size is None:
        shape = layer_shape_of(problem, tp, cp, micro_batch, False, "1d", 0)
        size = memo[tp, cp, micro_batch] = p2p_bytes(problem.model, shape)
    return size


def _transfer_s(problem: SearchProblem, size: float, tp: int, pp_span, tp_span=None):
    """The pipeline's links of an exchange of ``size`` bytes (step.p2p.links_of, step.p2p.pipeline_links), costed
    once per (bytes, tp, span, the TP span its runtime's gathers read: step.p2p.link_tp_span) across the problem's
    tables; the rows name them by that key (Llama 3.1 405B: 1,014 entries, where (tp, cp, micro-batch, span)
    named 4,901)."""
    memo = problem._memo.setdefault("pipeline_links", {})
    key = (size, tp, pp_span, tp_span)
    found = memo.get(key)
    if found is None:
        found = memo[key] = links_of(problem.model, problem.system, *key)
    return found


def _state_shape(problem: SearchProblem, shaped: bool, tp, cp, micro_batch, key, modules, expert):
    """The layer shape of a (shape key, recomputed modules, expert option) at this micro-batch."""
    return layer_shape_of(
        problem,
        tp,
        cp,
        micro_batch,
        *key,
        expert_shape_of(problem, expert) if shaped else ExpertShape(),
        modules,
    )


class CostInputs(NamedTuple):
    """What step.build.kind_cost_facts costs a block kind at (after the model and the system)."""

    shape: object
    tp_span: object
    cp_span: object


def _cost_inputs(
    problem: SearchProblem, shaped: bool, tp, cp, micro_batch, state, pair
) -> CostInputs:
    """(layer shape, tp span, cp span): what step.build.kind_cost_facts costs a block kind at; the shape built once
    per (tp, cp, micro-batch, state), whatever the span pair (Llama 3.1 405B: 880 shapes for 4,705 entries)."""
    shapes = problem._memo.setdefault("cost_shapes", {})
    key = (shaped, tp, cp, micro_batch, state)
    shape = shapes.get(key)
    if shape is None:
        shape = shapes[key] = _state_shape(problem, shaped, tp, cp, micro_batch, *state)
    return CostInputs(shape, *pair)


def _block_memory(problem: SearchProblem, shaped: bool, tp, cp, micro_batch, state) -> dict:
    key, mode, expert = state
    shape = _state_shape(
        problem, shaped, tp, cp, micro_batch, key, mode_modules(mode, shaped), expert
    )
    return block_memory_facts(problem.model, shape, MODES[mode].recompute)


def _tile(values: np.ndarray, times: int) -> np.ndarray:
    """np.tile(values, times) of a 1-d array: the same array, filled in one assignment (~1 µs against np.tile's
    1-9 µs; 2,520 calls on Llama 3.1 405B)."""
    out = np.empty(times * len(values), dtype=values.dtype)
    out.reshape(times, len(values))[:] = values
    return out


class RowEnumeration:
    """The walk over the space (module doc): ``columns`` (lists of arrays per COLUMNS name), ``costings`` and the
    expert options by id."""

    def __init__(self, problem: SearchProblem):
        self.problem = problem
        self.costings = Costings()
        self.columns: dict[str, list] = {k: [] for k in COLUMNS}
        self.expert_ids: dict[ExpertOption, int] = {}
        self.reduced = model_gradient_groups(problem.model)
        self.shaped = moe_shaped(
            problem.model
        )  # its graphs read the expert knobs and recomputed modules
        self._memo: dict[tuple, object] = {}
        # the degree columns as each factorization and its count of rows, the knob columns as each row's option in
        # the knob table (every KnobColumns' options, in creation order): built once after the walk (``_finish``)
        self._degrees: list[Factorization] = []
        self._degree_rows: list[int] = []
        self._knob_rows: list[np.ndarray] = []
        self._knob_table: dict[str, list] = {}
        self._knob_options = (
            0  # the options in the knob table so far (the next KnobColumns' offset)
        )
        self._tags: dict[str, dict] = {"cost": {}, "memory": {}, "pair": {}, "pairs": {}, "pp": {}}

    def _tag(self, kind: str, value) -> int:
        """A small int standing for ``value`` among the walk's values of ``kind`` (one per distinct value): the
        entries are interned on tags, so the nested key tuples (layer knobs, expert options, spans) are hashed and
        compared once per distinct value, not at every interning (the same ids: tags and values correspond 1:1)."""
        tags = self._tags[kind]
        found = tags.get(value)
        if found is None:
            found = tags[value] = len(tags)
        return found

    def run(self, progress=None) -> None:
        for factorization in self.problem.factorizations:
            self._factorization(factorization)
        self._finish()
        self.costings.compute(progress)

    def _finish(self) -> None:
        """The degree and knob columns of every row, from what ``_append`` kept per factorization: one repeat per
        degree and one gather per knob column, not a fill and a tile per factorization."""
        if not self._degrees:
            return
        cols, degrees = self.columns, np.array(self._degrees, dtype=np.int64)
        counts = np.array(self._degree_rows, dtype=np.int64)
        for i, name in enumerate(Factorization._fields):
            cols[name].append(degrees[:, i].repeat(counts))
        rows = np.concatenate(self._knob_rows)
        for name, values in self._knob_table.items():
            cols[name].append(np.concatenate(values)[rows])

    def _factorization(self, factorization: Factorization) -> None:
        """Intern the entries of one factorization's rows and append their columns (micro-batch, placement, knob)."""
        problem, costings = self.problem, self.costings
        tp, cp, dp, pp = factorization
        knobs = self._knobs(tp, cp, dp)
        if knobs is None:
            return
        placements = problem.placements(tp, cp, dp, pp)
        pids = [costings.intern("placement", name, _placement_name, name) for name, _ in placements]
        group_of = np.array(
            [
                [
                    costings.intern(
                        "group",
                        (tuple(spans[g] for g in self.reduced), e[:2]),
                        _gradient_groups,
                        problem,
                        self.reduced,
                        spans,
                        tp,
                        cp,
                        dp,
                        e,
                    )
                    for e in knobs.experts
                ]
                for _, spans in placements
            ]
        )
        pairs: dict[tuple, int] = {}  # distinct (tp span, cp span) among the placements
        pair_of = np.array(
            [pairs.setdefault((spans["tp"], spans["cp"]), len(pairs)) for _, spans in placements]
        )
        batches = problem.micro_batches(dp)
        if not batches:
            return
        system = (
            self.problem.system
        )  # the pp span and, where the runtime gathers over TP, the tp span
        pp_spans = tuple(
            (spans["pp"], link_tp_span(system, spans["tp"])) for _, spans in placements
        )
        spans = (
            tuple(pairs),
            tuple(self._tag("pair", pair) for pair in pairs),
            self._tag("pairs", tuple(pairs)),
            pp_spans,
            self._tag("pp", pp_spans),
        )
        ids = [self._batch_ids(tp, cp, mb, knobs, spans) for mb, _ in batches]
        self._append(factorization, batches, placements, pids, knobs, group_of, pair_of, ids)

    def _knobs(self, tp: int, cp: int, dp: int) -> KnobColumns | None:
        """KnobColumns of (tp, cp) with dp's expert options (memoised on them); None when there are none."""
        problem = self.problem
        experts = tuple(problem.expert_options(tp, cp, dp))
        key = ("knobs", tp, cp, experts)
        if key not in self._memo:
            options = [(k, e) for k in problem.layer_knobs(tp, cp) for e in experts]
            self._memo[key] = self._knob_columns(options) if options else None
        return self._memo[key]

    def _knob_columns(self, options: list[tuple[LayerKnob, ExpertOption]]) -> KnobColumns:
        experts = sorted({e for _, e in options})
        # the layer-shape inputs each option fixes: costs per (sp, layout, grid rows, recomputed modules, expert
        # knobs), activation memory per (the same with the recompute mode)
        cost_states = [(k.shape_key, mode_modules(k.recompute, self.shaped), e) for k, e in options]
        memory_states = [(k.shape_key, k.recompute, e) for k, e in options]
        cost_keys = list(dict.fromkeys(cost_states))
        memory_keys = list(dict.fromkeys(memory_states))
        columns = {
            "sp": np.array([k.sequence_parallel for k, _ in options]),
            "recompute_mode": np.array([MODE_NAMES.index(k.recompute) for k, _ in options]),
            "overlap_tp": np.array([k.overlap_tp_comm for k, _ in options]),
            "layout": np.array([TP_LAYOUTS.index(k.tp_layout) for k, _ in options]),
            "tp_rows": np.array([k.tp_rows or 0 for k, _ in options]),
            "expert": np.array(
                [self.expert_ids.setdefault(e, len(self.expert_ids)) for _, e in options]
            ),
        }
        offset, self._knob_options = self._knob_options, self._knob_options + len(options)
        for name, values in columns.items():
            self._knob_table.setdefault(name, []).append(values)
        return KnobColumns(
            len(options),
            columns,
            experts,
            np.array(_positions(experts, [e for _, e in options])),
            cost_keys,
            np.array(_positions(cost_keys, cost_states)),
            memory_keys,
            np.array(_positions(memory_keys, memory_states)),
            tuple(self._tag("cost", key) for key in cost_keys),
            tuple(self._tag("memory", key) for key in memory_keys),
            offset,
        )

    def _batch_ids(self, tp, cp, mb, knobs: KnobColumns, spans: tuple) -> BatchIds:
        """(p2p ids per placement, cost ids per (cost key, span pair), memory ids per memory key) at one micro-batch;
        ``spans``: the distinct (tp span, cp span) pairs of the placements, their tags, the tag of their tuple, the
        placements' pp spans (each with the tp span its links read: step.p2p.link_tp_span) and their tag (``_tag``). Each list is memoised on what its keys read: the p2p ids on the
        exchange's bytes, tp and the pp spans, the cost ids on the knobs and span pairs, the memory ids on the knobs
        (factorizations of one (tp, cp) share them; Llama 3.1 405B: 2,016 calls, none alike in all three). Interning
        is idempotent, so a memoised list is the ids the calls would give."""
        problem, costings, shaped, memo = self.problem, self.costings, self.shaped, self._memo
        pairs, pair_tags, pairs_tag, pp_spans, pp_tag = spans
        size = _exchange_bytes(problem, tp, cp, mb)
        p2p = memo.get(("p2p", size, tp, pp_tag))
        if p2p is None:
            p2p = memo["p2p", size, tp, pp_tag] = [
                costings.intern("p2p", (size, tp, *span), _transfer_s, problem, size, tp, *span)
                for span in pp_spans
            ]
        cost = memo.get(("cost", tp, cp, mb, id(knobs), pairs_tag))
        if cost is None:
            cost = memo["cost", tp, cp, mb, id(knobs), pairs_tag] = [
                [
                    costings.intern(
                        "cost",
                        (tp, cp, mb, key_tag, pair_tag),
                        _cost_inputs,
                        problem,
                        shaped,
                        tp,
                        cp,
                        mb,
                        key,
                        pair,
                    )
                    for pair, pair_tag in zip(pairs, pair_tags)
                ]
                for key, key_tag in zip(knobs.cost_keys, knobs.cost_tags)
            ]
        memory = memo.get(("memory", tp, cp, mb, id(knobs)))
        if memory is None:
            memory = memo["memory", tp, cp, mb, id(knobs)] = [
                costings.intern(
                    "memory", (tp, cp, mb, tag), _block_memory, problem, shaped, tp, cp, mb, key
                )
                for key, tag in zip(knobs.memory_keys, knobs.memory_tags)
            ]
        return BatchIds(p2p, cost, memory)

    def _append(
        self,
        factorization: Factorization,
        batches,
        placements,
        pids,
        knobs,
        group_of,
        pair_of,
        ids: list[BatchIds],
    ) -> None:
        """Append one factorization's columns: every micro-batch at once, rows ordered (micro-batch, placement,
        knob)."""
        cols = self.columns
        n_b, n_p, n_k = len(batches), len(placements), knobs.count
        per_batch = n_p * n_k
        n = n_b * per_batch
        p2p_ids = np.array([i.p2p for i in ids], dtype=np.int64)  # (micro-batch, placement)
        cost_of = np.array(
            [i.cost for i in ids], dtype=np.int64
        )  # (micro-batch, cost state, span pair)
        memory_of = np.array([i.memory for i in ids], dtype=np.int64)  # (micro-batch, memory state)
        self._degrees.append(factorization)  # the columns: _finish
        self._degree_rows.append(n)
        for i, name in enumerate(BatchOption._fields):
            cols[name].append(np.array([b[i] for b in batches], dtype=np.int64).repeat(per_batch))
        cols["placement"].append(_tile(np.array(pids).repeat(n_k), n_b))
        domains = np.array([spans["tp"].domains for _, spans in placements])
        cols["tp_domains"].append(_tile(domains.repeat(n_k), n_b))
        cols["p2p_id"].append(np.repeat(p2p_ids.reshape(-1), n_k))
        cols["group_id"].append(_tile(group_of[:, knobs.expert_of].reshape(-1), n_b))
        cols["cost_id"].append(
            cost_of[:, knobs.cost_state_of[None, :], pair_of[:, None]].reshape(-1)
        )
        cols["memory_id"].append(
            np.repeat(memory_of[:, None, :][:, :, knobs.memory_state_of], n_p, axis=1).reshape(-1)
        )
        self._knob_rows.append(_tile(np.arange(knobs.offset, knobs.offset + n_k), n_b * n_p))


def _positions(keys: list, values: list) -> list[int]:
    """keys.index(v) for each of ``values`` (each among ``keys``, which hold no duplicates), in one pass over each."""
    where = {key: i for i, key in enumerate(keys)}
    return [where[v] for v in values]
