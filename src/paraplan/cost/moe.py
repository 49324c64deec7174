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
from paraplan.specs.system import SystemSpec
from paraplan.specs.moe_model import (
    attention_widths,
    expert_params,
    is_moe_layer,
    is_windowed_layer,
    mla_params,
    mlp_params,
    shared_width,
)

# ---- FLOPs ---------------------------------------------------------------------------------


def attention_matmul_params(m: ModelSpec) -> float:
    """Matmul parameters of one attention block: MLA's five projections (norms excluded) or
    h·(q+2kv) + q·h."""
    if m.is_mla:
        return float(sum(v for k, v in mla_params(m).items() if not k.endswith("_norm")))
    return float(m.hidden * (m.q_width + 2 * m.kv_width) + m.q_width * m.hidden)


def mlp_matmul_params(m: ModelSpec, width: int) -> float:
    """p·h·f + f·h: the matmul parameters of one MLP of inner width f."""
    return float((m.mlp_input_projections + 1) * m.hidden * width)


def moe_mlp_matmul_params(m: ModelSpec) -> float:
    """Matmul parameters one token passes through in an MoE MLP: router E·h, k routed experts, shared experts."""
    routed = m.top_k * mlp_matmul_params(m, m.moe_ffn_hidden or 0)
    shared = mlp_matmul_params(m, shared_width(m)) if m.shared_experts else 0.0
    return float(m.experts * m.hidden) + routed + shared


def layer_matmul_params(m: ModelSpec, index: int) -> float:
    """Active matmul parameters of layer ``index`` (attention + dense or MoE MLP)."""
    mlp = moe_mlp_matmul_params(m) if is_moe_layer(m, index) else mlp_matmul_params(m, m.ffn_hidden)
    return attention_matmul_params(m) + mlp


def attention_keys_per_query(m: ModelSpec, index: int, seq_length: int) -> float:
    """Keys each query of layer ``index`` sees on average under the causal mask: (s+1)/2, fewer for
    windowed layers (ModelSpec.mean_visible_keys, the convention of cost/flops.py)."""
    return m.mean_visible_keys(seq_length, windowed=is_windowed_layer(m, index))


def attention_flops_per_token(m: ModelSpec, index: int, seq_length: int) -> float:
    """Forward + backward attention FLOPs of layer ``index``: cost.flops.attention_layer_flops_per_token
    with 3 passes over the causal keys, Q·Kᵀ at width q and P·V at width v (for GQA q = v = a·d gives
    flops.py's per-layer causal count)."""
    from paraplan.cost.flops import attention_layer_flops_per_token

    q, _, v = attention_widths(m)
    v = (
        v if m.is_mla else q
    )  # P·V yields one d-wide output per query head (GQA shares V, not its work)
    return attention_layer_flops_per_token(
        attention_keys_per_query(m, index, seq_length), q, v, passes=3.0
    )


def mtp_flops_per_token(m: ModelSpec, seq_length: int) -> float:
    """One MTP module (DeepSeek-V3 §2.2): projection 2h·h, one layer (MoE when the model is), and
    the shared output head again: 6·(2h² + layer + V·h) + its attention."""
    index = m.layers - 1  # the MTP block is built like the last (MoE) layer
    matmul = 2.0 * m.hidden * m.hidden + layer_matmul_params(m, index) + m.vocab * m.hidden
    return 6.0 * matmul + attention_flops_per_token(m, index, seq_length)


@lru_cache(maxsize=256)
def moe_model_flops_per_token(m: ModelSpec, seq_length: int) -> float:
    """Model FLOPs per token on active parameters (PaLM App. B: 6·N_active + attention), layer by
    layer, plus the LM head 6·V·h and the MTP modules. MFU of an MoE model uses these active FLOPs
    (the routed experts a token does not visit do no work)."""
    total = sum(
        6.0 * layer_matmul_params(m, i) + attention_flops_per_token(m, i, seq_length)
        for i in range(m.layers)
    )
    total += 6.0 * m.vocab * m.hidden
    return total + m.mtp_layers * mtp_flops_per_token(m, seq_length)


@lru_cache(maxsize=256)
def moe_recompute_flops_per_token(m: ModelSpec, seq_length: int, recompute: str) -> float:
    """Forward FLOPs re-run in backward per token: full = every layer's forward (2·N_layer + a third
    of its attention FLOPs); selective = the attention core (a third of the attention FLOPs),
    Korthikanti et al. 2022 §5."""
    attention = sum(attention_flops_per_token(m, i, seq_length) for i in range(m.layers)) / 3.0
    if recompute == "full":
        return attention + sum(2.0 * layer_matmul_params(m, i) for i in range(m.layers))
    if recompute == "selective":
        return attention
    return 0.0


# ---- routing statistics --------------------------------------------------------------------


def expected_max_load_factor(assignments: float, bins: int) -> float:
    """E[max load] / mean load when ``assignments`` token→expert choices fall uniformly on ``bins``
    ranks: each load is Binomial(N, 1/n), σ/μ = √((n−1)/N), and the expected maximum of n such
    loads is at most μ + σ·√(2 ln n) (the Gaussian maximal inequality, e.g. Boucheron, Lugosi &
    Massart 2013, "Concentration Inequalities", §2.5). The statistical floor of a router whose
    expert probabilities are equal (learned routing with a balancing loss); a skewed router is worse."""
    if bins <= 1 or assignments <= 0:
        return 1.0
    return 1.0 + math.sqrt((bins - 1) / assignments) * math.sqrt(2.0 * math.log(bins))


