"""Compose a training step from a list of pipeline stages.

A :class:`Stage` holds an ordered list of blocks (embedding, decoder layers, LM head; more kinds
plug in the same way), each a :class:`BlockCost`: its per-micro-batch time terms, the parameters
it holds (tagged with the gradient group that reduces them) and the activations it keeps. One
Stage entry may stand for ``count`` identical consecutive stages (the search describes a uniform
plan with four entries: first, the fuller middle stages, the other middle stages, last); an
entry with count 0 is absent.

Every function here is plain arithmetic that works the same on Python floats and on numpy arrays
(one element per candidate plan), so ``estimate`` (one plan) and the search (millions at once)
share one implementation and agree to the last bit.

Step time (Narayanan et al. 2021 §2.2): m micro-batches of the slowest stage's work, plus the
bubble of the plan's schedule (step/schedules.py), plus the tail after the last backward —
data-parallel gradient sync, optimizer step, offload traffic (step/tail.py) — of the stage whose
tail is longest. Memory per stage: step/stage_memory.py. The block terms: step/block_terms.py;
the records and sums over a stage: step/inputs.py. Their names are importable from here too.
"""

from __future__ import annotations

from dataclasses import fields, replace
from functools import partial
from typing import Any

import numpy as np

from paraplan.cost.elementwise import (
    any_positive,
    any_true,
    is_array,
    maximum,
    scalar_zero,
    where,
    where_all,
)
from paraplan.cost.runtimes import accumulation_bytes_per_microbatch, grad_accumulation_s

# re-exported: the builders, the search and the tests read the composition's names here
from paraplan.step.block_terms import (  # noqa: F401
    BLOCK_TERM_NAMES,
    TP_OVERLAP_CHUNKS,
    BlockCost,
    BlockTerms,
    block_terms,
    expert_exposure,
    recompute_s,
    unpaired_ep_exposure_s,
    unpaired_passes_s,
)
from paraplan.step.inputs import (  # noqa: F401
    GRAD_REDUCE_BYTES,
    absent_everywhere,
    backward_s,
    forward_s,
    TRANSFORMER_KINDS,
    GradientGroup,
    GridKnobs,
    Stage,
    StepInputs,
    shard_ways,
    stage_params,
    stage_work,
    sum_blocks,
    transformer_layers,
    work_total,
)
from paraplan.step.constants import least_zero_stage_terms
from paraplan.step.dualpipe import overlapped_pair_s, overlapped_pairs, pair_saving_s
from paraplan.step.p2p import overlapped_p2p_exposed_s
from paraplan.step.offload import offload_traffic_bytes, offloaded_activation_share
from paraplan.step.result import TimeBreakdown
from paraplan.step.schedules import (  # noqa: F401
    SCHEDULE_FLAGS,
    PipelineWork,
    pipeline_bubble_s,
    split_backward_on,
)
from paraplan.step.stage_memory import (  # noqa: F401
    stage_memory_terms,
    stage_peaks,
    zero3_gathered_bytes,
)
from paraplan.step.tail import (  # noqa: F401
    ZERO_COLLECTIVES,
    drain_slack_s,
    tail_terms,
    zero_branch,
    zero_branches,
)

Num = Any  # float or numpy array, broadcastable
_BREAKDOWN_FIELDS = tuple(f.name for f in fields(TimeBreakdown))


def _argmax(values: list[Num], present: list[Num]) -> tuple[Num, Num]:
    """(max over present entries, index of the first entry that attains it)."""
    best, index = None, None
    for i, (v, p) in enumerate(zip(values, present)):
        if best is None:
            best = where_all(p, v, -np.inf)
            index = np.zeros(best.shape, dtype=np.int64) if is_array(best) and best.ndim else 0
            continue
        better = _better(v, p, best)
        if better is None:
            continue
        best = where(better, v, best)
        index = where(better, i, index)
    return best, index


