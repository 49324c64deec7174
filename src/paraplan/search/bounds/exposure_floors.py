"""The exposure floors of the search's layer floors (search.expert_floors.KindFloors): the least exposed dispatch and
combine of an expert option over its dispatchers and a2a-overlap switches (``DispatchFloors``), the least seconds of
the routed experts' grouped GEMMs (``expert_gemm_floor_s``, the cheap first bounds) and the K/V ring's exposure floor
(``ring_floor_s``)."""

from __future__ import annotations

import math
from typing import NamedTuple

from paraplan.cost.comm import GroupSpan, collective_costs_s
from paraplan.cost.compute import grouped_gemm_share
from paraplan.cost.flops import mlp_matmul_params
from paraplan.graph.routing import routed_load_factor
from paraplan.graph.mla import context_ring_collectives
from paraplan.graph.moe_mlp import dispatch_collectives, expert_knob_inputs, moe_tokens
from paraplan.search.space import SearchProblem
from paraplan.step.build import BlockCompute, expert_comm_terms
from paraplan.step.compose import expert_exposure

KNOB_MEMO_SIZE = 1 << 18


def _remember(memo: dict, key, value):
    """memo[key] = value, the memo emptied first once it holds KNOB_MEMO_SIZE entries; the value."""
    if len(memo) >= KNOB_MEMO_SIZE:
        memo.clear()
    memo[key] = value
    return value


class DispatchFloors:
    """The least exposed dispatch and combine (step.compose.expert_exposure, the EP parts of block_terms) of an
    MoE layer at a shape, an expert option and a block compute, over the option's dispatchers and a2a-overlap
    switches (SearchProblem.expert_switches); its EP collectives are the layer's dispatch_collectives, once
    (_DispatchTable: an overlapped switch is evaluated only when its least exposure is below the best so far, so the
    least is the same value). Memoised for one floors call: the shapes are keyed by identity."""

    def __init__(self, problem: SearchProblem):
        self.problem = problem
        self.tables: dict[tuple, _DispatchTable] = {}
        self.inputs: dict[int, tuple] = {}
        self.exposures: dict[tuple, float] = {}

    def table(self, shape, expert) -> _DispatchTable:
        """The option's _DispatchTable at the shape."""
        table = self.tables.get((id(shape), expert))
        if table is None:
            if id(shape) not in self.inputs:
                self.inputs[id(shape)] = expert_knob_inputs(shape)
            problem = self.problem
            table = self.tables[(id(shape), expert)] = _dispatch_table(
                problem.model,
                problem.system,
                shape,
                expert,
                problem.expert_switches(expert.ep, expert.etp),
                self.inputs[id(shape)],
            )
        return table

    def __call__(self, shape, expert, compute) -> float:
        """The least exposure over the option's switches with this compute (step.build.BlockCompute)."""
        table = self.table(shape, expert)
        key = (
            id(table),
            compute.forward,
            compute.backward,
        )  # the recompute modes and TP overlap share a compute
        best = self.exposures.get(key)
        if best is None:
            best = table.exposed
            for least, comm in table.overlapped:
                if least >= best:
                    break
                forward, backward = expert_exposure(compute, comm)
                best = min(best, forward + backward)
            self.exposures[key] = best
        return best


