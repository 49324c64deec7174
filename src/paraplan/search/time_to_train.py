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

from paraplan.goodput.bounds import Fleet, p90_lower_bound_s, wall_lower_bound_factor
from paraplan.goodput.checkpoint import total_state_bytes
from paraplan.goodput.inputs import GoodputInputs, default_inputs
from paraplan.goodput.plan import plan_goodput
from paraplan.search.rerank import MAX_TIME_GROUPS, rerank_exactly  # noqa: F401 (named here too)
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError

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
    total = total_state_bytes(problem.model, system, problem.dtype, problem.runtime)
    domain = system.node.gpus_per_domain
    fleet = Fleet(problem.gpus, total, host, inputs, domain)
    if objective.endswith("-p90"):
        return lambda useful_s: p90_lower_bound_s(useful_s, fleet)
    factor = wall_lower_bound_factor(fleet)
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
    known: dict[str, object] = {}  # goodputs kept across passes

    def goodput_of(p):
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
        return known[key]

    def score(p) -> float:
        good = goodput_of(p)
        return value(good.time.p90_s if p90 else good.time.wall_s)

    first_k = max(2 * top_k, top_k + 10) * (P90_START if p90 else 1)
    result, exact = rerank_exactly(
        problem,
        top_k,
        run,
        score,
        lambda time_per_token: value(bound(time_per_token * tokens)),
        first_k=first_k,
        **options,
    )
    result.faster_infeasible = []  # their failure-free times are not comparable
    return result, [goodput_of(p).to_dict() for p in result.plans], exact


def ranked_search(
    problem: SearchProblem,
    tokens: float,
    top_k: int,
    run,
    objective: str = "time-to-train",
    inputs: GoodputInputs | None = None,
    **options,
):
    """(result, the ``time_to_train`` JSON object of ``search --json`` and api.search): the
    objective, what ranks the plans, whether exactly, and each plan's goodput
    (time_to_train_search with the same arguments)."""
    result, goods, exact = time_to_train_search(
        problem, tokens, top_k, run, inputs, objective, **options
    )
    ranked_by = OBJECTIVES[objective] + " for the run's tokens, failures, checkpoints, restarts "
    ranked_by += "and pauses included (the plans' objective; docs/goodput.md)"
    info = {"objective": objective, "ranked_by": ranked_by, "exact": exact, "goodput": goods}
    return result, info