def _better(v: Num, present: Num, best: Num) -> Num:
    """Where entry ``v`` beats the running ``best`` of ``_argmax`` / ``_at_max``: ``where(present, v, −inf) >
    best``, the same booleans without the full-size ``where`` (−inf beats nothing, NaN included), or None where
    nothing does (no where to run): an entry present for no candidate, or one better nowhere (a numpy array)."""
    if present.__class__ is np.ndarray:
        if not present.any():
            return None
        better = v > best
        if not present.all():
            better = better & present
    elif not present:
        return None
    else:
        better = v > best
    if better.__class__ is np.ndarray and not better.any():
        return None
    return better


def _at_max(values: list[Num], present: list[Num], rows: list) -> tuple:
    """rows[i] of the first present entry i that attains the max of ``values``: what ``_pick`` gives of each of
    its columns at ``_argmax``'s index, every where on the way choosing among the same operands, taken while
    the max is sought (no index, no ``index == i`` per column). An entry better nowhere changes nothing
    (``_better``: no where runs); one better everywhere is taken whole. rows[i] may be a function of no
    argument giving the row: called only for an entry some candidate takes (the columns' wheres run after the
    max is found, in the same order, on the same masks)."""
    best = None
    taken = []  # (entry, where it beats the rows taken before it; None: everywhere)
    last = len(values) - 1
    for i, (v, p) in enumerate(zip(values, present)):
        if best is None:
            best, taken = where_all(p, v, -np.inf), [(i, None)]
            continue
        better = _better(v, p, best)
        if better is None:
            continue
        if better is True or (better.__class__ is np.ndarray and better.all()):
            # where(better, v, best) and each column's where: v and row themselves
            best, taken = v, [(i, None)]
            continue
        if i < last:  # the running max is read by the entries after this one only
            best = where(better, v, best)
        taken.append((i, better))
    out = None
    for i, better in taken:
        row = rows[i]() if callable(rows[i]) else rows[i]
        out = (
            row if better is None else tuple(where(better, new, old) for new, old in zip(row, out))
        )
    return out


def _pick(index: Num, values: list[Num], masks: list[Num] | None = None) -> Num:
    """values[index], elementwise: the entry of each candidate's index (0 <= index < len(values)); ``masks``:
    ``_index_masks(index, len(values))`` when the caller picks several lists at one index."""
    if index.__class__ is not np.ndarray:
        for v in values:
            if v.__class__ is np.ndarray:
                break
        else:  # one plan's scalars
            return values[index]
    if masks is None:
        masks = _index_masks(index, len(values))
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = where(masks[i], values[i], out)
    return out


def _index_masks(index: Num, n: int) -> list[Num] | None:
    """[index == i for i < n − 1]: the candidates ``_pick`` takes entry i of, each but the last entry's; None for
    one plan's index (``_pick`` indexes its list)."""
    if index.__class__ is not np.ndarray:
        return None
    return [index == i for i in range(n - 1)]


def runtime_work(inp: StepInputs, stage: Stage, work: dict[str, Num]) -> dict[str, Num]:
    """A stage's per-micro-batch work under the stack's runtime: the interleaved schedule's transfers
    overlapped with compute where the runtime does (step.p2p.overlapped_p2p_exposed_s); the GPU idle of the
    runtime's batch loads in the forward of the first and last stage with pp > 1 (StepInputs.batch_sync_s:
    DeepSpeed's PipelineEngine, cost.runtimes.batch_sync_idle_s); and the runtime's gradient accumulation in
    its backward: every parameter of the stage, after every micro-batch's backward, on the compute stream
    (cost.runtimes.grad_accumulation_s of StepInputs.grad_accumulation_bytes, the one rule of every stack:
    cost.runtimes.GRAD_ACCUMULATION_BYTES), less the first micro-batch's saving spread over the step's
    micro-batches where one is stated (StepInputs.grad_accumulation_first_saving_bytes,
    cost.runtimes.accumulation_bytes_per_microbatch). The per-stage search reads the same work
    (step.per_stage.stage_terms)."""
    own = stage.inputs or inp
    if any_positive(own.p2p_overlap):
        hidden = overlapped_p2p_exposed_s(work["pp"], forward_s(work), backward_s(work))
        work["pp"] = where((own.p2p_overlap > 0) & inp.knobs.interleaved, hidden, work["pp"])
    if any_positive(own.batch_sync_s):  # the pipeline engine's batch loads
        loads = (inp.pp > 1) & ((stage.index == 0) | (stage.index + stage.count >= inp.pp))
        work["forward"] = work["forward"] + where(loads, own.batch_sync_s, 0.0)
    work["backward"] = work["backward"] + _accumulation_s(inp, own, stage)
    return work


