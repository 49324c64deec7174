"""Find the fastest plans that fit: exact with respect to the cost model, and fast.

Fast path (``search``):
1. enumerate the rows of the canonical space (search/space.py); summed op times and collective
   times are computed once per (layer shape, TP span, CP span) with the estimator's own cached
   functions, and turned into per-row block terms by ``schedule.step.block_terms`` on arrays;
2. a lower bound per row on the objective — m micro-batches of the row's layer work plus the
   cheapest pipeline transfer; bubble, data-parallel, optimizer and offload terms are >= 0 —
   so rows are visited best bound first;
3. rows are expanded into their grid and evaluated many at once: the same
   ``schedule.step.compose_step`` and ``stage_memory_terms`` (via ``stage_peaks``) that ``estimate``
   uses, on numpy arrays;
4. once the next row's bound is worse than the K-th best objective found, every remaining row
   is skipped: none of its candidates can enter the top K (the bound is admissible).
Ties are broken by canonical order (row index, grid index), the order of ``exhaustive_search``,
which evaluates every candidate one by one through ``estimate``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from paraplan.cost.comm import GroupSpan, collective_time_s, overlap_cost
from paraplan.estimate import (
    GRID_FIELDS,
    BlockComm,
    BlockCompute,
    activation_terms,
    block_comm,
    block_compute,
    data_parallel_terms,
    estimate,
    p2p_bytes,
    system_terms,
)
from paraplan.graph.transformer import LayerShape, decoder_layer, embedding_block, lm_head_block, lm_head_weight_params
from paraplan.report.result import Estimate
from paraplan.schedule.step import RECOMPUTE_CODES, BlockTerms, StepInputs, block_terms, compose_step, stage_peaks
from paraplan.search.space import Row, SearchProblem, grid, plan_of, rows
from paraplan.specs.plan import PlanSpec
from paraplan.units import GiB

CHUNK_CANDIDATES = 150_000


@dataclass(frozen=True)
class RankedPlan:
    """One plan of the result, with the estimate that ranked it."""

    rank: int
    plan: PlanSpec
    estimate: Estimate
    objective: float
    key: tuple[int, int]  # (row, grid index) in canonical order

    def to_dict(self) -> dict:
        e = self.estimate
        return {
            "rank": self.rank,
            "plan": self.plan.model_dump(),
            "step_time_s": e.step_time_s,
            "tokens_per_s": e.tokens_per_s,
            "mfu": e.mfu,
            "peak_memory_gib": e.peak_stage.peak_bytes / GiB,
            "objective": self.objective,
            "breakdown": e.to_dict()["breakdown"],
        }


@dataclass
class SearchResult:
    plans: list[RankedPlan]
    candidates: int  # size of the canonical space
    evaluated: int
    feasible: int  # feasible among the evaluated
    seconds: float
    rows: int
    rows_evaluated: int
    nearest_miss: dict | None = None  # smallest memory overflow when nothing fits
    faster_infeasible: list[dict] = field(default_factory=list)  # better objective, did not fit
    all_feasible: list[dict] | None = None

    def to_dict(self) -> dict:
        return {
            "plans": [p.to_dict() for p in self.plans],
            "candidates": self.candidates,
            "evaluated": self.evaluated,
            "feasible": self.feasible,
            "seconds": self.seconds,
            "rows": self.rows,
            "rows_evaluated": self.rows_evaluated,
            "nearest_miss": self.nearest_miss,
        }


def objective_value(problem: SearchProblem, step_time_s, tokens, model_flops, peak_flops):
    """Smaller is better. time: seconds per token (= step time ranking at a fixed batch); cost:
    dollars per token at the price; mfu: minus the model FLOPs utilisation."""
    if problem.objective == "cost":
        price = problem.price_per_gpu_hour if problem.price_per_gpu_hour is not None else 1.0
        return step_time_s / tokens * problem.gpus * price / 3600.0
    if problem.objective == "mfu":
        return -(model_flops / (step_time_s * problem.gpus * peak_flops))
    return step_time_s / tokens


_GRID_DTYPES = {
    "vpp": np.int64, "interleaved": bool, "gpipe": bool, "zero": np.int64, "overlap_dp_grad_reduce": bool,
    "overlap_param_gather": bool, "offload_weights": bool, "offload_activations": bool, "offload_optimizer": bool,
}


def _grid_arrays(options: list[tuple]) -> dict[str, np.ndarray]:
    """Grid options as arrays of the StepInputs grid fields."""
    v, sched, z, od, og, ow, oa, oo = (list(col) for col in zip(*options))
    values = {
        "vpp": v,
        "interleaved": [s == "interleaved" for s in sched],
        "gpipe": [s == "gpipe" for s in sched],
        "zero": z,
        "overlap_dp_grad_reduce": od,
        "overlap_param_gather": og,
        "offload_weights": ow,
        "offload_activations": oa,
        "offload_optimizer": oo,
    }
    return {k: np.asarray(values[k], dtype=_GRID_DTYPES[k]) for k in GRID_FIELDS}


_SCALAR_FIELDS = (
    "pp", "microbatches", "layers", "p2p_transfer_s", "layer_params", "embedding_params", "head_params",
    "dp_size", "dp_overlap_cost", "host_bandwidth", "hbm_rate", "weight_bytes", "grad_bytes", "optimizer_bytes",
    "layer_activation_bytes", "embedding_activation_bytes", "head_activation_bytes", "layer_buffer_bytes",
    "reserved_bytes",
)
_BLOCK_PARTS = ("forward", "backward", "recompute", "tp", "cp")
_COMPUTE_FIELDS = tuple(BlockCompute.__dataclass_fields__)
_COMM_FIELDS = tuple(BlockComm.__dataclass_fields__)


class _Fields:
    """Attribute access to a dict of arrays (the vectorised stand-in for BlockCompute / BlockComm)."""

    def __init__(self, values: dict):
        self.__dict__.update(values)


class RowTable:
    """Every row of the canonical space as arrays (one entry per row), built in the canonical order
    of ``space.rows``; each StepInputs field holds what ``estimate.row_terms`` gives the scalar path,
    from the same cached functions (block_compute, block_comm, activation_terms, ...) and the same
    vectorisable ``block_terms``."""

    def __init__(self, problem: SearchProblem):
        self.problem = problem
        model, system = problem.model, problem.system
        names = ("tp", "pp", "cp", "dp", "micro_batch", "global_batch", "placement", "sp", "recompute",
                 "overlap_tp", "comm_id", "act_id", "p2p_id", "dp_id")
        cols: dict[str, list] = {k: [] for k in names}
        self.placement_names: list[str] = []
        placement_ids: dict[str, int] = {}
        comm_ids: dict[tuple, int] = {}
        act_ids: dict[tuple, int] = {}
        p2p_ids: dict[tuple, int] = {}
        dp_ids: dict[GroupSpan, int] = {}
        comms: list[tuple] = []  # (layer, embedding, head) block compute + comm, costs, tp in one domain, params
        acts: list[dict] = []
        p2p: list[float] = []
        dps: list[dict] = []
        for tp, pp, cp, dp in problem.factorizations:
            placements = problem.placements(tp, pp, cp, dp)
            knobs = problem.layer_knobs(tp, cp)
            if not knobs:
                continue
            pids, span_pairs, pair_of = [], [], []
            for placement, spans in placements:
                pid = placement_ids.setdefault(placement, len(placement_ids))
                if pid == len(self.placement_names):
                    self.placement_names.append(placement)
                pids.append(pid)
                pair = (spans["tp"], spans["cp"])
                if pair not in span_pairs:
                    span_pairs.append(pair)
                pair_of.append(span_pairs.index(pair))
                if spans["dp"] not in dp_ids:
                    dp_ids[spans["dp"]] = len(dps)
                    dps.append(data_parallel_terms(system, spans["dp"]))
            dp_of = np.array([dp_ids[spans["dp"]] for _, spans in placements])
            pair_of = np.array(pair_of)
            n_p, n_k = len(placements), len(knobs)
            knob_sp = np.array([k[0] for k in knobs])
            knob_rc = np.array([RECOMPUTE_CODES[k[1]] for k in knobs])
            knob_ov = np.array([k[2] for k in knobs])
            for mb, gb in problem.micro_batches(dp):
                shapes = {
                    sp: LayerShape(tp, cp, mb, problem.seq_length, sp and tp > 1, problem.attention, problem.dtype)
                    for sp in (False, True)
                }
                p2p_of = []
                for _, spans in placements:
                    p2p_key = (tp, cp, mb, spans["pp"])
                    if p2p_key not in p2p_ids:
                        p2p_ids[p2p_key] = len(p2p)
                        p2p.append(collective_time_s("send_recv", p2p_bytes(model, shapes[False]), spans["pp"], system))
                    p2p_of.append(p2p_ids[p2p_key])
                comm_table = np.empty((len(span_pairs), n_k), dtype=np.int64)
                act_table = np.empty(n_k, dtype=np.int64)
                for j, (sp, rc, _) in enumerate(knobs):
                    act_key = (tp, cp, mb, sp, rc)
                    if act_key not in act_ids:
                        act_ids[act_key] = len(acts)
                        acts.append(activation_terms(model, shapes[sp], rc))
                    act_table[j] = act_ids[act_key]
                    for q, (tp_span, cp_span) in enumerate(span_pairs):
                        key = (tp, cp, mb, sp, tp_span, cp_span)
                        cid = comm_ids.get(key)
                        if cid is None:
                            cid = comm_ids[key] = len(comms)
                            comms.append(self._block_facts(shapes[sp], tp_span, cp_span))
                        comm_table[q, j] = cid
                n = n_p * n_k
                for name, value in (("tp", tp), ("pp", pp), ("cp", cp), ("dp", dp), ("micro_batch", mb), ("global_batch", gb)):
                    cols[name].append(np.full(n, value, dtype=np.int64))
                cols["placement"].append(np.repeat(np.array(pids), n_k))
                cols["p2p_id"].append(np.repeat(np.array(p2p_of), n_k))
                cols["dp_id"].append(np.repeat(dp_of, n_k))
                cols["comm_id"].append(comm_table[pair_of].reshape(-1))
                cols["act_id"].append(np.tile(act_table, n_p))
                cols["sp"].append(np.tile(knob_sp, n_p))
                cols["recompute"].append(np.tile(knob_rc, n_p))
                cols["overlap_tp"].append(np.tile(knob_ov, n_p))
        c = self.columns = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in cols.items()}
        self.size = len(c["tp"])
        cid, aid, did = c["comm_id"], c["act_id"], c["dp_id"]

        def gather(values, index):
            return np.asarray(values, dtype=float)[index]

        scalars = {k: gather([u[k] for u in acts], aid) for k in acts[0]} if acts else {}
        scalars["layer_params"] = gather([f[4] for f in comms], cid)
        scalars["embedding_params"] = gather([f[5] for f in comms], cid)
        scalars["dp_size"] = gather([u["dp_size"] for u in dps], did)
        scalars["dp_overlap_cost"] = gather([u["dp_overlap_cost"] for u in dps], did)
        scalars["p2p_transfer_s"] = gather(p2p, c["p2p_id"])
        scalars["pp"] = c["pp"].astype(float)
        scalars["microbatches"] = (c["global_batch"] // (c["dp"] * c["micro_batch"])).astype(float)
        scalars["layers"] = np.full(self.size, float(model.layers))
        head_params = {tp: (lm_head_weight_params(model, tp, True), lm_head_weight_params(model, tp, False))
                       for tp in set(c["tp"].tolist())}
        scalars["head_params"] = np.array([head_params[t][0 if p == 1 else 1] for t, p in zip(c["tp"].tolist(), c["pp"].tolist())])
        for k, v in system_terms(system, problem.dtype).items():
            scalars[k] = np.full(self.size, float(v))
        self.scalars = scalars
        tp_cost, cp_cost = gather([f[1] for f in comms], cid), gather([f[2] for f in comms], cid)
        in_domain = np.asarray([f[3] for f in comms], dtype=bool)[cid]
        overlap = c["overlap_tp"].astype(bool) & in_domain
        none = np.zeros(self.size, dtype=np.int64)
        self.blocks = {}
        for b, name in enumerate(("layer", "embedding", "head")):
            compute = _Fields({k: gather([getattr(f[0][b][0], k) for f in comms], cid) for k in _COMPUTE_FIELDS})
            comm = _Fields({k: gather([getattr(f[0][b][1], k) for f in comms], cid) for k in _COMM_FIELDS})
            code = c["recompute"] if name == "layer" else none  # recomputation checkpoints decoder layers only
            terms = block_terms(compute, comm, code, overlap, tp_cost, cp_cost)
            self.blocks[name] = {p: np.asarray(getattr(terms, p), dtype=float) for p in _BLOCK_PARTS}
        self.coefficients = {
            k: (gather([u[k][0] for u in dps], did), gather([u[k][1] for u in dps], did))
            for k in ("all_reduce", "reduce_scatter", "all_gather")
        }

    def _block_facts(self, shape: LayerShape, tp_span: GroupSpan, cp_span: GroupSpan) -> tuple:
        """Per (shape, spans): ((compute, comm) per block), TP and CP overlap costs, TP in one domain,
        layer and embedding parameters — the inputs of ``schedule.step.block_terms``."""
        model, system = self.problem.model, self.problem.system
        blocks = (decoder_layer(model, shape), embedding_block(model, shape), lm_head_block(model, shape, False))
        facts = tuple(
            (block_compute(b, system, shape.dtype), block_comm(b, system, tp_span, cp_span)) for b in blocks
        )
        return (facts, overlap_cost(tp_span, system), overlap_cost(cp_span, system), tp_span.domains == 1,
                blocks[0].weight_params, blocks[1].weight_params)

    def row(self, i: int) -> Row:
        c = self.columns
        rc = [k for k, v in RECOMPUTE_CODES.items() if v == c["recompute"][i]][0]
        return Row(int(c["tp"][i]), int(c["pp"][i]), int(c["cp"][i]), int(c["dp"][i]),
                   self.placement_names[c["placement"][i]], {}, int(c["micro_batch"][i]),
                   int(c["global_batch"][i]), bool(c["sp"][i]), rc, bool(c["overlap_tp"][i]))

    def inputs(self, index: np.ndarray, grid_values: dict[str, np.ndarray]) -> StepInputs:
        fields = {k: v[index] for k, v in self.scalars.items()}
        for b, parts in self.blocks.items():
            fields[b] = BlockTerms(**{p: parts[p][index] for p in _BLOCK_PARTS})
        for c, (slope, icpt) in self.coefficients.items():
            fields[c] = (slope[index], icpt[index])
        return StepInputs(**fields, **grid_values)

    def lower_bounds(self) -> np.ndarray:
        """Admissible step-time bound per row, with u the per-layer work of one micro-batch:
        m·(⌈L/p⌉·u + 2 transfers when pp > 1) + (L − ⌈L/p⌉)·u / v_max.

        The fullest stage holds ⌈L/p⌉ layers (pipeline.layers_on_stage), so the slowest stage does at
        least that much work per micro-batch; the bubble is the other stages' work divided by at most
        v_max (the largest vpp the row's grid allows; 1 when it cannot interleave); bubble-free
        terms (data-parallel sync, optimizer, offload) are >= 0."""
        s, layer = self.scalars, self.blocks["layer"]
        c = self.columns
        unit = layer["forward"] + layer["backward"] + layer["recompute"] + layer["tp"] + layer["cp"]
        p2p = np.where(s["pp"] > 1, 2.0 * s["p2p_transfer_s"], 0.0)
        layers, pp = self.problem.model.layers, c["pp"]
        fullest = -(-layers // pp)
        can_interleave = (layers % pp == 0) & (c["global_batch"] // (c["dp"] * c["micro_batch"]) % pp == 0) & (pp > 1)
        allowed = self.problem.schedules is None or "interleaved" in self.problem.schedules
        v_max = np.where(can_interleave & allowed, layers // pp, 1)
        return s["microbatches"] * (fullest * unit + p2p) + (layers - fullest) * unit / v_max


def _finish(problem, pool, k) -> list[RankedPlan]:
    pool.sort(key=lambda item: (item[0], item[1], item[2]))
    out = []
    for rank, (obj, r, g, row, option) in enumerate(pool[:k], start=1):
        plan = plan_of(problem, row, option)
        out.append(RankedPlan(rank, plan, estimate(problem.model, problem.system, plan), obj, (r, g)))
    return out


def search(
    problem: SearchProblem,
    top_k: int = 10,
    collect_all: bool = False,
    progress=None,
    workers: int = 1,
    feasible_sink=None,
) -> SearchResult:
    """Top-K feasible plans by the objective, exact w.r.t. ``exhaustive_search`` (see module doc).

    ``collect_all`` evaluates the whole space (no bound pruning) and returns every feasible plan;
    ``feasible_sink`` also evaluates the whole space but hands each batch of feasible candidates
    to the callable as columns (``feasible_columns``) instead of keeping them, for large spaces.
    The fast path runs in one process (``workers`` is accepted for interface symmetry)."""
    problem.check()
    start = time.perf_counter()
    table = RowTable(problem)
    grids: dict[tuple, tuple] = {}
    grid_keys = list(zip(table.columns["pp"].tolist(), (table.columns["global_batch"] // (table.columns["dp"] * table.columns["micro_batch"])).tolist(),
                         (table.columns["dp"] * table.columns["cp"]).tolist()))
    grid_of_row = []
    for key in grid_keys:
        if key not in grids:
            pp, m, dpcp = key
            probe = Row(1, pp, dpcp, 1, "", {}, 1, m, False, "none", False)  # grid depends on pp, m, dp·cp only
            options = grid(problem, probe)
            grids[key] = (options, _grid_arrays(options) if options else None)
        grid_of_row.append(key)
    lengths = np.array([len(grids[k][0]) for k in grid_of_row], dtype=np.int64)
    space = int(lengths.sum())

    peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
    from paraplan.cost.flops import model_flops_per_token

    flops_per_token = model_flops_per_token(problem.model, problem.seq_length)
    tokens_row = table.columns["global_batch"].astype(float) * problem.seq_length
    bound_obj = objective_value(problem, table.lower_bounds(), tokens_row, flops_per_token * tokens_row, peak_flops)
    order = np.lexsort((np.arange(table.size), bound_obj))
    capacity = problem.system.accelerator.hbm_capacity
    host_capacity = problem.system.accelerator.host_memory or np.inf

    pool: list[tuple] = []
    threshold = np.inf
    evaluated = feasible = rows_done = 0
    nearest = None  # (overflow_bytes, row, option, peak)
    faster: list[tuple] = []
    everything: list[dict] | None = [] if collect_all else None
    scan_all = collect_all or feasible_sink is not None
    position = 0
    while position < len(order):
        if not scan_all and bound_obj[order[position]] > threshold:
            break
        chunk = []
        count = 0
        while position < len(order) and count < CHUNK_CANDIDATES:
            r = order[position]
            if not scan_all and bound_obj[r] > threshold:
                break
            if lengths[r]:
                chunk.append(r)
                count += lengths[r]
            position += 1
        rows_done += len(chunk)
        if progress is not None:
            progress(position, len(order))
        if not chunk:
            continue
        chunk = np.array(chunk)
        index = np.repeat(chunk, lengths[chunk])
        grid_index = np.concatenate([np.arange(lengths[r]) for r in chunk])
        grid_values = {
            f: np.concatenate([grids[grid_of_row[r]][1][f] for r in chunk]) for f in GRID_FIELDS
        }
        inp = table.inputs(index, grid_values)
        step = compose_step(inp)["step_time_s"]
        peak, host = stage_peaks(inp)
        tokens = tokens_row[index]
        obj = objective_value(problem, step, tokens, flops_per_token * tokens, peak_flops)
        fits = (peak <= capacity) & (host <= host_capacity)
        evaluated += len(index)
        feasible += int(fits.sum())
        if everything is not None:
            for i in np.flatnonzero(fits):
                everything.append({"row": int(index[i]), "grid": int(grid_index[i]), "step_time_s": float(step[i]),
                                   "objective": float(obj[i]), "peak_memory_bytes": float(peak[i])})
        if feasible_sink is not None and fits.any():
            chosen = np.flatnonzero(fits)
            feasible_sink(feasible_columns(
                table, index[chosen], {f: v[chosen] for f, v in grid_values.items()},
                step[chosen], obj[chosen], peak[chosen], tokens[chosen],
            ))
        keep = np.flatnonzero(fits & (obj <= threshold))
        if keep.size > top_k:  # only this chunk's K best (and ties with the K-th) can enter the top K
            kth = np.partition(obj[keep], top_k - 1)[top_k - 1]
            keep = keep[obj[keep] <= kth]
        pool += [(float(obj[i]), int(index[i]), int(grid_index[i])) for i in keep]
        if len(pool) >= top_k:
            pool.sort()
            threshold = pool[top_k - 1][0]
            pool = [p for p in pool if p[0] <= threshold]
        misses = np.flatnonzero(~fits)
        if misses.size:
            over = np.maximum(peak[misses] - capacity, host[misses] - host_capacity)
            j = misses[np.argmin(over)]
            if nearest is None or over.min() < nearest[0]:
                nearest = (float(over.min()), int(index[j]), int(grid_index[j]), float(peak[j]))
            # plans that would beat the current K-th best but do not fit: keep the nearest misses
            quick = misses[obj[misses] < threshold]
            near = quick[np.argsort(peak[quick], kind="stable")[:20]]
            faster += [(float(obj[i]), int(index[i]), int(grid_index[i]), float(peak[i])) for i in near]

    pool.sort()
    pool = [(obj, r, g, table.row(r), grids[grid_of_row[r]][0][g]) for obj, r, g in pool[:top_k]]
    plans = _finish(problem, pool, top_k)
    result = SearchResult(
        plans=plans, candidates=space, evaluated=evaluated, feasible=feasible,
        seconds=time.perf_counter() - start, rows=table.size, rows_evaluated=rows_done,
    )
    if not plans and nearest is not None:
        over, r, g, peak = nearest
        plan = plan_of(problem, table.row(r), grids[grid_of_row[r]][0][g])
        result.nearest_miss = {"plan": plan.model_dump(), "peak_memory_gib": peak / GiB,
                               "capacity_gib": capacity / GiB, "overflow_gib": over / GiB}
    if plans:  # faster than the winner but over the memory capacity: the three smallest overflows
        best = plans[0].objective
        faster = sorted((f for f in faster if f[0] < best), key=lambda item: (item[3], item[1], item[2]))
        for obj, r, g, peak in faster[:3]:
            if obj < best:
                plan = plan_of(problem, table.row(r), grids[grid_of_row[r]][0][g])
                result.faster_infeasible.append({"plan": plan, "objective": obj, "peak_memory_gib": peak / GiB})
    if everything is not None:
        for item in everything:
            item["plan"] = plan_of(problem, table.row(item["row"]), grids[grid_of_row[item["row"]]][0][item["grid"]])
        result.all_feasible = everything
    return result


def feasible_columns(table: RowTable, index, grid_values: dict, step, obj, peak, tokens) -> dict[str, np.ndarray]:
    """Plan fields and metrics of a batch of candidates, column-wise (the CSV of ``--csv``)."""
    c = table.columns
    recompute_names = np.array(sorted(RECOMPUTE_CODES, key=RECOMPUTE_CODES.get))
    return {
        "tp": c["tp"][index], "pp": c["pp"][index], "cp": c["cp"][index], "dp": c["dp"][index],
        "vpp": grid_values["vpp"],
        "schedule": np.where(grid_values["interleaved"], "interleaved", np.where(grid_values["gpipe"], "gpipe", "1f1b")),
        "micro_batch": c["micro_batch"][index], "global_batch": c["global_batch"][index],
        "recompute": recompute_names[c["recompute"][index]],
        "sequence_parallel": c["sp"][index].astype(bool),
        "zero": grid_values["zero"],
        "offload_weights": grid_values["offload_weights"],
        "offload_activations": grid_values["offload_activations"],
        "offload_optimizer": grid_values["offload_optimizer"],
        "overlap_tp_comm": c["overlap_tp"][index].astype(bool),
        "overlap_dp_grad_reduce": grid_values["overlap_dp_grad_reduce"],
        "overlap_param_gather": grid_values["overlap_param_gather"],
        "placement": np.array(table.placement_names)[c["placement"][index]],
        "step_time_s": step, "tokens_per_s": tokens / step, "objective": obj, "peak_memory_gib": peak / GiB,
    }


def _exhaustive_part(problem: SearchProblem, top_k: int, part: int, parts: int, progress=None, collect_all=False):
    """Rows r with r % parts == part: every candidate through ``estimate``; the part's top K (+ ties),
    and with ``collect_all`` every feasible candidate."""
    peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
    pool, evaluated, feasible, n_rows = [], 0, 0, 0
    everything = []
    for r, row in enumerate(rows(problem)):
        n_rows += 1
        if r % parts != part:
            continue
        if progress is not None:
            progress(r)
        for g, option in enumerate(grid(problem, row)):
            plan = plan_of(problem, row, option)
            e = estimate(problem.model, problem.system, plan)
            evaluated += 1
            if not e.fits:
                continue
            feasible += 1
            obj = float(objective_value(problem, e.step_time_s, e.tokens_per_step, e.model_flops_per_step, peak_flops))
            pool.append((obj, r, g, row, option))
            if collect_all:
                everything.append({"row": r, "grid": g, "step_time_s": e.step_time_s, "objective": obj,
                                   "peak_memory_bytes": e.peak_stage.peak_bytes, "plan": plan})
        if len(pool) > 4 * top_k:
            pool.sort(key=lambda item: (item[0], item[1], item[2]))
            kth = pool[top_k - 1][0]
            pool = [p for p in pool if p[0] <= kth]
    return pool, evaluated, feasible, n_rows, everything


def exhaustive_search(
    problem: SearchProblem, top_k: int = 10, workers: int = 1, progress=None, collect_all: bool = False
) -> SearchResult:
    """Every candidate of the canonical space through the scalar ``estimate``, one by one
    (``workers`` processes split the rows; each keeps its own top K, merged exactly)."""
    problem.check()
    start = time.perf_counter()
    if workers <= 1:
        parts = [_exhaustive_part(problem, top_k, 0, 1, progress, collect_all)]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool_executor:
            futures = [pool_executor.submit(_exhaustive_part, problem, top_k, w, workers, None, collect_all)
                       for w in range(workers)]
            parts = [f.result() for f in futures]
    pool = [item for part in parts for item in part[0]]
    evaluated = sum(p[1] for p in parts)
    feasible = sum(p[2] for p in parts)
    n_rows = parts[0][3]
    plans = _finish(problem, pool, top_k)
    return SearchResult(plans=plans, candidates=evaluated, evaluated=evaluated, feasible=feasible,
                        seconds=time.perf_counter() - start, rows=n_rows, rows_evaluated=n_rows,
                        all_feasible=[item for part in parts for item in part[4]] if collect_all else None)
