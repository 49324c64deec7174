"""``--objective time-to-train`` and its kin: rank plans by their wall-clock time or cost for
``--tokens`` tokens, failures, checkpoints, restarts and pauses included (paraplan.goodput;
docs/goodput.md).

- ``time-to-train``: expected wall seconds per token; ``time-to-train-p90``: the Monte Carlo's P90
  wall seconds per token (the pessimistic end over failure arrivals, as ``robust`` is over the
  model's error band);
- ``cost-to-train`` / ``cost-to-train-p90``: the same times as USD per token, wall x GPUs x the price
  per GPU-hour (--price or the system's). At one GPU count and price the cost ranks the plans as the
  time does; across GPU counts (``sweep --goodput``) they part.

Goodput depends on a plan's checkpoint, placement and step, so it is computed only for the plans a
time search returns. The ranking stays exact as ``search.robust``'s does: a plan outside the time
search's top k has T_s at least the k-th's, and every plan's statistic is at least a bound that grows
with T_s (goodput.bounds: c * T_s + t_startup for the mean, T_s + t_startup + c_min * q(lambda T_s)
for the P90). When the K-th best value found is below the bound at the k-th T_s no unseen plan can
enter the top K; otherwise k grows (x4) and the time search runs again, up to MAX_TIME_GROUPS."""

from __future__ import annotations

from dataclasses import replace

from paraplan.goodput.bounds import p90_lower_bound_s, wall_lower_bound_factor
from paraplan.goodput.checkpoint import total_state_bytes
from paraplan.goodput.inputs import GoodputInputs, default_inputs
from paraplan.goodput.plan import plan_goodput
from paraplan.search import ranking
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError

MAX_TIME_GROUPS = 2048
P90_START = 16  # the P90 bound is looser (restarts only): start with 16x the groups
OBJECTIVES = {
    "time-to-train": "expected wall-clock seconds per token",
    "time-to-train-p90": "P90 wall-clock seconds per token (Monte Carlo over failures)",
    "cost-to-train": "expected USD per token (wall x GPUs x price)",
    "cost-to-train-p90": "P90 USD per token (Monte Carlo over failures)",
}


def _per_token(problem: SearchProblem, objective: str, tokens: float):
    """wall seconds -> the objective's value per token (seconds, or USD at the problem's price)."""
    if objective.startswith("cost"):
        price = problem.price_per_gpu_hour
        if price is None:
            raise InputError(
                f"--price: --objective {objective} needs a price and {problem.system.name} has "
                "none; give --price USD per GPU-hour"
            )
        return lambda wall_s: wall_s * problem.gpus * price / 3600.0 / tokens
    return lambda wall_s: wall_s / tokens


def unseen_bound(problem: SearchProblem, objective: str, inputs):
    """useful_s -> the least wall seconds (the objective's statistic) of any plan of the problem
    whose failure-free time is ``useful_s`` or more (goodput.bounds)."""
    system = problem.system
    host = system.accelerator.host_bandwidth or system.network.nic_bandwidth
    total = total_state_bytes(problem.model, problem)  # its dtype and grad_dtype
    domain = system.node.gpus_per_domain
    if objective.endswith("-p90"):
        return lambda useful_s: p90_lower_bound_s(
            useful_s, problem.gpus, total, host, inputs, domain
        )
    factor = wall_lower_bound_factor(problem.gpus, total, host, inputs, domain)
    return lambda useful_s: factor * useful_s + inputs.restart.startup_s


def time_to_train_search(
    problem: SearchProblem,
    tokens: float,
    top_k: int,
    run,
    inputs: GoodputInputs | None = None,
    objective: str = "time-to-train",
    **options,
):
    """(result, goodput dicts, exact): the top-K plans by ``objective`` (OBJECTIVES; the result's
    ``objective`` column), each plan's goodput (goodput.plan.PlanGoodput.to_dict), and whether the
    ranking is exact (module docstring). ``run`` is the time search (``search.run.search``). The
    returned plans come in failure-free order, so a plan whose bound reaches the K-th value found
    ends the pass (it and every later one cannot enter); goodputs are kept across passes."""
    inputs = inputs or default_inputs()
    value = _per_token(problem, objective, tokens)
    bound = unseen_bound(problem, objective, inputs)
    p90 = objective.endswith("-p90")
    inner = replace(problem, objective="time")
    known: dict[str, object] = {}
    k = max(2 * top_k, top_k + 10) * (P90_START if p90 else 1)
    while True:
        result = run(inner, top_k=k, **options)
        scored, cut = [], False
        for i, p in enumerate(result.plans):
            if len(scored) >= top_k:
                kth = sorted(v for v, *_ in scored)[top_k - 1]
                if value(bound(p.objective * tokens)) >= kth:
                    cut = True
                    break
            key = p.plan.model_dump_json()
            if key not in known:
                known[key] = plan_goodput(
                    p.estimate,
                    problem.model,
                    problem.system,
                    p.plan,
                    tokens,
                    inputs,
                    problem.price_per_gpu_hour,
                )
            good = known[key]
            scored.append((value(good.time.p90_s if p90 else good.time.wall_s), i, p, good))
        scored.sort(key=lambda item: (ranking.tie_value(item[0]), item[1]))
        complete = len(result.plans) < k
        kth = scored[min(top_k, len(scored)) - 1][0] if scored else float("inf")
        unseen = value(bound(_useful_s(result, tokens))) if result.plans else float("inf")
        exact = cut or complete or len(scored) < top_k or kth <= unseen
        if exact or k >= MAX_TIME_GROUPS:
            break
        k = min(4 * k, MAX_TIME_GROUPS)
    result.plans = [
        replace(p, rank=rank, objective=v)
        for rank, (v, _, p, _) in enumerate(scored[:top_k], start=1)
    ]
    result.faster_infeasible = []  # their failure-free times are not comparable
    return result, [g.to_dict() for *_, g in scored[:top_k]], exact


def _useful_s(result, tokens: float) -> float:
    """Failure-free seconds of ``tokens`` at the last returned plan's time per token (the time
    search's objective): every unseen plan's are at least these."""
    return result.plans[-1].objective * tokens