def _accumulation_s(inp: StepInputs, own: StepInputs, stage: Stage) -> Num:
    """Seconds per micro-batch of the runtime's gradient accumulation on ``stage``
    (cost.runtimes.grad_accumulation_s): every parameter of the stage at ``own``'s
    grad_accumulation_bytes, and every parameter of its gradient partitions (each group's
    parameters over its ZeRO-2 shards, step.inputs.shard_ways) at grad_accumulation_owned_bytes, each
    less its first micro-batch's saving spread over the step's micro-batches
    (cost.runtimes.accumulation_bytes_per_microbatch); 0 where no pass is stated."""
    total = 0.0
    if any_positive(own.grad_accumulation_bytes):
        params = sum_blocks(stage, lambda b: b.params)
        per_microbatch = own.grad_accumulation_bytes
        if any_positive(own.grad_accumulation_first_saving_bytes):  # the first micro-batch's saving
            saving = own.grad_accumulation_first_saving_bytes
            per_microbatch = accumulation_bytes_per_microbatch(
                per_microbatch, saving, inp.microbatches
            )
        total = grad_accumulation_s(params, per_microbatch, own.hbm_rate)
    if any_positive(own.grad_accumulation_owned_bytes):
        owned = sum(
            stage_params(stage, name) / shard_ways(inp, group, 2)
            for name, group in inp.gradient_groups.items()
        )
        per_owned = accumulation_bytes_per_microbatch(
            own.grad_accumulation_owned_bytes,
            own.grad_accumulation_owned_first_saving_bytes,
            inp.microbatches,
        )
        total = total + grad_accumulation_s(owned, per_owned, own.hbm_rate)
    return total


def stage_works(inp: StepInputs) -> list[dict[str, Num]]:
    """Every stage entry's per-micro-batch work as the composition prices it (stage_work under the
    stack's runtime, runtime_work): what the pipeline takes the slowest of and the timeline draws."""
    split = split_backward_on(inp.knobs)
    return [runtime_work(inp, s, stage_work(s, split)) for s in inp.stages]


