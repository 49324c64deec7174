"""Check the pipeline composition of non-uniform plans against an event simulation of DeepSpeed's 1F1B
schedule (the runtime AMP's trials ran).

The composition (step.compose.compose_step, step/schedules.py) prices a pipeline of stages with
per-micro-batch work W_i = F_i + B_i as m·max W + Σ W − max W, the form AMP's and Aceso's cost models
also use. This script replays the instruction stream of DeepSpeed's TrainSchedule (DachengLi1/AMP @ 72eeea4,
DeepSpeed/deepspeed/runtime/pipe/schedule.py, TrainSchedule.steps: even and odd stages alternate forward
and backward steps in opposite phase; a forward step receives its activation and then sends the previous
step's input gradient, a backward step sends the previous step's activation and then receives its output
gradient) with each send a rendezvous with the neighbour's matching receive (p2p.py: a blocking broadcast
in a 2-rank group), on the stage times of the per-stage estimator, and compares the two:

1. on AMP's 90 timed trials (F_i, B_i from step.per_stage.stage_cost; exposed TP split by the F:B
   ratio, point-to-point time split evenly), and
2. on random pipelines (2-8 stages, 1-32 micro-batches, W_i spread 3x, B_i = 2 F_i or 3 F_i: full
   recomputation on some stages), by where the slowest stage sits; and, on the same pipelines,
   Megatron-LM's 1F1B dependency graph (non-blocking transfers) against DeepSpeed's stream.

    python benchmarks/pipeline_schedule_check.py [--markdown]     (~10 s)
"""

from __future__ import annotations

import random
import sys

from _table import print_table

from paraplan.step.per_stage import common_of, model_blocks, stage_cost, stage_settings
from paraplan.step.schedules import bubble_from_work_s
from paraplan.specs.stage_plan import stage_block_ranges
from paraplan.validate.hetero import load_hetero_cases

# a send's matching receive: (neighbour offset, instruction)
_MATCH = {
    "send_act": (1, "recv_act"),
    "recv_act": (-1, "send_act"),
    "send_grad": (-1, "recv_grad"),
    "recv_grad": (1, "send_grad"),
}