def routed_load_factor(
    tokens: float, top_k: int, ep: int, balance: str, capacity_factor: float | None
) -> float:
    """Tokens the busiest rank's experts process, relative to the mean T·k: capacity_factor when
    every expert is padded to capacity (Megatron-LM moe_pad_expert_input_to_capacity: the expert
    GEMMs always run at capacity, tokens over it are dropped); 1 for forced balance;
    expected_max_load_factor over the n ranks of the group for learned routing, with the N = T·k·n
    choices of one micro-batch."""
    if capacity_factor is not None:
        return capacity_factor
    if balance == "forced":
        return 1.0
    return expected_max_load_factor(tokens * top_k * ep, ep)


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


# ---- expert state --------------------------------------------------------------------------


def expert_params_per_gpu(m: ModelSpec, moe_layers: int, ep: int, etp: int) -> float:
    """Routed-expert parameters one GPU holds for ``moe_layers`` MoE layers: L_moe·(E/ep)·P_expert/etp
    (experts split over EP, each expert's matrices over ETP; Megatron-Core's expert layers)."""
    return moe_layers * (m.experts / ep) * expert_params(m) / etp


def dense_moe_params_per_gpu(m: ModelSpec, moe_layers: int, tp: int) -> float:
    """Non-expert parameters of the MoE MLPs per GPU: router E·h (replicated over TP) and shared
    experts (tensor-parallel like a dense MLP)."""
    shared = mlp_params(m, shared_width(m)) / tp if m.shared_experts else 0.0
    return moe_layers * (m.experts * m.hidden + shared)


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
    expected_groups_hit(E, k, D); NVLink: one copy per other GPU of the domain hit, g·(n_in−1)/n_in
    with g = expected_groups_hit(E, k, n) (DeepEP README: internode kernels forward RDMA arrivals to
    the target GPUs over NVLink; DeepSeek-V3 report §3.2.2)."""
    domains = max(1, math.ceil(ep / per_domain))
    d = expected_groups_hit(model.experts, model.top_k, domains)
    g = expected_groups_hit(model.experts, model.top_k, ep)
    nic = size_bytes * d * (domains - 1) / domains
    nvlink = size_bytes * g * (per_domain - 1) / per_domain
    return nvlink, nic


def moe_collective_time_s(
    kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec, model: ModelSpec
) -> float:
    """One call of an expert-parallel collective: all_to_all (cost.comm.all_to_all_time_s),
    all_to_all_dedup (DeepEP, deepep_split_bytes on cost.comm.hierarchical_all_to_all_time_s), or a
    ring collective (cost.comm.collective_time_s)."""
    if kind == "all_to_all":
        return all_to_all_time_s(size_bytes, span, system)
    if kind == "all_to_all_dedup":
        if span.size <= 1:
            return 0.0
        nvlink, nic = deepep_split_bytes(model, size_bytes, span.size, span.per_domain)
        return hierarchical_all_to_all_time_s(nvlink, nic, span, system)
    return collective_time_s(kind, size_bytes, span, system)


def expert_state_bytes(expert_params: float, dtype: str, zero: int, edp: int):
    """Weights / gradients / optimizer bytes of the routed experts on one GPU: the dense rule
    (cost.memory.sharded_state_bytes, ZeRO §5) with the expert-data-parallel degree edp =
    tp·cp·dp/(ep·etp) in place of dp (Megatron-Core shards the expert optimizer over the
    expert-data-parallel group)."""
    from paraplan.cost.memory import sharded_state_bytes

    return sharded_state_bytes(expert_params, dtype, zero, edp)


@lru_cache(
    maxsize=65536
)  # the dispatch of an expert option repeats across the span pairs and layer knobs of a search
def moe_collective_time_and_price_s(
    kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec, model: ModelSpec
):
    """(seconds, hidden price) of one expert-parallel call: moe_collective_time_s, and as price
    efficiency.a2a_overlap_cost (the SMs the all-to-all kernels hold while hidden), else the
    overlap cost of the tier that bounds it (scale-out when the group leaves the NVLink domain;
    cost.comm.LinearCollective.hidden_price_s for the ring collectives)."""
    from paraplan.cost.comm import collective_time_and_price_s

    if kind not in ("all_to_all", "all_to_all_dedup"):
        return collective_time_and_price_s(kind, size_bytes, span, system)
    time = moe_collective_time_s(kind, size_bytes, span, system, model)
    cost = system.accelerator.efficiency.a2a_overlap_cost
    if cost is None:
        cost = system.network.overlap_cost if span.domains > 1 else system.node.nvlink_overlap_cost
    return time, cost * time


def expert_dp_span(degrees, system: SystemSpec) -> GroupSpan:
    """Span of the expert-data-parallel group: edp = tp·cp·dp/(ep·etp) ranks, ep·etp apart in the
    tp·cp·dp block of a stage (expert rank order etp-ep-edp, Megatron-Core parallel_state); degrees
    without ep/etp (dense plans) give ep = etp = 1."""
    ep, etp = getattr(degrees, "ep", 1), getattr(degrees, "etp", 1)
    size = max(1, degrees.tp * degrees.cp * degrees.dp // (ep * etp))
    stride = ep * etp
    per_domain = max(1, min(size, system.node.gpus_per_domain // stride))
    return GroupSpan(size, per_domain, math.ceil(size / per_domain))