def _pipeline(inp: StepInputs) -> dict:
    """The pipeline half of compose_step: every stage's per-micro-batch work, the slowest stage, the
    bubble and the step's parts by kind (m × the slowest stage's parts; under DualPipe less what its
    overlapped pairs save, ``_dualpipe_pairs``)."""
    stages = inp.stages
    present = [s.count > 0 for s in stages]
    works = stage_works(inp)
    totals = [work_total(w) for w in works]
    pairs = _dualpipe_pairs(inp, works, totals)
    slowest_work, slowest = _argmax(totals, present)
    if pairs is not None:  # the stage whose steady state is longest once its pairs overlap
        _, slowest = _argmax(pairs["steady"], present)
    masks = _index_masks(slowest, len(stages))
    if pairs is not None:
        slowest_work = _pick(slowest, totals, masks)
    all_work = 0.0
    for s, t in zip(stages, totals):
        all_work = all_work + s.count * t
    slowest_parts = {k: _pick(slowest, [w[k] for w in works], masks) for k in works[0]}
    wgrads = [sum_blocks(s, lambda b: b.terms.wgrad) for s in stages]
    pair_s = None if pairs is None else _pick(slowest, pairs["pair"], masks)
    bubble = pipeline_bubble_s(
        inp.knobs,
        PipelineWork(
            all_work,
            slowest_work,
            inp.pp,
            inp.knobs.vpp,
            slowest_parts,
            _pick(slowest, wgrads, masks),
            inp.microbatches,
            tuple(zip(works, wgrads, present, *([pairs["pair"]] if pairs else []))),
            pair_s,
        ),
    )
    m = inp.microbatches
    part = {name: m * slowest_parts[name] for name in (*BLOCK_TERM_NAMES, "pp")}
    # the A2A overlap without pipelining: one forward and one backward a step run unpaired
    unpaired = _pick(
        slowest, [sum_blocks(s, lambda b: unpaired_ep_exposure_s(b.terms)) for s in stages], masks
    )
    part["ep_forward"] = part["ep_forward"] + unpaired_passes_s(inp.pp, unpaired)
    if pairs is not None:
        part = _paired_parts(inp, part, slowest_parts, pair_s)
    return {
        "present": present,
        "works": works,
        "totals": totals,
        "slowest": slowest,
        "masks": masks,
        "bubble": bubble,
        "part": part,
    }


def _dualpipe_pairs(inp: StepInputs, works: list, totals: list) -> dict | None:
    """Per stage entry, where the candidate runs DualPipe: its overlapped pair F&B
    (step.dualpipe.overlapped_pair_s, on the stage's own GPUs' SM share) and its steady state per
    micro-batch, S − (m − p − 1)·(S − F&B)/m (step.dualpipe.pair_saving_s); S elsewhere. None where no
    candidate runs DualPipe."""
    dual = inp.knobs.dualpipe
    if not any_true(dual):
        return None
    pair, steady = [], []
    for s, w, t in zip(inp.stages, works, totals):
        ep = sum_blocks(s, lambda b: b.terms.ep_comm)
        fb = overlapped_pair_s(w, ep, (s.inputs or inp).pair_compute_share)
        pair.append(fb)
        saving = pair_saving_s(inp.pp, inp.microbatches, t, fb)
        steady.append(where(dual, t - saving / inp.microbatches, t))
    return {"pair": pair, "steady": steady}


def _paired_parts(inp: StepInputs, part: dict, slowest: dict, pair_s: Num) -> dict:
    """The step's parts under DualPipe: its m − p − 1 overlapped pairs (step.dualpipe.overlapped_pairs)
    run their stage's forward and backward compute as it is, hide the EP dispatch / combine and the
    pipeline sends, and cost F&B − (compute + exposed TP / CP) more (the SMs given to the all-to-all and
    what the compute does not hide), counted with the EP communication; m − (m − p − 1) chunk pairs
    keep their exposed EP and p2p. Elsewhere ``part`` as it is."""
    dual, m = inp.knobs.dualpipe, inp.microbatches
    n = overlapped_pairs(inp.pp, m)
    kept = sum(slowest[k] for k in ("forward", "backward", "recompute"))
    kept = kept + sum(
        slowest[k] for k in ("tp_forward", "tp_backward", "cp_forward", "cp_backward")
    )
    out = dict(part)
    out["ep_forward"] = where(dual, (m - n) * slowest["ep_forward"], part["ep_forward"])
    out["ep_backward"] = where(
        dual, (m - n) * slowest["ep_backward"] + n * (pair_s - kept), part["ep_backward"]
    )
    out["pp"] = where(dual, (m - n) * slowest["pp"], part["pp"])
    return out


