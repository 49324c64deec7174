"""The pipeline-schedule timeline of a plan's detail view: every stage's passes in the instruction
order of the plan's schedule (step/schedule_orders.py, each SCHEDULES entry's ``order``), each started
as soon as its stage is free and its input is there, with the stage's own per-micro-batch times as the
step composition prices them (``api.pipeline_stages``: F, B, W and point-to-point seconds per stage,
from step.compose.stage_works).

A pass of model chunk c on stage s sits at a position of its route (``api.route_position``: virtual
stage c·p + s; DualPipe's two directions, stage s at position s one way and p − 1 − s the other); its
durations are the stage's over v: F = (forward + p2p/2)/v, B = (backward + p2p/2)/v with W = wgrad/v
split off where the schedule splits the backward (ZB-H1, DualPipe), the stage's point-to-point
seconds shared evenly between the forward and the backward send. Dependencies: F after the F of the
position before; B after the B of the position after (after its own F at the route's end); W after
its own B (the order holds it there).

The drawn makespan is the composition's pipeline time m·S + bubble (``pipeline_s``; at pp 1 under the
A2A overlap that also holds the unpaired passes, which are not drawn) for GPipe, 1F1B,
interleaved 1F1B and ZB-H1 when the stages are equal or the slowest is the last (with W <= F for
ZB-H1: its bubble formula assumes the deferred W passes fit the cool-down's slots), and for DualPipe
with equal stages at F = B − W = W (the ratio DeepSeek-V3's Table 2 formula agrees on with the order
placed in time, its overlapped pairs locked: step.schedule_orders.dualpipe_pairs, each taking the
stage's ``pair_s``; tests/web/test_web_timeline.py). Elsewhere the
two differ and ``approximate`` says so: with the slowest stage earlier the drawing is shorter, since
the composition passes every other stage's whole work through the fill and drain (T − S); DualPipe's
formula is the report's, not this placement's. DualPipe with fewer than 2p micro-batches is not
drawn (its reference implementation refuses them: ``note``).
"""

from __future__ import annotations

from paraplan.api import route_length, route_position, schedule_pairs

MAX_OPS = 4096  # passes drawn (a longer schedule is drawn for its first micro-batches)
MAX_PLACED = 300_000  # passes placed to find the whole schedule's makespan


def pass_times(stage: dict, vpp: int, split: bool) -> dict[str, float]:
    """Seconds of one F, B and W pass of a model chunk on ``stage`` (module doc), and of an overlapped
    pair of them (``F&B``: the stage's ``pair_s``, default F + B + W)."""
    wgrad = stage["wgrad_s"] if split else 0.0
    half_p2p = stage["p2p_s"] / 2.0
    out = {
        "F": (stage["forward_s"] + half_p2p) / vpp,
        "B": (stage["backward_s"] - wgrad + half_p2p) / vpp,
        "W": wgrad / vpp,
    }
    out["F&B"] = stage.get("pair_s", out["F"] + out["B"] + out["W"])
    return out


def _need(kind: str, at: int, last: int) -> tuple | None:
    """(kind, position) of the pass whose output a pass of ``kind`` at position ``at`` waits for."""
    if kind == "F":
        return None if at == 0 else ("F", at - 1)
    if kind == "B":
        return ("F", at) if at == last else ("B", at + 1)
    return ("B", at)


def place(
    orders: list[list], times: list[dict], vpp: int, directions: int = 1, pairs=None
) -> list[dict]:
    """Start each pass when its stage is free and its input is there (module doc): bars of
    (stage, kind, mb, chunk, start, end); ValueError if the orders deadlock. ``pairs[s]``: where in
    stage s's order an overlapped pair's F, B and W start; the pair starts when both its inputs are
    there and takes the stage's F&B, its outputs leaving at its end (deepseek-ai/DualPipe's
    ``_forward_backward_chunk`` waits for both receives and posts both sends after the pair)."""
    pp = len(orders)
    last = route_length(directions, pp, vpp) - 1
    starts = [set(p) for p in pairs] if pairs else [set() for _ in range(pp)]
    ends: dict[tuple, float] = {}
    free, nxt, bars = [0.0] * pp, [0] * pp, []
    layout = (directions, pp, vpp)
    progressed = True
    while progressed:
        progressed = False
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                size = 3 if nxt[s] in starts[s] else 1
                passes = orders[s][nxt[s] : nxt[s] + size]
                ready = _ready(passes[:2] if size == 3 else passes, s, free[s], ends, layout, last)
                if ready is None:
                    break
                _place(passes, times[s], ready, s, layout, ends, bars)
                free[s] = bars[-1]["end"]
                nxt[s] += size
                progressed = True
    if any(n < len(o) for n, o in zip(nxt, orders)):
        raise ValueError("the schedule's orders deadlock")
    return bars