def expert_gemm_floor_s(model, system, shape, experts) -> float:
    """Least forward + backward seconds of an MoE layer's routed-expert grouped GEMMs (graph.moe.expert_ops) over the
    expert options ``experts`` at the shape: 3 · 2·T·k·load·etp·(p + 1)·h·⌊F/etp⌋ / (peak · cap · grouped share).
    The GEMMs multiply ⌈R/(E/ep)⌉ rows per local expert, R = T·k·etp·load (graph.moe.routed_rows), through p·⌊F/etp⌋
    and ⌊F/etp⌋-wide weights: forward 2·(E/ep)·⌈R/(E/ep)⌉·(p + 1)·⌊F/etp⌋·h FLOPs, backward twice that
    (graph.transformer._gemm), each at no more than peak · gemm_efficiency_cap · grouped_gemm_share
    (cost.compute.grouped_gemm_time_s: its wave and depth factors are <= 1, its fixed costs >= 0). The load is the
    capacity factor when one is set, else at least 1 (cost.moe.routed_load_factor: forced balance 1, learned routing
    the expected maximum over the ranks, >= the mean)."""
    acc, dtype, tokens = system.accelerator, shape.dtype, moe_tokens(shape)
    width = model.moe_ffn_hidden or 0
    # per option: the weights a routed row passes through across its etp ranks (cost.moe.mlp_matmul_params) times its
    # least load, forced balance's (the capacity factor when set, else 1)
    weights = min(
        mlp_matmul_params(model, e.etp * (width // e.etp))
        * routed_load_factor(tokens, model.top_k, e.ep, "forced", e.capacity_factor)
        for e in experts
    )
    flops = 2.0 * tokens * model.top_k * weights
    return (
        3.0
        * flops
        / (
            acc.peak_matrix_flops(dtype)
            * acc.gemm_efficiency_cap(dtype)
            * grouped_gemm_share(acc, dtype)
        )
    )


def ring_transfer_floor_s(model, system, shape) -> tuple[float, float] | None:
    """(forward, backward) seconds of a layer's context-parallel K/V ring transfers (graph.mla.context_ring_collectives,
    calls × step.build.block_comm's cost.comm.collective_costs_s) on the cheapest span a cp group of the
    shape can have: inside one NVLink domain when cp fits in one (cost.comm.linear_collective's send/recv over NVLink),
    else across domains (over the NIC: every placement then crosses); None without a ring (cp 1, Ulysses, the 2D
    layouts, whose collectives the floor does not cover)."""
    rings = context_ring_collectives(model, shape) if shape.tp_layout == "1d" else []
    if not rings:
        return None
    cp, domain = shape.cp, system.node.gpus_per_domain
    spans = [GroupSpan(cp, 1, cp)] + ([GroupSpan(cp, cp, 1)] if cp <= domain else [])
    forward = backward = 0.0
    for c in rings:
        time = min(collective_costs_s(c.kind, c.bytes, span, system)[0] for span in spans)
        forward += c.count_fwd * time
        backward += c.count_bwd * time
    return forward, backward


def ring_added_s(
    ring: tuple[float, float] | None, attention: tuple[float, float] | None, core: BlockCompute
) -> float:
    """KindFloors' ring term: ring_floor_s with the attention time of the kind's other ops (``attention``: forward,
    backward; None when unknown) plus its core attention's; 0 without a ring or that attention time."""
    if ring is None or attention is None:
        return 0.0
    return ring_floor_s(
        ring, attention[0] + core.attention_forward, attention[1] + core.attention_backward
    )


def ring_floor_s(
    ring: tuple[float, float], attention_forward: float, attention_backward: float
) -> float:
    """A floor of a block's exposed K/V ring time (step.compose.block_terms' cp_f + cp_b): max(0, T_f − A_f) +
    max(0, T_b − A_b), T the ring's transfer on its cheapest span (ring_transfer_floor_s), A at least the block's
    attention time. block_terms exposes per pass E = (c−1)·max(0, T/(c−1) − A/c) + sync >= T − A
    (cost.overlap.ring_attention_exposed_s; the synchronisation >= 0; torch's gathered ring,
    step.block_terms.gathered_cp_exposure_s, exposes at least T − A/c forward and, with its sends at least the
    gather's bytes, at least T − A backward) and prices it as E + (P/T)(T − E), between E and T
    for a price P <= T (cost.comm.priced_exposure_s; a collective's price is its time times an overlap cost <= 1), so
    at least min(E, T) >= max(0, T − A); recomputation only adds."""
    return max(0.0, ring[0] - attention_forward) + max(0.0, ring[1] - attention_backward)


def least_with(totals, extra) -> float:
    """min over j of totals[j] + extra(j), for extra(j) >= 0, evaluating extra(j) only while totals[j] (ascending) is
    below the least so far: the same value, with fewer dispatch costings (extra: DispatchFloors)."""
    best = math.inf
    for j in sorted(range(len(totals)), key=totals.__getitem__):
        if totals[j] >= best:
            break
        best = min(best, totals[j] + extra(j))
    return best


class _EpComm(NamedTuple):
    """The EP fields of a step.build.BlockComm (what step.compose.expert_exposure reads)."""

    ep_forward: float
    ep_backward: float
    ep_forward_price: float
    ep_backward_price: float
    ep_overlap: float


class _DispatchTable(NamedTuple):
    """An expert option's dispatch/combine over its switches: the least exposure of the switches without a2a
    overlap (exposed whole: it reads no compute), and each overlapped switch after the least exposure it can
    take, ascending: expert_exposure gives it priced_exposure_s per direction, linear in the exposed part
    between 0 (its price) and the whole transfer, so at least min(price, transfer) per direction."""

    exposed: float
    overlapped: tuple[tuple[float, _EpComm], ...]
    # the least raw dispatch and combine (nothing hidden: BlockTerms.ep_comm) of any switch, what a pass run unpaired
    # pays (step.block_terms.unpaired_ep_exposure_s)
    raw: float = math.inf

    @property
    def least(self) -> float:
        """The least exposure of any switch at any compute."""
        return min(self.exposed, self.overlapped[0][0]) if self.overlapped else self.exposed


def _dispatch_table(model, system, shape, expert, switches: tuple, inputs: tuple) -> _DispatchTable:
    """The _DispatchTable of step.build.block_comm over the MoE layer's dispatch collectives at the shape with
    ``expert``'s degrees (the same collectives, in the same order, as its graph's), per (dispatcher, overlap)
    switch; memoised on what they read of the shape (``inputs``: graph.moe.expert_knob_inputs, a superset)."""
    key = (model, system, inputs, expert, switches)
    found = _DISPATCH_TABLES.get(key)
    if found is None:
        comms = _dispatch_comms_of(model, system, shape, expert, switches)
        exposed = min(
            (c.ep_forward + c.ep_backward for c in comms if not c.ep_overlap), default=math.inf
        )
        overlapped = sorted(
            (
                (min(c.ep_forward_price, c.ep_forward) + min(c.ep_backward_price, c.ep_backward), c)
                for c in comms
                if c.ep_overlap
            ),
            key=lambda item: item[0],
        )
        raw = min((c.ep_forward + c.ep_backward for c in comms), default=math.inf)
        found = _remember(_DISPATCH_TABLES, key, _DispatchTable(exposed, tuple(overlapped), raw))
    return found


_DISPATCH_TABLES: dict = {}
_dispatch_table.cache_clear = _DISPATCH_TABLES.clear


def _dispatch_comms_of(model, system, shape, expert, switches: tuple) -> tuple[_EpComm, ...]:
    """Per (dispatcher, overlap) switch: the _EpComm of step.build.block_comm over the MoE layer's dispatch collectives
    with the option ``expert`` at the shape, their EP terms (step.build.expert_comm_terms, what block_comm sums) costed
    once per dispatcher without a2a overlap, and the switch as step.build.block_cost_facts sets it: ep_overlap only
    (stages._comm_with_overlap). graph.moe.dispatch_collectives reads the option from its ``expert`` argument, not
    from the shape, so the shape is not rebuilt per dispatcher."""
    costed: dict[str, tuple] = {}
    out = []
    for dispatcher, overlap in switches:
        if dispatcher not in costed:
            knobs = expert._replace(dispatcher=dispatcher, a2a_overlap=False)
            costed[dispatcher] = expert_comm_terms(
                dispatch_collectives(model, shape, knobs), system, model, knobs
            )
        out.append(_EpComm(*costed[dispatcher], float(overlap)))
    return tuple(out)