def _breakdown(pipe: dict, optimizer_s: Num, dp_s: Num, offload_s: Num) -> dict[str, Num]:
    """The TimeBreakdown fields and their sum, step_time_s, in field order."""
    part = pipe["part"]
    out = {
        "forward_s": part["forward"],
        "backward_s": part["backward"],
        "recompute_s": part["recompute"],
        "optimizer_s": optimizer_s,
        "bubble_s": pipe["bubble"],
        "tp_comm_s": part["tp_forward"] + part["tp_backward"],
        "cp_comm_s": part["cp_forward"] + part["cp_backward"],
        "pp_comm_s": part["pp"],
        "ep_comm_s": part["ep_forward"] + part["ep_backward"],
        "dp_comm_s": dp_s,
        "offload_s": offload_s,
    }
    assert tuple(out) == _BREAKDOWN_FIELDS
    step = 0.0
    for v in out.values():
        step = step + v
    out["step_time_s"] = step
    return out


def pipeline_bound_s(inp: StepInputs) -> Num:
    """compose_step's step time with the tail parts (optimizer, data-parallel, offload) at 0: a lower
    bound on it, to the last bit (the same sum in the same order, each omitted part >= 0), and the
    same for every ZeRO, DP-overlap and offload choice. The pipeline half reads no DP-overlap or
    offload choice; of the ZeRO stage it reads the gradient terms a ZeRO-0 candidate may take apart
    (StepInputs.zero_stage_terms, step.constants.at_zero_stage: the per-micro-batch accumulation pass of
    the optimizer DeepSpeed runs at each stage), so where they differ it is priced with the least of each
    (step.constants.least_zero_stage_terms), every time term
    being non-decreasing in them: then it bounds the candidates of every ZeRO stage alike."""
    if inp.zero_stage_terms:
        inp = replace(inp, **least_zero_stage_terms(inp.zero_stage_terms, inp.microbatches))
    return _breakdown(_pipeline(inp), 0.0, 0.0, 0.0)["step_time_s"]


def _tails(inp: StepInputs, pipe: dict) -> tuple[list, list, list]:
    """The tail half of compose_step, per stage entry: (exposed DP after its drain slack, optimizer, offload)
    (``tail_terms``, ``drain_slack_s``), what follows its last backward (``after``), and the activation / weight
    streaming (which outlasts the compute it hides behind, fullest stage) that outlasts its DP exposure; None for
    an entry after the first absent from every candidate."""
    stages, works, totals, m = inp.stages, pipe["works"], pipe["totals"], inp.microbatches
    slowest, masks = pipe["slowest"], pipe["masks"]
    busy = m * _pick(slowest, [t - w["pp"] for w, t in zip(works, totals)], masks)
    slack = drain_slack_s(inp, works, totals, _pick(slowest, totals, masks))
    absent = [absent_everywhere(s) for s in stages]
    # an entry absent from every candidate after the first never attains the max (compose_parts: ``_at_max``)
    tails = [
        None if i and gone else tail_terms(s.inputs or inp, s, w, d)
        for i, (s, w, d, gone) in enumerate(zip(stages, works, slack, absent))
    ]
    knobs = inp.knobs
    # one plan with nothing offloaded: every entry's traffic is 0.0 and the where below 0.0 (busy >= 0)
    idle = scalar_zero(knobs.offload_activations) and scalar_zero(knobs.offload_weights)
    streamed = 0.0
    for s, gone in zip(stages, absent):
        if gone or idle:
            # the where below gives 0.0 for every candidate: its traffic unread
            streamed = maximum(streamed, 0.0)
            continue
        share = offloaded_activation_share(
            inp.knobs.offload_activations,
            inp.knobs.offload_activation_layers,
            transformer_layers(s),
        )
        traffic = sum_blocks(
            s,
            lambda b, share=share: offload_traffic_bytes(
                b.activation_bytes * share, b.params * inp.weight_bytes * inp.knobs.offload_weights
            ),
            TRANSFORMER_KINDS,
        )
        streamed = maximum(
            streamed,
            where(s.count > 0, m * maximum(0.0, traffic / inp.host_bandwidth - busy / m), 0.0),
        )
    # streaming (PCIe) and the DP sync (NIC / NVLink) use different links, so they hide behind the
    # same compute and each other: only what outlasts the DP exposure shows
    outlasting = [None if t is None else maximum(0.0, streamed - t[0]) for t in tails]
    after = [None if t is None else _after_last_backward(*t, streamed) for t in tails]
    return tails, after, outlasting


