"""Routing statistics of mixture-of-experts layers: how many tokens the busiest rank's experts
process. The op graph sizes the expert GEMMs with them (graph/moe.py); the costs and the search's
floors read them here. A learned router's experts are not equally likely: the spread of their
routing probabilities comes from published expert-load figures (catalog.expert_loads, issue 33)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from paraplan.catalog.expert_loads import ExpertLoadFigure
    from paraplan.graph.ops import ExpertShape
    from paraplan.specs.model import ModelSpec


def rank_load_spread(
    assignments: float, bins: int, experts: int = 0, expert_cv: float = 0.0
) -> float:
    """σ/μ of one rank's load when ``assignments`` (N) token→expert choices fall on ``bins`` (n) ranks holding
    E/n of ``experts`` (E) each, the experts' routing probabilities p_i having coefficient of variation c
    (``expert_cv``): σ²/μ² = (n−1)/N + c²·(n−1)/(E−1). The first term is the binomial spread of a rank's
    count at equal probabilities (Binomial(N, 1/n)); the second the spread of the rank's probability
    q_j = Σ p_i over E/n experts placed without regard to their load, a sample of E/n of E values without
    replacement: Var(q_j)/q̄² = c²·(E − E/n)/((E/n)·(E−1)) = c²·(n−1)/(E−1) (finite-population correction,
    Cochran 1977, Sampling Techniques, 3rd ed., Theorem 2.2). c = 0 leaves the binomial term alone."""
    if bins <= 1 or assignments <= 0:
        return 0.0
    skew = expert_cv * expert_cv * (bins - 1) / (experts - 1) if experts > 1 else 0.0
    return math.sqrt((bins - 1) / assignments + skew)


def expected_max_load_factor(
    assignments: float, bins: int, experts: int = 0, expert_cv: float = 0.0
) -> float:
    """E[max load] / mean load of n = ``bins`` ranks under N = ``assignments`` token→expert choices: the
    expected maximum of n loads of mean μ and spread σ (rank_load_spread) is at most μ + σ·√(2 ln n) (the
    Gaussian maximal inequality, e.g. Boucheron, Lugosi & Massart 2013, "Concentration Inequalities", §2.5),
    so 1 + (σ/μ)·√(2 ln n). At ``expert_cv`` 0 (equal expert probabilities) it is the statistical floor of
    learned routing, 1 + √((n−1)/N)·√(2 ln n); a skewed router (c > 0) is never faster. With one expert per
    rank and N → ∞ it returns 1 + c·√(2 ln E), the relation expert_cv_of inverts."""
    if bins <= 1 or assignments <= 0:
        return 1.0
    spread = rank_load_spread(assignments, bins, experts, expert_cv)
    return 1.0 + spread * math.sqrt(2.0 * math.log(bins))


def expert_cv_of(fig: ExpertLoadFigure) -> float:
    """c, the coefficient of variation of the experts' routing probabilities, from a published load figure
    (catalog.expert_loads): the figure's spread at its granularity less the binomial sampling spread of the
    assignments it counted (a per expert, (1 − 1/E)/a; none for a global statistic). An expert-level MaxVio
    (max/mean − 1) m over E experts is the maximum expected_max_load_factor prices, so σ/μ = m/√(2 ln E)
    (Wang et al. 2024, arXiv:2408.15664, eq. 4 defines MaxVio); an expert-level cv is σ/μ itself; a
    rank-level cv r over ep = n ranks inverts rank_load_spread: c² = (r² − (n−1)/N)·(E−1)/(n−1), N = a·n."""
    e = fig.experts
    a = fig.assignments
    if fig.granularity == "rank":
        n = fig.ep or 1
        binomial = (n - 1) / (a * n) if a else 0.0
        var = (fig.value**2 - binomial) * (e - 1) / (n - 1) if n > 1 else 0.0
        return math.sqrt(max(var, 0.0))
    spread = (
        fig.value / math.sqrt(2.0 * math.log(e)) if fig.statistic == "max_violation" else fig.value
    )
    sampling = (1.0 - 1.0 / e) / a if a else 0.0
    return math.sqrt(max(spread * spread - sampling, 0.0))


@lru_cache(maxsize=64)
def published_expert_cv(balancing: str | None, coefficient: float | None) -> float:
    """c of the default published figure measured at this balancing method and coefficient
    (catalog.expert_loads.default_load_figure, expert_cv_of); 0 where none is published."""
    from paraplan.catalog.expert_loads import (  # here: a dense model's start-up reads no load figures
        default_load_figure,
    )

    fig = default_load_figure(balancing, coefficient)
    return expert_cv_of(fig) if fig is not None else 0.0


def router_expert_cv(model: ModelSpec, expert: ExpertShape) -> float:
    """c of the plan's router: the plan's ``expert_load_cv`` when it states one, else the published figure of
    the balancing the model states (ModelSpec.router_balancing, router_balance_coeff; published_expert_cv)."""
    if expert.load_cv is not None:
        return expert.load_cv
    return published_expert_cv(model.router_balancing, model.router_balance_coeff)


def routed_load_factor(
    tokens: float,
    top_k: int,
    ep: int,
    balance: str,
    capacity_factor: float | None,
    experts: int = 0,
    expert_cv: float = 0.0,
) -> float:
    """Tokens the busiest rank's experts process, relative to the mean T·k: capacity_factor when
    every expert is padded to capacity (Megatron-LM moe_pad_expert_input_to_capacity: the expert
    GEMMs always run at capacity, tokens over it are dropped); 1 for forced balance;
    expected_max_load_factor over the n ranks of the group for learned routing, with the N = T·k·n
    choices of one micro-batch and the router's expert spread c (``expert_cv``, router_expert_cv)."""
    if capacity_factor is not None:
        return capacity_factor
    if balance == "forced":
        return 1.0
    return expected_max_load_factor(tokens * top_k * ep, ep, experts, expert_cv)
