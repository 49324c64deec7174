"""Re-ranking a time search by another objective, exactly: the one loop ``--objective robust``
(search.robust) and the time-to-train objectives (search.time_to_train) share.

The other objective's value of a plan is known only once the plan is found (its error band, its
goodput), so the time search returns its best k groups in time order and each is scored. Every
plan at time per token t or more scores at least ``lower_bound(t)`` (the objective's admissible
bound), so within a pass a plan whose bound reaches the K-th score found ends the pass (it and every
later one cannot enter), and after a pass no unseen plan can enter when the K-th score is at most
the bound at the last returned plan's time. Otherwise k grows ×4 and the time search runs again, up
to ``MAX_TIME_GROUPS`` (beyond that the ranking covers those groups only, and says so: ``exact``).
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from paraplan.search import ranking

MAX_TIME_GROUPS = 2048  # time-ranked groups at most examined (each is one estimate and one score)


def rerank_exactly(
    problem, top_k: int, run, score, lower_bound, first_k: int | None = None, **options
):
    """(result, exact): ``run``'s time search (``problem`` at objective "time", ``options``) re-ranked
    by ``score(ranked plan)``, its ranks and objectives replaced (module docstring); ``lower_bound``
    maps a time per token to the least score any plan that slow or slower can have."""
    inner = replace(problem, objective="time")
    k = first_k or max(2 * top_k, top_k + 10)
    while True:
        result = run(inner, top_k=k, **options)
        scored, best, cut = [], [], False  # best: the top_k least scores, negated (a max-heap)
        for i, p in enumerate(result.plans):
            if len(best) >= top_k and lower_bound(p.objective) >= -best[0]:
                cut = True
                break
            value = score(p)
            scored.append((value, i, p))
            if len(best) < top_k:
                heapq.heappush(best, -value)
            elif value < -best[0]:
                heapq.heapreplace(best, -value)
        scored.sort(key=lambda item: (ranking.tie_value(item[0]), item[1]))
        complete = len(result.plans) < k  # every feasible group was returned
        kth = scored[min(top_k, len(scored)) - 1][0] if scored else float("inf")
        unseen = lower_bound(result.plans[-1].objective) if result.plans else float("inf")
        exact = cut or complete or len(scored) < top_k or kth <= unseen
        if exact or k >= MAX_TIME_GROUPS:
            break
        k = min(4 * k, MAX_TIME_GROUPS)
    result.plans = [
        replace(p, rank=rank, objective=value)
        for rank, (value, _, p) in enumerate(scored[:top_k], start=1)
    ]
    return result, exact