def _after_last_backward(dp: Num, opt: Num, off: Num, streamed: Num) -> Num:
    """What a stage entry adds after its last backward: exposed DP + optimizer + offload + the streaming that
    outlasts the DP exposure (max(0, streamed − DP), ``_tails``), written max(DP, streamed) + optimizer +
    offload: where the streaming outlasts every entry's DP, entries of equal optimizer and offload tie
    exactly (not to a rounding of DP + (streamed − DP)), so the first of them is taken (``_at_max``) however
    the pipeline's stages are grouped into entries (a uniform plan's classes, a per-stage plan's stages)."""
    return maximum(dp, streamed) + opt + off


def compose_parts(inp: StepInputs) -> tuple[dict[str, Num], list[dict[str, Num]], list[Num]]:
    """compose_step's breakdown with what it is composed of, the pipeline and the tail each run once: (the
    breakdown, every stage entry's per-micro-batch work (``stage_works``), per entry the seconds priced after
    its last backward: exposed DP sync after the stage's drain slack, optimizer step, offload and the
    streaming that outlasts the DP exposure, None for an entry after the first that the search's arrays leave
    absent from every candidate (step.inputs.absent_everywhere); the step adds the longest of them and the
    tied-embedding all-reduce)."""
    pipe = _pipeline(inp)
    tails, after, outlasting = _tails(inp, pipe)
    rows = [None if t is None else (*t, o) for t, o in zip(tails, outlasting)]
    dp_s, optimizer_s, offload_s, outlasting_s = _at_max(after, pipe["present"], rows)
    breakdown = _breakdown(
        pipe,
        optimizer_s=optimizer_s,
        dp_s=dp_s + inp.tied_sync_s,
        offload_s=offload_s + outlasting_s,
    )
    return breakdown, pipe["works"], after


def compose_step(inp: StepInputs) -> dict[str, Num]:
    """Step time and its breakdown (step.result.TimeBreakdown fields) per Narayanan et al. 2021
    §2.2: m × the slowest stage's per-micro-batch work, its parts reported by kind; the bubble
    from every stage's work (step/schedules.py); the longest stage tail (``tail_terms``, each
    stage's reduction running on through its slack before the pipeline's end: ``drain_slack_s``) and
    activation / weight streaming to host memory that outlasts the DP exposure; the tied-embedding
    all-reduce (step.p2p.tied_embedding_sync_s) after them all, in the data-parallel part."""
    return compose_parts(inp)[0]


def compose_step_time_s(inp: StepInputs) -> Num:
    """compose_step(inp)["step_time_s"] alone (the search's evaluation): each stage entry's step as if its tail
    were the one after the last backward (``_breakdown`` of that entry's exposed DP, optimizer and offload, the
    same sum in the same order), and the step of the entry at the max of ``after`` taken (``_at_max``, the same
    choice among the same operands as compose_parts' tail columns): bit for bit compose_step's, one where per
    entry on the step rather than one per tail column, and no full-size breakdown; an entry's step is worked
    out only where some candidate takes it."""
    pipe = _pipeline(inp)
    tails, after, outlasting = _tails(inp, pipe)

    def step(t: tuple, outlasting_s: Num) -> tuple:
        dp, optimizer, offload = t
        return (
            _breakdown(pipe, optimizer, dp + inp.tied_sync_s, offload + outlasting_s)[
                "step_time_s"
            ],
        )

    steps = [None if t is None else partial(step, t, o) for t, o in zip(tails, outlasting)]
    return _at_max(after, pipe["present"], steps)[0]
