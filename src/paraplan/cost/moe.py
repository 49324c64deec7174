"""Mixture-of-experts cost facts that are not ops: FLOPs per token for MFU, routing statistics
(load imbalance, capacity, destinations of a token) and the sharding of expert state (issue 9).

Notation: T tokens a rank dispatches per micro-batch, k top_k, E experts, n = ep ranks of the
expert-parallel group, D NVLink domains it spans, f_e expert width.
"""

from __future__ import annotations

import math
from functools import lru_cache

from paraplan.cost.comm import (
    GroupSpan,
    all_to_all_time_s,
    collective_time_s,
    hierarchical_all_to_all_time_s,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_plan import expert_data_parallel
from paraplan.specs.system import SystemSpec

# ---- routing statistics --------------------------------------------------------------------


def expected_groups_hit(experts: int, top_k: int, groups: int) -> float:
    """Distinct groups (GPUs or NVLink domains, each holding E/G experts) one token's k distinct
    experts fall in, for uniform routing: G·(1 − C(E−E/G, k)/C(E, k)) (hypergeometric: a group is
    missed when all k choices avoid its E/G experts)."""
    if groups <= 1:
        return 1.0
    per = experts // groups
    miss = 1.0
    for i in range(top_k):  # C(E−per, k)/C(E, k) = Π_i (E−per−i)/(E−i)
        miss *= max(experts - per - i, 0) / (experts - i)
    return groups * (1.0 - miss)


def group_limited_units_hit(
    experts: int, top_k: int, units: int, router_groups: int, group_topk: int
) -> float:
    """Distinct units (GPUs or NVLink domains, each holding E/U consecutive experts) one token's k experts
    fall in under group-limited routing: the E experts in G groups of s = E/G consecutive ids, each token
    routed to M = ``group_topk`` groups and its k experts taken among theirs. Megatron-Core
    (NVIDIA/Megatron-LM 2edffadb5, megatron/core/transformer/moe/moe_utils.py ``group_limited_topk``)
    scores each group by the sum of its top k/M expert scores, keeps the M best groups and takes the
    top k experts of those; the Megatron-Bridge runs force the balance with random logits before it
    (router.py: ``apply_random_logits``, then ``topk_routing_with_score_function`` with the groups), so
    the M groups are a uniform choice, and each is taken to give the token k/M experts (its top k/M,
    the ones that chose it). Then, with units holding c = G/U whole groups (U ≤ G):
    U·(1 − C(G−c, M)/C(G, M)) (a unit is missed when all M choices avoid its c groups); with groups
    spread over U/G units of u = E/U experts (U > G): U·(M/G)·(1 − C(s−u, k/M)/C(s, k/M)). DeepSeek-V3
    (G 8, M 4; its report §2.1.2, node-limited routing) on 8 domains: 4.0 against 5.30 for uniform
    routing (expected_groups_hit). Units that neither hold whole groups nor divide one fall back to
    uniform routing. An upper approximation: the rule takes the top k over the union of the M groups, not
    k/M from each, so a token's experts bunch into fewer units; a Monte-Carlo of the rule with normal
    logits (E 256, k 8, G 8, M 4) gives 3.97 / 5.73 / 6.84 / 7.48 units at U = 8 / 16 / 32 / 64 against
    4.00 / 6.06 / 7.10 / 7.61 here."""
    if units <= 1:
        return 1.0
    s, per_group = experts // router_groups, top_k // group_topk
    if units <= router_groups and router_groups % units == 0:
        c = router_groups // units
        return units * (
            1.0 - math.comb(router_groups - c, group_topk) / math.comb(router_groups, group_topk)
        )
    if units % router_groups == 0:
        u = experts // units
        miss = math.comb(s - u, per_group) / math.comb(s, per_group)
        return units * group_topk / router_groups * (1.0 - miss)
    return expected_groups_hit(experts, top_k, units)


def experts_units_hit(model: ModelSpec, units: int) -> float:
    """Distinct units (GPUs or NVLink domains) one token of ``model`` is sent to: group_limited_units_hit
    where the model routes group-limited (router_groups / router_group_topk), else expected_groups_hit."""
    if model.router_groups is None:  # both or neither (specs.moe_model._router_group_problems)
        return expected_groups_hit(model.experts, model.top_k, units)
    return group_limited_units_hit(
        model.experts, model.top_k, units, model.router_groups, model.router_group_topk
    )


# ---- expert state --------------------------------------------------------------------------


# ---- expert-parallel communication ---------------------------------------------------------


@lru_cache(maxsize=4096)
def expert_span(ep: int, etp: int, system: SystemSpec) -> GroupSpan:
    """Span of the EP group: Megatron-Core orders expert ranks etp-ep-edp (innermost first) over the
    tp·cp·dp ranks of a stage, so EP members are etp ranks apart and ⌊D/etp⌋ of them share an
    NVLink domain of D GPUs (pipeline stages outermost, as the default placement)."""
    per_domain = max(1, min(ep, system.node.gpus_per_domain // etp))
    return GroupSpan(ep, per_domain, math.ceil(ep / per_domain))


@lru_cache(maxsize=4096)
def expert_tp_span(etp: int, system: SystemSpec) -> GroupSpan:
    """Span of the ETP group: etp adjacent ranks."""
    per_domain = max(1, min(etp, system.node.gpus_per_domain))
    return GroupSpan(etp, per_domain, math.ceil(etp / per_domain))


EXPERT_GROUPS = (
    "ep",
    "etp",
)  # the collective groups priced on the expert spans (graph.moe_mlp.dispatch_collectives)


def expert_group_span(group: str, ep: int, etp: int, system: SystemSpec) -> GroupSpan:
    """The span an expert-parallel collective of ``group`` (EXPERT_GROUPS) runs on: expert_span or expert_tp_span."""
    return expert_span(ep, etp, system) if group == "ep" else expert_tp_span(etp, system)


def deepep_split_bytes(
    model: ModelSpec, size_bytes: float, ep: int, per_domain: int
) -> tuple[float, float]:
    """(NVLink bytes, NIC bytes) of a DeepEP dispatch of ``size_bytes`` (one copy of every token):
    NIC: one copy per remote NVLink domain the token's experts fall in, d·(D−1)/D with d =
    experts_units_hit(model, D); NVLink: one copy per other GPU of the domain hit, g·(n_in−1)/n_in
    with g = experts_units_hit(model, n), both under group-limited routing where the model has it
    (DeepEP README: internode kernels forward RDMA arrivals to the target GPUs over NVLink;
    DeepSeek-V3 report §3.2.2).

    Hybrid-EP (dispatcher hybridep) moves the same bytes: one RDMA copy per remote NVLink domain
    (IBGDA), forwarded to the GPUs of the domain over NVLink (TMA), the hierarchical deduplication
    of the NVIDIA technical blog "Optimizing Communication for Mixture-of-Experts Training with
    Hybrid Expert Parallel" (Feb 2026) and of Megatron-LM's _HybridEPManager (token_dispatcher.py at
    0d8e0714, the ETP×EP group)."""
    domains = max(1, math.ceil(ep / per_domain))
    d = experts_units_hit(model, domains)
    g = experts_units_hit(model, ep)
    nic = size_bytes * d * (domains - 1) / domains
    nvlink = size_bytes * g * (per_domain - 1) / per_domain
    return nvlink, nic


def moe_collective_time_s(
    kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec, model: ModelSpec
) -> float:
    """One call of an expert-parallel collective: all_to_all (cost.comm.all_to_all_time_s),
    all_to_all_dedup (DeepEP and Hybrid-EP, deepep_split_bytes on
    cost.comm.hierarchical_all_to_all_time_s), or a ring collective (cost.comm.collective_time_s).

    Hybrid-EP is priced as DeepEP: same bytes, same link bandwidths; its fused permute / unpermute is the
    graph's (graph.moe_mlp.fuses_permutes: no permute or unpermute pass, its sort passes kept). Not priced
    (no component measurement here): its SM share
    (moe_hybridep_num_sms 16 against moe_deepep_num_sms 20, TransformerConfig at 0d8e0714)."""
    if kind == "all_to_all":
        return all_to_all_time_s(size_bytes, span, system)
    if kind == "all_to_all_dedup":
        if span.size <= 1:
            return 0.0
        nvlink, nic = deepep_split_bytes(model, size_bytes, span.size, span.per_domain)
        return hierarchical_all_to_all_time_s(nvlink, nic, span, system)
    return collective_time_s(kind, size_bytes, span, system)


@lru_cache(
    maxsize=65536
)  # the dispatch of an expert option repeats across the span pairs and layer knobs of a search
def moe_collective_time_and_price_s(
    kind: str,
    size_bytes: float,
    span: GroupSpan,
    system: SystemSpec,
    model: ModelSpec,
    dispatcher: str = "alltoall",
):
    """(seconds, hidden price) of one expert-parallel call: moe_collective_time_s, and as price, for an
    all-to-all, share × seconds with share efficiency.a2a_overlap_cost where the system sets one, else
    cost.comm_contention.a2a_overlap_share of ``dispatcher`` (the SMs its kernels hold and the HBM its
    traffic takes, on the tier that bounds it: scale-out when the group leaves the NVLink domain);
    cost.comm.LinearCollective.hidden_price_s for the ring collectives."""
    from paraplan.cost.comm import collective_time_and_price_s
    from paraplan.cost.comm_contention import a2a_overlap_share

    if kind not in ("all_to_all", "all_to_all_dedup"):
        return collective_time_and_price_s(kind, size_bytes, span, system)
    time = moe_collective_time_s(kind, size_bytes, span, system, model)
    cost = system.accelerator.efficiency.a2a_overlap_cost
    if cost is None:
        cost = a2a_overlap_share(dispatcher, span.domains > 1, span.per_domain - 1, system)
    return time, cost * time


def expert_dp_span(degrees, system: SystemSpec) -> GroupSpan:
    """Span of the expert-data-parallel group: edp = tp·cp·dp/(ep·etp) ranks, ep·etp apart in the
    tp·cp·dp block of a stage (expert rank order etp-ep-edp, Megatron-Core parallel_state); degrees
    without ep/etp (dense plans) give ep = etp = 1."""
    ep, etp = getattr(degrees, "ep", 1), getattr(degrees, "etp", 1)
    size = max(1, expert_data_parallel(degrees.tp, degrees.cp, degrees.dp, ep, etp))
    stride = ep * etp
    per_domain = max(1, min(size, system.node.gpus_per_domain // stride))
    return GroupSpan(size, per_domain, math.ceil(size / per_domain))
