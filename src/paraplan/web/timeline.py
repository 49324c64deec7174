"""The pipeline-schedule timeline of a plan's detail view: each stage's forward and backward passes
per micro-batch (and model chunk), in the order of the plan's schedule, placed as early as their
dependencies allow.

Per micro-batch times come from the estimate: F = forward_s / m and B = (backward_s +
recompute_s) / m of the slowest stage (step.compose: the step is m × the slowest stage's work plus
the bubble), split evenly over the v model chunks; every stage is drawn with the slowest stage's
times and point-to-point time is left out, so the drawn bubble is (p − 1)·(F + B)/v, the
estimator's T − S (GPipe, 1F1B) and (T − S)/v (interleaved) for equal stages
(step/schedules.py, Narayanan et al. 2021 §2.2). Orders: GPipe all forwards then all backwards;
1F1B p − s − 1 warm-up forwards on stage s then one forward / one backward (Narayanan et al. 2021
§2.2.1); interleaved Megatron-LM's order of chunks (``forward_backward_pipelining_with_interleaving``,
core_v0.14.0: warm-up (p − s − 1)·2 + (v − 1)·p, micro-batches taken p at a time per chunk).
ZB-H1 and DualPipe are drawn in the 1F1B order (marked ``approximate``): their split backward is
priced by the estimator's formula (``bubble_s`` beside the drawing), not drawn.
"""

from __future__ import annotations

from paraplan.specs.plan import PlanSpec

MAX_OPS = (
    4096  # forward + backward passes drawn (a larger schedule is drawn for its first micro-batches)
)


def _orders(schedule: str, pp: int, v: int, m: int) -> list[list[tuple[str, int, int]]]:
    """Per stage, its passes in order: (kind "F" | "B", micro-batch, chunk)."""
    orders = []
    for s in range(pp):
        if schedule == "gpipe":
            order = [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
        elif schedule == "interleaved" and v > 1 and m % pp == 0:
            total = m * v
            warm = min((pp - s - 1) * 2 + (v - 1) * pp, total)

            def ident(k: int, backward: bool) -> tuple[int, int]:
                chunk = (k // pp) % v
                return (k // (pp * v)) * pp + k % pp, (v - 1 - chunk if backward else chunk)

            order = [("F", *ident(k, False)) for k in range(warm)]
            for k in range(total - warm):
                order += [("F", *ident(warm + k, False)), ("B", *ident(k, True))]
            order += [("B", *ident(k, True)) for k in range(total - warm, total)]
        else:
            warm = min(pp - s - 1, m)
            order = [("F", i, 0) for i in range(warm)]
            for i in range(m - warm):
                order += [("F", warm + i, 0), ("B", i, 0)]
            order += [("B", i, 0) for i in range(m - warm, m)]
        orders.append(order)
    return orders


def _place(orders, pp: int, v: int, f: float, b: float) -> list[dict]:
    """Start each pass when its stage is free and its input is there: F of virtual stage c·p + s
    after F of the one before; B after B of the one after (after its own F on the last)."""
    ends: dict[tuple, float] = {}
    free = [0.0] * pp
    nxt = [0] * pp
    bars = []
    last = pp * v - 1
    progressed = True
    while progressed:
        progressed = False
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                kind, mb, chunk = orders[s][nxt[s]]
                vs = chunk * pp + s
                need = ("F", mb, vs - 1) if kind == "F" else ("B", mb, vs + 1)
                if kind == "F" and vs == 0:
                    need = None
                if kind == "B" and vs == last:
                    need = ("F", mb, vs)
                if need is not None and need not in ends:
                    break
                start = max(free[s], ends[need] if need else 0.0)
                end = start + (f if kind == "F" else b) / v
                ends[(kind, mb, vs)] = end
                free[s] = end
                bars.append({"stage": s, "kind": kind, "mb": mb, "chunk": chunk})
                bars[-1].update(start=start, end=end)
                nxt[s] += 1
                progressed = True
    return bars


def timeline(plan: PlanSpec | dict, breakdown: dict) -> dict:
    """The drawing of ``plan``'s schedule (module doc): ``bars`` (stage, kind, mb, chunk, start,
    end in seconds), the drawn and the estimator's bubble, and whether the drawing is approximate.
    Micro-batches and the schedule are the plan's own (PlanSpec.microbatches, .pipeline_schedule)."""
    spec = plan if isinstance(plan, PlanSpec) else PlanSpec.model_validate(plan)
    pp, v, m, schedule = spec.pp, spec.vpp, max(spec.microbatches, 1), spec.pipeline_schedule
    f = breakdown["forward_s"] / m
    b = (breakdown["backward_s"] + breakdown["recompute_s"]) / m
    shown = m
    while shown > pp and 2 * shown * v * pp > MAX_OPS:
        shown = max(pp, (shown // 2) // pp * pp or pp)
    bars = _place(_orders(schedule, pp, v, shown), pp, v, f, b)
    busy = shown * (f + b)
    span = max((bar["end"] for bar in bars), default=0.0)
    return {
        "schedule": schedule,
        "pp": pp,
        "vpp": v,
        "microbatches": m,
        "microbatches_drawn": shown,
        "forward_s": f,
        "backward_s": b,
        "bars": bars,
        "drawn_bubble_s": max(0.0, span - busy),  # rounding leaves -1e-16 when none
        "bubble_s": breakdown["bubble_s"],
        "approximate": schedule in ("zb-h1", "dualpipe")
        or (schedule == "interleaved" and m % pp != 0),
    }
