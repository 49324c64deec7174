"""Pipeline schedules, one entry each in :data:`SCHEDULES`: the exact bubble the step composition
adds, the micro-batches whose activations a stage holds at its peak, the copies of its weights, and
the admissible bubble floor the search bounds with.

Notation: p stages, m micro-batches, v model chunks per GPU, W_i the per-micro-batch work of stage
i (forward + backward + exposed communication, step.inputs.stage_work), S = max_i W_i, T = Σ_i W_i.
The split-backward schedules use the slowest stage's F (forward window), B (backward, recompute
included) and W (the weight-gradient GEMMs, half of the backward GEMM time: the two backward GEMMs of
a linear layer have equal FLOPs, Narayanan et al. 2021 §5.1), F&B the time of a forward and a
backward chunk run overlapped (F + B: nothing overlapped).

Sources: 1F1B and interleaved 1F1B, Narayanan et al. 2021 §2.2 (and Korthikanti et al. 2022 §4.3 for
the interleaved warm-up); GPipe, Huang et al. 2019; ZB-H1, Qi et al. 2023, arXiv:2401.10241 §3.1;
DualPipe, the DeepSeek-V3 technical report, arXiv:2412.19437 §3.2.1 Table 2. Each entry's formulas
and source in a table: ``markdown_table()`` (docs/architecture.md prints it).
With unequal stages the slowest stage sets the steady state and the fill and drain pass once through
every other stage: T − S replaces (p − 1)·W (``bubble_from_work_s``).

A new schedule is one entry of SCHEDULES (its functions below it, each with its source). Around the
entry: its name in specs.plan.Schedule (the plan field) and its plan rules in specs.rules_schedule.SCHEDULE_RULES
(``PipelineSchedule.rules``: vpp, micro-batch counts), the GridKnobs flag the entry
names, and its options in search.space.schedule_options; tests/unit/test_schedules.py checks that
these agree with the registry and that the table of docs/architecture.md is ``markdown_table()``.
Every function works on floats and on numpy arrays (one element per candidate plan), except the
instruction orders (``order``: each stage's passes in the order it runs them, plain integers:
step/schedule_orders.py), which the plan explorer's timeline places in time (web/timeline.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Callable, NamedTuple

from paraplan.cost.elementwise import any_true, is_array, maximum, minimum, where
from paraplan.specs.rules_schedule import SCHEDULE_RULES, ScheduleRules
from paraplan.step.block_terms import unpaired_passes_s
from paraplan.step.dualpipe import overlapped_pairs
from paraplan.step.inputs import backward_s, forward_s
from paraplan.step.schedule_orders import (  # noqa: F401 (route_*: re-exported for the timeline)
    Pass,
    dualpipe_order,
    dualpipe_pairs,
    gpipe_order,
    interleaved_order,
    interleaved_warmup,
    one_f_one_b_order,
    one_f_one_b_warmup,
    route_length,
    route_position,
    zb_h1_order,
)

Num = Any  # float or numpy array, broadcastable


class PipelineWork(NamedTuple):
    """What a schedule's bubble reads: T, S, p, v, and the slowest stage's parts and W."""

    total_s: Num  # T = Σ_i W_i over every stage (count × work of each Stage entry)
    slowest_s: Num  # S = max_i W_i
    pp: Num
    vpp: Num  # model chunks per GPU (the interleaved schedule's v)
    slowest_parts: dict  # the slowest stage's per-micro-batch parts (step.inputs.stage_work)
    wgrad_s: Num  # its weight-gradient seconds W (BlockTerms.wgrad summed)
    microbatches: Num  # m, micro-batches per step (ZB-H1's deferred W passes, ``zb_h1_w_credit``)
    # every stage's (parts, W, present, F&B); the split-backward bubbles take the largest over them
    # and the slowest stage (``_over_stages``); () for the slowest stage alone
    stages: tuple = ()
    # the slowest stage's overlapped forward-backward pair F&B (step.dualpipe.overlapped_pair_s);
    # None: its F + B, nothing overlapped
    pair_s: Num = None


@dataclass(frozen=True)
class Bubble:
    """A schedule's bubble: its exact price, the floor of it the search may use (admissible: never
    above ``exact_s`` of any candidate), and both as the table writes them."""

    exact_s: Callable[[PipelineWork], Num]
    # (v, pp, S0, T0, ρ) → floor of the bubble at floors S0 <= S, T0 <= T (search/bounds/blocks.py:
    # ρ bounds the backward-GEMM share of F + B); None where ``stage_floor_s`` gives the floors
    floor_s: Callable[..., Num] | None
    formula: str  # for the table (``markdown_table``)
    floor_formula: str
    # (m, pp, S0_i, K0_i, ρ) → floors of (steady state, bubble) read from one stage i, for a schedule
    # whose steady state is not m·S (DualPipe's overlapped pairs): S0_i a floor of the stage's work,
    # K0_i of what its pair cannot hide (search.bounds.step_floors.LayerFloors.kept); the step is at
    # least the largest steady floor over the stages + the largest bubble floor. None: m·S0 + ``floor_s``
    stage_floor_s: Callable[..., tuple] | None = None
    steady_floor_formula: str = "m·S0"


@dataclass(frozen=True)
class InFlight:
    """Micro-batches whose activations a stage holds at its peak, and the formula the table writes."""

    count: Callable[[Num, Num, Num, Num], Num]  # (pp, vpp, microbatches, stage) → micro-batches
    formula: str


@dataclass(frozen=True)
class PipelineSchedule:
    """One pipeline schedule: how it prices the bubble (``Bubble``, with the floor the search uses),
    holds activations (``InFlight``) and weights. Schedules that share a rule share its value."""

    name: str  # specs.plan.Schedule value
    flag: str | None  # the GridKnobs field that selects it; None for the default (1F1B)
    bubble: Bubble
    in_flight: InFlight
    # (pp, vpp, microbatches, stage) → the stage's passes in the order it runs them (``Pass``)
    order: Callable[[int, int, int, int], list]
    source: str
    weight_copies: float = 1.0  # copies of a stage's parameters (and gradients) a GPU holds
    # splits the backward into B_in and W (the search's cheap bound drops its bubble)
    split_backward: bool = False
    # routes micro-batches take through the stages: 1, or 2 for DualPipe (``route_position``)
    directions: int = 1
    # (pp, vpp, microbatches, stage) → where in ``order`` its overlapped forward-backward pairs start
    # (an F, B and W run as one: DualPipe's ``dualpipe_pairs``); None: no pairs
    pairs: Callable[[int, int, int, int], list] | None = None

    @property
    def rules(self) -> ScheduleRules:
        """Its plan rules (vpp > 1 or not, the micro-batch counts it runs): its entry of
        specs.rules_schedule.SCHEDULE_RULES (specs, below step, holds them for the plan checks)."""
        return SCHEDULE_RULES[self.name]


# ---- bubbles ------------------------------------------------------------------------------------


def bubble_from_work_s(total_work_s, slowest_work_s, chunks_per_gpu):
    """(Σ_i W_i − max_i W_i) / v: (p−1)·W for equal stages (GPipe, 1F1B; Narayanan et al. 2021 §2.2.1,
    bubble fraction (p−1)/m), ÷v for the interleaved schedule (§2.2.2, (p−1)/(v·m)); with unequal
    stages the fill and drain pass once through every other stage while the slowest one sets the
    steady state ((m−1)·W_max + Σ_i W_i for 1F1B)."""
    return (total_work_s - slowest_work_s) / chunks_per_gpu


def zb_h1_bubble_share(forward_s, backward_s, wgrad_s, credit=2.0):
    """(F + B − credit·W) / (F + B): ZB-H1's bubble relative to 1F1B's (Qi et al. 2023,
    arXiv:2401.10241, §3.1, Fig. 3: (p−1)·(F + B_in − W) with B_in = B − W, credit 2 with enough
    micro-batches, ``zb_h1_w_credit``); 1/3 when B = 2F and W = F."""
    return maximum(forward_s + backward_s - credit * wgrad_s, 0.0) / maximum(
        forward_s + backward_s, 1e-30
    )


def zb_h1_w_credit(pp, microbatches):
    """W passes per pipeline stage ZB-H1 takes off the 1F1B bubble, 1 + min(m − 1, p − 1)/(p − 1).

    One: W leaves the chain of input-gradient passes B_in that runs back through the stages (exact
    for m = 1: 1F1B takes p·(F + B_in + W), ZB-H1 p·(F + B_in) + W, (p−1)·W less). The second:
    the deferred W passes fill the cool-down's idle slots (Qi et al. 2023 §3.1, Fig. 3:
    (p−1)·(F + B_in − W), two W per stage with m >= p), one slot per micro-batch after the
    first; with fewer micro-batches than stages, fewer W passes are there to defer (our
    interpolation between the two exact ends)."""
    slots = maximum(pp - 1.0, 1.0)
    return 1.0 + minimum(maximum(microbatches - 1.0, 0.0), slots) / slots


def dualpipe_bubble_s(pp, forward_s, backward_s, wgrad_s, overlapped_pair_s=None):
    """DualPipe bubble (p/2 − 1)·(F&B + B − 3W) (DeepSeek-V3 report, arXiv:2412.19437, §3.2.1,
    Table 2) for one chunk's F, B, W; F&B the chunk pair run overlapped (step.dualpipe.overlapped_pair_s),
    default F + B (nothing overlapped)."""
    pair = forward_s + backward_s if overlapped_pair_s is None else overlapped_pair_s
    return maximum(pp / 2.0 - 1.0, 0.0) * maximum(pair + backward_s - 3.0 * wgrad_s, 0.0)


def _one_f_one_b_bubble_s(work: PipelineWork) -> Num:
    """GPipe and 1F1B: T − S (bubble_from_work_s with v = 1)."""
    return bubble_from_work_s(work.total_s, work.slowest_s, 1)


def _interleaved_bubble_s(work: PipelineWork) -> Num:
    """Interleaved 1F1B: (T − S)/v (bubble_from_work_s)."""
    return bubble_from_work_s(work.total_s, work.slowest_s, work.vpp)


def _over_stages(work: PipelineWork, value: Callable[..., Num]) -> Num:
    """The largest ``value(parts, W, F&B)`` over the slowest stage and every present stage of ``work``.
    The split-backward bubbles read one stage's F, B and W; the largest over the stages, not the
    slowest stage's alone, keeps the bubble continuous when another stage becomes the slowest (a
    faster link or HBM must not move the step time up by switching stages) and is >= the slowest
    stage's (the search's floors stay admissible)."""
    out = value(work.slowest_parts, work.wgrad_s, work.pair_s)
    for parts, wgrad, present, *pair in work.stages:
        out = maximum(out, where(present, value(parts, wgrad, *(pair or [None])), out))
    return out


def _zb_h1_bubble_s(work: PipelineWork) -> Num:
    """ZB-H1: the 1F1B bubble T − S times (F + B − c·W)/(F + B), c the W credit (``zb_h1_w_credit``:
    2 with m >= p; Qi et al. 2023 §3.1), the largest over the stages (``_over_stages``; with
    unequal stages the other stages' work scales alike)."""
    credit = zb_h1_w_credit(work.pp, work.microbatches)
    share = _over_stages(
        work,
        lambda parts, wgrad, _: zb_h1_bubble_share(
            forward_s(parts), backward_s(parts), wgrad, credit
        ),
    )
    return _one_f_one_b_bubble_s(work) * share


def _dualpipe_bubble_s(work: PipelineWork) -> Num:
    """DualPipe: (p/2 − 1)·(F&B + B − 3W), a chunk a whole stage (rank i runs stage i one way and
    stage p − 1 − i the other: deepseek-ai/DualPipe's example builds each rank's two modules so), F&B
    the stage's overlapped pair (step.dualpipe.overlapped_pair_s; DeepSeek-V3 Table 2); the largest
    over the stages (``_over_stages``)."""
    return _over_stages(
        work,
        lambda parts, wgrad, pair: dualpipe_bubble_s(
            work.pp, forward_s(parts), backward_s(parts), wgrad, pair
        ),
    )


# ---- activations in flight ----------------------------------------------------------------------


def one_f_one_b_in_flight(pp, vpp, microbatches, stage):
    """1F1B and ZB-H1: stage i holds min(p − i, m) micro-batches at its peak (Narayanan et al. 2021
    §2.2.1: p − i − 1 warm-up forwards, one_f_one_b_warmup, and the steady state's one; Qi et al. 2023
    §3.1: ZB-H1 keeps 1F1B's peak)."""
    return minimum(one_f_one_b_warmup(pp, stage) + 1, microbatches)


def _gpipe_in_flight(pp, vpp, microbatches, stage):
    """GPipe: every micro-batch's forward runs before the first backward, m (Huang et al. 2019 §2.3)."""
    return microbatches


def _interleaved_in_flight(pp, vpp, microbatches, stage):
    """Interleaved 1F1B, in units of a whole stage: Megatron-LM's warm-up of 2·(p − i − 1) + (v − 1)·p + 1
    model chunks of 1/v stage each (num_warmup_microbatches, interleaved_warmup, + the one in
    its steady state), capped at m·v; on stage 0, p·(1 + (p − 1)/(p·v)) (Korthikanti et al. 2022 §4.3)."""
    return minimum(interleaved_warmup(pp, vpp, stage) + 1, microbatches * vpp) / vpp


def _dualpipe_in_flight(pp, vpp, microbatches, stage):
    """DualPipe: p + 1 micro-batches on every stage (DeepSeek-V3 Table 2, activations (p + 1)×), at most m."""
    return minimum(pp + 1, microbatches)


def least_in_flight_microbatches(pp, microbatches, stage):
    """A floor of every schedule's in-flight micro-batches on stage i: min(p − i, m), 1F1B's count.
    ZB-H1 keeps as many, GPipe m, DualPipe min(p + 1, m), and interleaved (2(p − i − 1) + (v − 1)·p + 1)/v
    >= p − i for v >= 2 (capped at m); tests/unit/test_schedules.py checks every entry against it."""
    return one_f_one_b_in_flight(pp, 1, microbatches, stage)


def schedule_order(schedule: str, pp: int, vpp: int, microbatches: int) -> list[list[Pass]]:
    """Every stage's passes in the order it runs them under ``schedule`` (its entry's ``order``)."""
    entry = SCHEDULES[schedule]
    return [entry.order(pp, vpp, microbatches, s) for s in range(pp)]


def schedule_pairs(schedule: str, pp: int, vpp: int, microbatches: int) -> list[list[int]]:
    """Per stage, where in its ``schedule_order`` the overlapped forward-backward pairs start (the
    entry's ``pairs``; none for a schedule without them)."""
    entry = SCHEDULES[schedule]
    if entry.pairs is None:
        return [[] for _ in range(pp)]
    return [entry.pairs(pp, vpp, microbatches, s) for s in range(pp)]


# ---- the search's floors --------------------------------------------------------------------------


def _one_f_one_b_floor_s(v, pp, slowest, total, rho):
    """GPipe and 1F1B: T0 − S0 (the bubble T − S grows with both)."""
    return total - slowest


def _interleaved_floor_s(v, pp, slowest, total, rho):
    """Interleaved with v chunks: (T0 − S0)/v."""
    return (total - slowest) / v


def _zb_h1_floor_s(v, pp, slowest, total, rho):
    """W <= ρ·(F + B)/2 and c <= 2, so the share (F + B − c·W)/(F + B) >= 1 − ρ."""
    return (1.0 - rho) * (total - slowest)


def _dualpipe_stage_floor_s(m, pp, work, kept, rho):
    """Floors of DualPipe's steady state m·S − n·(S − F&B) = (m − n)·S + n·F&B (n = max(m − p − 1, 0),
    step.dualpipe.overlapped_pairs) and of its bubble (p/2 − 1)·max(F&B + B − 3W, 0), read from one stage
    whose work S >= ``work`` = S0 and whose pair F&B >= ``kept`` = K0. step.dualpipe.overlapped_pair_s gives
    F&B = max(C/s, E + P) + X >= C/s + X (C the compute of both chunks, s <= 1 the SM share, X the exposed
    TP / CP parts: K0 a floor of that, search.bounds.step_floors.LayerFloors.kept) and, with the EP terms a
    pair hides at least those the stage exposes (E >= its ep parts), F&B >= (C + E + P + 2X)/2 >= S/2, so
        steady >= (m − n)·S0 + n·max(K0, S0/2).
    The backward B holds the backward compute, >= its GEMMs' = 2W (W = Σ gemm_backward/2, BlockTerms.wgrad),
    and W <= ρ'·C/2 with ρ' = min(ρ, 1) the largest backward-GEMM share of compute (C <= F + B <= S and
    C <= K), so F&B + B − 3W >= F&B − W >= max(K0·(1 − ρ'/2), S0·(1 − ρ')/2), and
        bubble >= (p/2 − 1)·max(K0·(1 − ρ'/2), S0·(1 − ρ')/2).
    Floats or arrays over blocks (the same operations in the same order)."""
    n = overlapped_pairs(pp, m)
    steady = (m - n) * work + n * maximum(kept, work / 2.0)
    share = minimum(rho, 1.0)
    core = maximum(kept * (1.0 - share / 2.0), work * (1.0 - share) / 2.0)
    return steady, maximum(pp / 2.0 - 1.0, 0.0) * core


# ---- the registry -------------------------------------------------------------------------------

_NARAYANAN = "Narayanan et al. 2021 §2.2.1"
# the rules more than one schedule shares: GPipe prices 1F1B's bubble, ZB-H1 holds 1F1B's activations
_ONE_F_ONE_B_BUBBLE = Bubble(_one_f_one_b_bubble_s, _one_f_one_b_floor_s, "T − S", "T0 − S0")
_ONE_F_ONE_B_IN_FLIGHT = InFlight(one_f_one_b_in_flight, "min(p − i, m)")
SCHEDULES: MappingProxyType[str, PipelineSchedule] = MappingProxyType(
    {
        s.name: s
        for s in (
            PipelineSchedule(
                name="1f1b",
                flag=None,
                bubble=_ONE_F_ONE_B_BUBBLE,
                in_flight=_ONE_F_ONE_B_IN_FLIGHT,
                order=one_f_one_b_order,
                source=_NARAYANAN,
            ),
            PipelineSchedule(
                name="interleaved",
                flag="interleaved",
                bubble=Bubble(
                    _interleaved_bubble_s, _interleaved_floor_s, "(T − S)/v", "(T0 − S0)/v"
                ),
                in_flight=InFlight(
                    _interleaved_in_flight, "min(2(p − i − 1) + (v − 1)·p + 1, m·v)/v"
                ),
                order=interleaved_order,
                source="Narayanan et al. 2021 §2.2.2; Korthikanti et al. 2022 §4.3",
            ),
            PipelineSchedule(
                name="gpipe",
                flag="gpipe",
                bubble=_ONE_F_ONE_B_BUBBLE,
                in_flight=InFlight(_gpipe_in_flight, "m"),
                order=gpipe_order,
                source="Huang et al. 2019 §2.3; " + _NARAYANAN,
            ),
            PipelineSchedule(
                name="zb-h1",
                flag="zb",
                bubble=Bubble(
                    _zb_h1_bubble_s,
                    _zb_h1_floor_s,
                    "(T − S)·(F + B − c·W)/(F + B), c = 1 + min(m − 1, p − 1)/(p − 1)",
                    "(1 − ρ)·(T0 − S0)",
                ),
                in_flight=_ONE_F_ONE_B_IN_FLIGHT,
                order=zb_h1_order,
                source="Qi et al. 2023, arXiv:2401.10241 §3.1",
                split_backward=True,
            ),
            PipelineSchedule(
                name="dualpipe",
                flag="dualpipe",
                bubble=Bubble(
                    _dualpipe_bubble_s,
                    None,
                    "(p/2 − 1)·(F&B + B − 3W), F&B the overlapped pair; steady state "
                    "m·S − (m − p − 1)·(S − F&B)",
                    "(p/2 − 1)·max(K0ᵢ·(1 − ρ'/2), S0ᵢ·(1 − ρ')/2), each the largest over the stages i "
                    "(K0ᵢ <= the pair's C/s + X, ρ' = min(ρ, 1))",
                    _dualpipe_stage_floor_s,
                    "(m − n)·S0ᵢ + n·max(K0ᵢ, S0ᵢ/2), n = max(m − p − 1, 0)",
                ),
                in_flight=InFlight(_dualpipe_in_flight, "min(p + 1, m)"),
                order=dualpipe_order,
                source="DeepSeek-V3 report, arXiv:2412.19437 §3.2.1 Table 2",
                weight_copies=2.0,
                split_backward=True,
                directions=2,
                pairs=dualpipe_pairs,
            ),
        )
    }
)
DEFAULT_SCHEDULE = SCHEDULES["1f1b"]
# the GridKnobs flag each schedule other than the default sets, in specs.plan.Schedule's order
SCHEDULE_FLAGS: dict[str, str] = {s.name: s.flag for s in SCHEDULES.values() if s.flag}
SPLIT_BACKWARD_SCHEDULES: tuple[str, ...] = tuple(
    s.name for s in SCHEDULES.values() if s.split_backward
)


_schedule_flags = attrgetter(*SCHEDULE_FLAGS.values())  # GridKnobs -> its schedule flags, in order


def schedule_flags(schedule: str) -> dict[str, bool]:
    """The GridKnobs schedule flags of one plan running ``schedule``: its entry's flag True, every other
    False (none set for the default, 1F1B); what a uniform plan (step.estimate.grid_knobs) and a per-stage
    plan (step.per_stage.stage_arrays) both state."""
    return {flag: schedule == name for name, flag in SCHEDULE_FLAGS.items()}


@cache
def _chosen_schedule(*flags: bool) -> PipelineSchedule:
    """The entry one plan's scalar schedule flags (SCHEDULE_FLAGS order) select: the last one set, else the
    default (a handful of bool tuples: kept)."""
    chosen = DEFAULT_SCHEDULE
    for name, on in zip(SCHEDULE_FLAGS, flags):
        if on:
            chosen = SCHEDULES[name]
    return chosen


def by_schedule(knobs, value: Callable[[PipelineSchedule], Num]) -> Num:
    """``value(entry)`` of the schedule the GridKnobs flags select, elementwise (the flags of one
    candidate are exclusive; none set: the default). An entry no candidate runs is not evaluated;
    with scalar flags (one plan) only the plan's own entry is."""
    flags = _schedule_flags(knobs)
    if not any(map(is_array, flags)):
        return value(_chosen_schedule(*map(bool, flags)))
    out = value(DEFAULT_SCHEDULE)
    for name, flag in SCHEDULE_FLAGS.items():
        on = getattr(knobs, flag)
        if any_true(on):
            out = where(on, value(SCHEDULES[name]), out)
    return out


def pipeline_bubble_s(knobs, work: PipelineWork) -> Num:
    """The bubble of each candidate's schedule (its entry's ``bubble.exact_s``)."""
    return by_schedule(knobs, lambda s: s.bubble.exact_s(work))


def in_flight_microbatches(knobs, pp, microbatches, stage) -> Num:
    """Micro-batches (in units of a whole stage's layers) whose activations stage ``stage`` holds at
    its peak under each candidate's schedule (its entry's ``in_flight.count``, with the knobs' vpp)."""
    return by_schedule(knobs, lambda s: s.in_flight.count(pp, knobs.vpp, microbatches, stage))


def split_backward_on(knobs) -> Num:
    """Whether each candidate's schedule splits the backward into B and deferred W passes
    (``split_backward``); Python False when no candidate's does."""
    return by_schedule(knobs, lambda s: s.split_backward)


def weight_copies(knobs) -> Num:
    """Copies of a stage's parameters (and gradients) each candidate's schedule keeps."""
    return by_schedule(knobs, lambda s: s.weight_copies)


def schedule_step_floor(
    schedule: str, v: int, m: int, pp: int, slowest, total, rho, stages=None, unpaired=None
):
    """A floor of m·S + bubble at floors S0 = ``slowest``, T0 = ``total`` of the slowest stage's and all
    stages' work (each form growing with S and T, search/bounds/blocks.py): m·S0 + ``bubble.floor_s``, plus
    the A2A overlap's unpaired passes at ``unpaired`` (None: 0), a floor of what they add with S at least S0
    (step.block_terms.unpaired_passes_s: at pp 1; search.bounds.step_floors.unpaired_floor_s); for a
    schedule with stage floors (``bubble.stage_floor_s``: DualPipe) the largest over the stages of its steady
    and bubble floors, ``stages`` = (largest steady floor, largest bubble floor) when the caller has them
    (search.bounds.step_floors.paired_stage_floors), else the slowest stage's at K0 = 0 (a floor of the
    stage's steady state the step takes at least). Floats or arrays over blocks."""
    bubble = SCHEDULES[schedule].bubble
    if bubble.stage_floor_s is None:
        step = m * slowest + bubble.floor_s(v, pp, slowest, total, rho)
        return step if unpaired is None else step + unpaired_passes_s(pp, unpaired)
    if stages is None:
        stages = bubble.stage_floor_s(m, pp, slowest, 0.0, rho)
    return stages[0] + stages[1]


def markdown_table() -> str:
    """The schedules as docs/architecture.md lists them, one row per entry."""
    rows = [
        "| schedule | bubble | in flight on stage i | weight copies | search floor | source |",
        "|---|---|---|---|---|---|",
    ]
    for s in SCHEDULES.values():
        rows.append(
            f"| `{s.name}` | {s.bubble.formula} | {s.in_flight.formula} | {s.weight_copies:g}× "
            f"| {s.bubble.steady_floor_formula} + {s.bubble.floor_formula} | {s.source} |"
        )
    return "\n".join(rows) + "\n"
