"""``--objective time-to-train``: rank plans by their expected wall-clock time for ``--tokens`` tokens,
failures, checkpoints and restarts included (paraplan.goodput; docs/goodput.md).

Goodput depends on a plan's checkpoint and step, so it is computed only for the plans a time search
returns. The ranking stays exact as ``search.robust``'s does: every plan's expected wall time is at
least c * T_s + t_startup (goodput.time_to_train.wall_lower_bound_factor: c depends on the GPU count
and the model's state only), and a plan outside the time search's top k has T_s at least the k-th's.
When the K-th best expected time found is below that bound no unseen plan can enter the top K;
otherwise k grows (x4) and the time search runs again, up to MAX_TIME_GROUPS groups."""

from __future__ import annotations

from dataclasses import replace

from paraplan.goodput.checkpoint import total_state_bytes
from paraplan.goodput.inputs import GoodputInputs, default_inputs
from paraplan.goodput.plan import plan_goodput
from paraplan.goodput.time_to_train import wall_lower_bound_factor
from paraplan.search import ranking
from paraplan.search.space import SearchProblem

MAX_TIME_GROUPS = 2048


def time_to_train_search(
    problem: SearchProblem,
    tokens: float,
    top_k: int,
    run,
    inputs: GoodputInputs | None = None,
    **options,
):
    """(result, goodput dicts, exact): the top-K plans by expected wall seconds per token (the
    result's ``objective``), each plan's goodput (goodput.plan.PlanGoodput.to_dict), and whether the
    ranking is exact (module docstring). ``run`` is the time search (``search.run.search``)."""
    inputs = inputs or default_inputs()
    inner = replace(problem, objective="time")
    system = problem.system
    host = system.accelerator.host_bandwidth or system.network.nic_bandwidth
    total = total_state_bytes(problem.model, problem)  # its dtype and grad_dtype
    factor = wall_lower_bound_factor(problem.gpus, total, host, inputs)
    startup_per_token = inputs.restart.startup_s / tokens
    k = max(2 * top_k, top_k + 10)
    while True:
        result = run(inner, top_k=k, **options)
        scored = []
        for i, p in enumerate(result.plans):
            good = plan_goodput(
                p.estimate,
                problem.model,
                system,
                p.plan,
                tokens,
                inputs,
                problem.price_per_gpu_hour,
            )
            scored.append((good.time.wall_s / tokens, i, p, good))
        scored.sort(key=lambda item: (ranking.tie_value(item[0]), item[1]))
        complete = len(result.plans) < k
        kth = scored[min(top_k, len(scored)) - 1][0] if scored else float("inf")
        unseen = (
            result.plans[-1].objective * factor + startup_per_token
            if result.plans
            else float("inf")
        )
        exact = complete or len(scored) < top_k or kth <= unseen
        if exact or k >= MAX_TIME_GROUPS:
            break
        k = min(4 * k, MAX_TIME_GROUPS)
    result.plans = [
        replace(p, rank=rank, objective=value)
        for rank, (value, _, p, _) in enumerate(scored[:top_k], start=1)
    ]
    result.faster_infeasible = []  # their failure-free times are not comparable
    return result, [g.to_dict() for *_, g in scored[:top_k]], exact
