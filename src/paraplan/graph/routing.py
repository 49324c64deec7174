"""Routing statistics of mixture-of-experts layers: how many tokens the busiest rank's experts
process. The op graph sizes the expert GEMMs with them (graph/moe.py); the costs and the search's
floors read them here."""

from __future__ import annotations

import math


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