def _step_work(stage: int, stages: int, step: int) -> tuple[int, bool]:
    """(micro-batch, is forward) stage ``stage`` works on at schedule step ``step``: forward on steps of the
    stage's parity, backward on the others; the micro-batch index lags by the stage's depth."""
    if step % 2 == stage % 2:
        return (step - stage % 2) // 2 - stage // 2, True
    if step % 2 == 0:
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def instructions(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The stage's instruction stream for one batch: (kind, micro-batch), kind in F, B and the four transfers."""
    out: list[tuple[str, int]] = []
    prev = -1
    ok = lambda k: 0 <= k < microbatches  # noqa: E731
    for step in range(2 * (microbatches + stages - 1)):
        k, forward = _step_work(stage, stages, step)
        if forward and stage > 0:
            out += [("recv_act", k)] * ok(k) + [("send_grad", prev)] * ok(prev)
        if not forward and stage < stages - 1:
            out += [("send_act", prev)] * ok(prev) + [("recv_grad", k)] * ok(k)
        if ok(k):
            out.append(("F" if forward else "B", k))
        prev = k
    return out


def _replay(streams: list[list[tuple[str, int]]], advance) -> float:
    """Run every stage's instruction stream in order until all are done: ``advance(i, instruction, at, clock)``
    executes stage i's next instruction (moving ``at`` / ``clock``, also a partner's) and returns False when it must
    wait; the makespan is the latest clock."""
    n = len(streams)
    at, clock = [0] * n, [0.0] * n
    while any(at[i] < len(streams[i]) for i in range(n)):
        moved = False
        for i in range(n):
            while at[i] < len(streams[i]) and advance(i, streams[i][at[i]], at, clock):
                moved = True
        if not moved:
            raise RuntimeError("the instruction streams deadlock")
    return max(clock)


def simulate(forward_s: list[float], backward_s: list[float], microbatches: int) -> float:
    """Makespan of one batch: every stage runs its instructions in order, a transfer waits for its partner."""
    n = len(forward_s)
    streams = [instructions(i, n, microbatches) for i in range(n)]

    def advance(i: int, instruction: tuple[str, int], at: list[int], clock: list[float]) -> bool:
        kind, k = instruction
        if kind in ("F", "B"):
            clock[i] += forward_s[i] if kind == "F" else backward_s[i]
        else:
            offset, want = _MATCH[kind]
            j = i + offset
            if at[j] >= len(streams[j]) or streams[j][at[j]] != (want, k):
                return False
            clock[i] = clock[j] = max(clock[i], clock[j])
            at[j] += 1
        at[i] += 1
        return True

    return _replay(streams, advance)


def one_f_one_b_makespan(
    forward_s: list[float], backward_s: list[float], microbatches: int
) -> float:
    """Makespan of Megatron-LM's non-interleaved 1F1B (non-blocking transfers): stage s runs min(pp − s − 1, m)
    warm-up forwards, then forward / backward pairs, then the remaining backwards; F(s, k) waits for F(s − 1, k),
    B(s, k) for B(s + 1, k) (the last stage's for its own F): the longest path of that graph."""
    n = len(forward_s)
    streams = []
    for s in range(n):
        warm = min(n - s - 1, microbatches)
        order = [("F", k) for k in range(warm)]
        for k in range(microbatches - warm):
            order += [("F", warm + k), ("B", k)]
        streams.append(order + [("B", k) for k in range(microbatches - warm, microbatches)])
    done: dict[tuple[str, int, int], float] = {}

    def advance(s: int, instruction: tuple[str, int], at: list[int], clock: list[float]) -> bool:
        kind, k = instruction
        if kind == "F":
            dep = ("F", s - 1, k) if s > 0 else None
        else:
            dep = ("B", s + 1, k) if s < n - 1 else ("F", s, k)
        if dep is not None and dep not in done:
            return False
        clock[s] = max(clock[s], done[dep] if dep else 0.0) + (
            forward_s[s] if kind == "F" else backward_s[s]
        )
        done[(kind, s, k)] = clock[s]
        at[s] += 1
        return True

    return _replay(streams, advance)


def composed(forward_s: list[float], backward_s: list[float], microbatches: int) -> float:
    """The composition's pipeline time: m·max W + the bubble of step.schedules.bubble_from_work_s (1F1B, v = 1)."""
    work = [f + b for f, b in zip(forward_s, backward_s)]
    return microbatches * max(work) + bubble_from_work_s(sum(work), max(work), 1)


def amp_rows() -> list[tuple[str, ...]]:
    gaps: dict[str, list[float]] = {}
    for case in load_hetero_cases():
        if not case.measured:
            continue
        plan, n = case.plan, case.plan.pp
        common, settings = common_of(plan), stage_settings(plan, case.cluster)
        ranges = stage_block_ranges(plan, len(model_blocks(case.model)))
        fwd, bwd = [], []
        for i, (st, (a, b)) in enumerate(zip(settings, ranges)):
            c = stage_cost(
                case.model,
                case.cluster,
                common,
                st,
                a,
                b,
                settings[i - 1] if i else None,
                settings[i + 1] if i + 1 < n else None,
            )
            tp_forward = c.tp_comm_s * c.forward_s / (c.forward_s + c.backward_s)
            fwd.append(c.forward_s + tp_forward + c.pp_comm_s / 2)
            bwd.append(c.backward_s + c.recompute_s + c.tp_comm_s - tp_forward + c.pp_comm_s / 2)
        sim = simulate(fwd, bwd, plan.microbatches)
        gaps.setdefault(case.group, []).append(
            100 * (composed(fwd, bwd, plan.microbatches) / sim - 1)
        )
    return [
        (
            f"AMP trials, {g}",
            str(len(v)),
            f"{max(v):+.2f}",
            f"{sum(v) / len(v):+.2f}",
            f"{min(v):+.2f}",
        )
        for g, v in gaps.items()
    ]


def random_rows(trials: int = 3000) -> list[tuple[str, ...]]:
    rng = random.Random(1)
    gaps: dict[str, list[float]] = {"slowest stage last": [], "slowest stage earlier": []}
    engines: list[float] = []
    for _ in range(trials):
        n, m = rng.choice([2, 3, 4, 5, 8]), rng.choice([1, 2, 3, 4, 8, 16, 32])
        fwd = [rng.uniform(0.5, 1.5) for _ in range(n)]
        bwd = [f * rng.choice([2.0, 3.0]) for f in fwd]
        work = [f + b for f, b in zip(fwd, bwd)]
        key = "slowest stage last" if work.index(max(work)) == n - 1 else "slowest stage earlier"
        deepspeed = simulate(fwd, bwd, m)
        gaps[key].append(100 * (composed(fwd, bwd, m) / deepspeed - 1))
        engines.append(100 * (one_f_one_b_makespan(fwd, bwd, m) / deepspeed - 1))
    rows = [
        (
            f"random pipelines, {k}",
            str(len(v)),
            f"{max(v):+.2f}",
            f"{sum(v) / len(v):+.2f}",
            f"{min(v):+.2f}",
        )
        for k, v in gaps.items()
    ]
    return rows + [
        (
            "random pipelines: Megatron 1F1B graph vs DeepSpeed (not the composition)",
            str(len(engines)),
            f"{max(engines):+.2f}",
            f"{sum(engines) / len(engines):+.2f}",
            f"{min(engines):+.2f}",
        )
    ]


def main() -> None:
    print_table(
        ("pipelines", "count", "composed vs simulated, max %", "mean %", "min %"),
        amp_rows() + random_rows(),
        "--markdown" in sys.argv,
    )


if __name__ == "__main__":
    main()
