"""The pipeline-schedule timeline of a plan's detail view: every stage's passes in the instruction
order of the plan's schedule (step/schedules.py, each entry's ``order``), each started as soon as its
stage is free and its input is there, with the stage's own per-micro-batch times as the step
composition prices them (``api.pipeline_stages``: F, B, W and point-to-point seconds per stage).

A pass of model chunk c on stage s is virtual stage c·p + s; its durations are the stage's over v:
F = (forward + p2p/2)/v, B = (backward + p2p/2)/v with W = wgrad/v split off where the schedule
splits the backward (ZB-H1, DualPipe), the stage's point-to-point seconds shared evenly between
the forward and the backward send. Dependencies: F after the F of the virtual stage before; B after
the B of the one after (after its own F on the last); W after its own B (the order holds it there).

The drawn makespan is the composition's pipeline time m·S + bubble (``pipeline_s``) for GPipe,
1F1B, interleaved 1F1B and ZB-H1 when the stages are equal or the slowest is the last (with W <= F
for ZB-H1: its bubble formula assumes the deferred W passes fit the cool-down's slots); with the
slowest stage earlier the drawing is shorter, since the composition passes every other stage's
whole work through the fill and drain (T − S). DualPipe is drawn in ZB-H1's order, one direction
(``approximate``): the composition prices its two-direction schedule by its own formula
(``bubble_s`` beside the drawing). tests/web/test_web_timeline.py checks these statements.
"""

from __future__ import annotations

MAX_OPS = 4096  # passes drawn (a longer schedule is drawn for its first micro-batches)
MAX_PLACED = 300_000  # passes placed to find the whole schedule's makespan


def pass_times(stage: dict, vpp: int, split: bool) -> dict[str, float]:
    """Seconds of one F, B and W pass of a model chunk on ``stage`` (module doc)."""
    wgrad = stage["wgrad_s"] if split else 0.0
    half_p2p = stage["p2p_s"] / 2.0
    return {
        "F": (stage["forward_s"] + half_p2p) / vpp,
        "B": (stage["backward_s"] - wgrad + half_p2p) / vpp,
        "W": wgrad / vpp,
    }


def place(orders: list[list], times: list[dict], vpp: int) -> list[dict]:
    """Start each pass when its stage is free and its input is there (module doc): bars of
    (stage, kind, mb, chunk, start, end); ValueError if the orders deadlock."""
    pp = len(orders)
    last = pp * vpp - 1
    ends: dict[tuple, float] = {}
    free, nxt, bars = [0.0] * pp, [0] * pp, []
    progressed = True
    while progressed:
        progressed = False
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                kind, mb, chunk = orders[s][nxt[s]]
                vs = chunk * pp + s
                need = {"F": ("F", mb, vs - 1), "B": ("B", mb, vs + 1), "W": ("B", mb, vs)}[kind]
                if kind == "F" and vs == 0:
                    need = None
                elif kind == "B" and vs == last:
                    need = ("F", mb, vs)
                if need is not None and need not in ends:
                    break
                start = max(free[s], ends[need] if need else 0.0)
                end = start + times[s][kind]
                ends[(kind, mb, vs)] = free[s] = end
                bars.append({"stage": s, "kind": kind, "mb": mb, "chunk": chunk})
                bars[-1].update(start=start, end=end)
                nxt[s] += 1
                progressed = True
    if any(n < len(o) for n, o in zip(nxt, orders)):
        raise ValueError("the schedule's orders deadlock")
    return bars


def _shown(schedule: str, pp: int, vpp: int, m: int) -> int:
    """Micro-batches drawn: all of them, or fewer (a multiple of pp) while over MAX_OPS passes."""
    shown = m
    while shown > pp and 3 * shown * vpp * pp > MAX_OPS:
        shown = max(pp, (shown // 2) // pp * pp or pp)
    return shown


def timeline(pipeline: dict, orders_of, bubble_s: float) -> dict:
    """The drawing of a plan's schedule: ``bars`` (stage, kind, mb, chunk, start, end in seconds),
    the drawn makespan beside the composition's pipeline time, and whether the drawing is
    approximate (module doc). ``pipeline`` is ``api.pipeline_stages``'s document and
    ``orders_of(schedule, pp, vpp, m)`` the schedule's order (``api.schedule_order``)."""
    pp, vpp, m = pipeline["pp"], pipeline["vpp"], pipeline["microbatches"]
    schedule, split = pipeline["schedule"], pipeline["split_backward"]
    times = [pass_times(stage, vpp, split) for stage in pipeline["stages"]]
    shown = _shown(schedule, pp, vpp, m)
    bars = place(orders_of(schedule, pp, vpp, shown), times, vpp)
    makespan = None
    if shown == m:
        makespan = max(bar["end"] for bar in bars)
    elif 3 * m * vpp * pp <= MAX_PLACED:
        makespan = max(bar["end"] for bar in place(orders_of(schedule, pp, vpp, m), times, vpp))
    return {
        "schedule": schedule,
        "pp": pp,
        "vpp": vpp,
        "microbatches": m,
        "microbatches_drawn": shown,
        "stages": pipeline["stages"],
        "bars": bars,
        "makespan_s": makespan,
        "pipeline_s": pipeline["pipeline_s"],
        "bubble_s": bubble_s,
        "approximate": schedule == "dualpipe",
    }