def _ready(waiting, s, free, ends, layout, last) -> float | None:
    """When the passes ``waiting`` on stage s may start: the stage free and each one's input there
    (None while one is missing)."""
    directions, pp, vpp = layout
    ready = free
    for kind, mb, chunk in waiting:
        route, at = route_position(directions, pp, vpp, s, chunk)
        need = _need(kind, at, last)
        if need is None:
            continue
        key = (need[0], mb, route, need[1])
        if key not in ends:
            return None
        ready = max(ready, ends[key])
    return ready


def _place(passes, times, start, s, layout, ends, bars) -> None:
    """Bars of one pass, or of the F, B and W of an overlapped pair (its F&B shared among them in
    proportion to their own times, every output at the pair's end), from ``start``."""
    directions, pp, vpp = layout
    paired = len(passes) == 3
    total = times["F&B"] if paired else times[passes[0][0]]
    own = sum(times[kind] for kind, _, _ in passes)
    t = start
    for kind, mb, chunk in passes:
        span = (total * times[kind] / own if own > 0 else total / 3.0) if paired else total
        bars.append(
            {"stage": s, "kind": kind, "mb": mb, "chunk": chunk, "start": t, "end": t + span}
        )
        t += span
    bars[-1]["end"] = start + total
    for kind, mb, chunk in passes:
        route, at = route_position(directions, pp, vpp, s, chunk)
        ends[(kind, mb, route, at)] = start + total


def _shown(pp: int, vpp: int, m: int, directions: int) -> int:
    """Micro-batches drawn: all of them, or fewer (a multiple of p, at least p, 2p for DualPipe)
    while over MAX_OPS passes."""
    least = pp * directions
    shown = m
    while shown > least and 3 * shown * vpp * pp > MAX_OPS:
        shown = max(least, (shown // 2) // pp * pp)
    return shown


def _makespan(bars: list[dict]) -> float | None:
    return max(bar["end"] for bar in bars) if bars else None


def timeline(pipeline: dict, orders_of, bubble_s: float) -> dict:
    """The drawing of a plan's schedule: ``bars`` (stage, kind, mb, chunk, start, end in seconds),
    the drawn makespan beside the composition's pipeline time, and whether they differ
    (``approximate``, module doc). ``pipeline`` is ``api.pipeline_stages``'s document and
    ``orders_of(schedule, pp, vpp, m)`` the schedule's order (``api.schedule_order``)."""
    pp, vpp, m = pipeline["pp"], pipeline["vpp"], pipeline["microbatches"]
    schedule, split = pipeline["schedule"], pipeline["split_backward"]
    directions = pipeline["directions"]
    times = [pass_times(stage, vpp, split) for stage in pipeline["stages"]]
    shown = _shown(pp, vpp, m, directions)
    makespan, note = None, None
    try:
        pairs = schedule_pairs(schedule, pp, vpp, shown)
        bars = place(orders_of(schedule, pp, vpp, shown), times, vpp, directions, pairs)
    except ValueError as exc:  # DualPipe with m < 2p: its reference implementation refuses it
        bars, note = [], f"not drawn: {exc}"
    if shown == m:
        makespan = _makespan(bars)
    elif 3 * m * vpp * pp <= MAX_PLACED:
        pairs = schedule_pairs(schedule, pp, vpp, m)
        bars_m = place(orders_of(schedule, pp, vpp, m), times, vpp, directions, pairs)
        makespan = _makespan(bars_m)
    target = pipeline["pipeline_s"]
    return {
        "schedule": schedule,
        "pp": pp,
        "vpp": vpp,
        "directions": directions,
        "microbatches": m,
        "microbatches_drawn": shown,
        "stages": pipeline["stages"],
        "bars": bars,
        "makespan_s": makespan,
        "pipeline_s": target,
        "bubble_s": bubble_s,
        "approximate": makespan is None or abs(makespan - target) > 1e-9 * abs(target),
        "note": note,
    }
