"""Memory per GPU of a pipeline stage: training state (ZeRO-sharded over each gradient group),
in-flight activations (the schedule's count, step/schedules.py), working buffers, reserved, and
what offload keeps in host memory. The only memory terms of a step; floats or numpy arrays.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from paraplan.cost.elementwise import any_true, maximum, minimum, scalar_zero, where, where_all
from paraplan.cost.memory import peak_residents
from paraplan.step.bf16_optimizer_sync import optimizer_shard_ways
from paraplan.step.inputs import (
    TRANSFORMER_KINDS,
    GradientGroup,
    Stage,
    StepInputs,
    absent_everywhere,
    max_blocks,
    shard_ways,
    stage_params,
    sum_blocks,
    transformer_layers,
    transformer_params,
    zero3_pp_keeps,
    zero3_prefetch_depths,
)
from paraplan.step.offload import offloaded_activation_share
from paraplan.step.schedules import SCHEDULES, in_flight_microbatches, weight_copies

Num = Any  # float or numpy array, broadcastable


def stage_state_bytes(inp: StepInputs, stage: Stage) -> tuple[Num, Num, Num, Num]:
    """(weights, gradients, optimizer state, transformer-layer states) bytes per GPU of the stage:
    each gradient group's parameters times the state bytes per parameter, ZeRO-sharded over the group
    (weights from stage 3, gradients from 2 or held unsharded, ``gradient_bytes_per_param``, optimizer
    state from 1, ZeRO §5, or wherever DeepSpeed's BF16_Optimizer runs, step.bf16_optimizer_sync.
    optimizer_shard_ways), fp8 weight copies on the transformer layers' parameters
    (cost.memory.fp8_weight_copy_bytes_per_param)."""
    weights = grads = optimizer = transformer_states = 0.0
    for name, group in inp.gradient_groups.items():
        params = stage_params(stage, name)
        layer_params = stage_params(stage, name, TRANSFORMER_KINDS)
        grad_per_param = gradient_bytes_per_param(inp, group)
        optimizer_ways = optimizer_shard_ways(inp, group)  # ZeRO's from 1, the BF16_Optimizer's
        per_param = (
            (inp.weight_bytes + inp.fp8_copy_bytes) / shard_ways(inp, group, 3)
            + grad_per_param
            + inp.optimizer_bytes / optimizer_ways
        )
        weights = weights + (
            params * inp.weight_bytes + layer_params * inp.fp8_copy_bytes
        ) / shard_ways(inp, group, 3)
        grads = grads + params * grad_per_param
        optimizer = optimizer + params * inp.optimizer_bytes / optimizer_ways
        transformer_states = transformer_states + layer_params * per_param
    return weights, grads, optimizer, transformer_states


def gradient_bytes_per_param(inp: StepInputs, group: GradientGroup) -> Num:
    """Gradient bytes per GPU per parameter of a gradient group at the step's peak: the kept gradient's bytes
    ZeRO-sharded from stage 2 (grad_bytes / ways), but under pipeline parallelism with a ZeRO-3 runtime that
    keeps the stage's layers gathered (``zero3_pp_keeps_layers``, torchtitan's FSDP2 under PP) the whole
    unsharded gradient in the reduce dtype (grad_reduce_bytes, fp32 in torchtitan: 4 B per parameter).

    torch.distributed.pipelining runs every micro-batch's backward of an FSDP2 stage with
    ``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)`` (recursive: every
    fully_shard module of the stage, its root included) and, after the last one, calls each group's
    post_backward itself (torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync``, since
    pytorch/pytorch#134052, Aug 2024, in the Dec 2024 nightly torchtitan 9dec370 ran). With no reduction,
    FSDPParamGroup.post_backward only calls FSDPParam.to_accumulated_grad_if_needed, which moves each bf16
    unsharded gradient to ``unsharded_accumulated_grad`` in MixedPrecisionPolicy.reduce_dtype, and later
    micro-batches add into it (accumulate_unsharded_grad_if_needed; torch/distributed/_composable/fsdp/
    _fsdp_param.py, _fsdp_param_group.py, PyTorch 2.4-2.6); the reduce-scatter of all of them runs after the
    last backward. So from the first backward on, beside the in-flight activations, the stage holds every
    parameter's gradient unsharded at the reduce dtype; the sharded gradients exist only after the final
    reduce-scatters (torchtitan zero_grad()s before the pipeline step), never beside these."""
    held = zero3_pp_keeps(inp) & (inp.knobs.zero >= 3)
    return where(held, inp.grad_reduce_bytes, inp.grad_bytes / shard_ways(inp, group, 2))


class StageHoldings(NamedTuple):
    """What a stage holds whatever its position (``stage_holdings``): state bytes times the schedule's
    weight copies, activation bytes per in-flight micro-batch, and what offload and buffers add."""

    weights: Num
    grads: Num
    optimizer: Num
    transformer_states: Num
    kept: Num  # activation bytes per in-flight micro-batch, every block
    transformer_kept: Num  # the same, transformer blocks
    held: Num  # held once at the peak (the LM head's logits)
    offloaded_acts: Num  # activation offload: twice the largest kept transformer block
    share: Num  # offloaded share of the transformer activations (step.offload)
    streamed_weights: Num  # weight offload: twice the largest transformer block's weights
    buffers: Num  # the largest block's working buffer (+ ZeRO-3's gathered weights)


def stage_holdings(inp: StepInputs, stage: Stage, copies: Num = None) -> StageHoldings:
    """The terms of ``stage_memory_terms`` that do not depend on the stage's position: weights,
    gradients, optimizer state (``stage_state_bytes``, times the schedule's weight copies; ``copies``
    1 for the stage's own, DualPipe's pairing adds its partner's: ``paired_holdings``), kept and held
    activations, offloaded shares, working buffers. For one plan's scalar knobs a term that only activation
    or weight offload or ZeRO-3 reads is 0.0 where the plan has none (``memory_at`` reads the offloaded
    ones only through where(knobs.offload_*, ...), and where(False, term, 0.0) is 0.0 whatever the term)."""
    weights, grads, optimizer, transformer_states = stage_state_bytes(inp, stage)
    knobs = inp.knobs
    copies = weight_copies(knobs) if copies is None else copies
    no_acts, no_weights = scalar_zero(knobs.offload_activations), scalar_zero(knobs.offload_weights)
    gathered = (
        0.0
        if scalar_zero(knobs.zero >= 3)
        else where(knobs.zero >= 3, zero3_gathered_bytes(inp, stage), 0.0)
    )
    return StageHoldings(
        weights * copies,
        grads * copies,
        optimizer,
        transformer_states,
        sum_blocks(stage, lambda b: b.activation_bytes),
        sum_blocks(stage, lambda b: b.activation_bytes, TRANSFORMER_KINDS),
        sum_blocks(stage, lambda b: b.held_bytes),
        # out and in
        0.0
        if no_acts
        else 2.0 * max_blocks(stage, lambda b: b.activation_bytes, TRANSFORMER_KINDS),
        0.0  # no layer counted
        if no_acts
        else offloaded_activation_share(
            knobs.offload_activations, knobs.offload_activation_layers, transformer_layers(stage)
        ),  # the other layers keep theirs on the GPU
        0.0
        if no_weights
        else 2.0 * max_blocks(stage, lambda b: b.params * inp.weight_bytes, TRANSFORMER_KINDS),
        max_blocks(stage, lambda b: b.buffer_bytes) + gathered,
    )


def paired_holdings(
    own: StageHoldings, partner: StageHoldings, index: Num, pp: Num, microbatches: Num, vpp: Num = 1
):
    """What a DualPipe rank at position i holds: stage i for one direction and stage p − 1 − i for the
    other (deepseek-ai/DualPipe's example builds each rank's two modules so, examples/example_dualpipe.py
    at 3da1bbe). Its step.schedules.SCHEDULES entry says how many: ``weight_copies`` stages' weights and
    gradients (2: its own and its partner's, DeepSeek-V3 Table 2's 2× parameters where the stages are
    equal) and ``in_flight`` micro-batches (min(p + 1, m): Table 2's p + 1 under specs.rules.dualpipe_rule,
    m ≥ 2p); the optimizer state one stage's, as before (the two copies' states are not priced apart);
    both stages' held activations, the larger working buffers; and per in-flight micro-batch kept bytes
    weighted as the order holds them at its peak, p − i of stage i and i + 1 of stage p − 1 − i
    (step.schedule_orders.dualpipe_order), returned as (holdings, in flight) with ``kept`` the bytes of
    one micro-batch averaged over those p + 1."""
    entry = SCHEDULES["dualpipe"]
    others = entry.weight_copies - 1.0  # the stages a rank holds beside its own: its partner
    first, second = pp - index, index + 1.0
    kept = (first * own.kept + second * partner.kept) / (first + second)
    layers = (first * own.transformer_kept + second * partner.transformer_kept) / (first + second)
    held = StageHoldings(
        own.weights + others * partner.weights,
        own.grads + others * partner.grads,
        own.optimizer,
        own.transformer_states + others * partner.transformer_states,
        kept,
        layers,
        own.held + partner.held,
        maximum(own.offloaded_acts, partner.offloaded_acts),
        own.share,
        maximum(own.streamed_weights, partner.streamed_weights),
        maximum(own.buffers, partner.buffers),
    )
    return held, entry.in_flight.count(pp, vpp, microbatches, index)


def stage_memory_terms(inp: StepInputs, stage: Stage, index: Num) -> dict[str, Num]:
    """Bytes per GPU of the pipeline stage at position ``index`` running ``stage``'s blocks
    (step.result.StageMemory byte fields + ``peak_bytes``): ``memory_at`` of its holdings."""
    return memory_at(inp, stage_holdings(inp, stage), index)


def pipeline_stage_memory(stages: tuple[Stage, ...], index: int) -> dict[str, Num]:
    """Bytes per GPU of the pipeline stage at position ``index`` of ``stages``, each a Stage with its own
    StepInputs (a per-stage plan, step.per_stage): ``stage_memory_terms`` on its own inputs; under DualPipe
    (the knobs' flag) the rank's, which holds stage i and stage p − 1 − i (deepseek-ai/DualPipe
    examples/example_dualpipe.py:138 at 3da1bbe): ``dualpipe_memory_terms``, as the uniform path prices it
    (step.estimate._stage_memories), of every stage's own holdings (one weight copy, each on its own inputs) on
    the rank's inputs. A per-stage plan gives stage i and stage p − 1 − i the same GPUs and degrees
    (specs.rules_schedule.mirrored_stages_rule), so its partner's holdings are the rank's."""
    stage = stages[index]
    if not stage.inputs.knobs.dualpipe:
        return stage_memory_terms(stage.inputs, stage, index)
    holdings = [stage_holdings(s.inputs, s, 1.0) for s in stages]
    return dualpipe_memory_terms(replace(stage.inputs, stages=stages), holdings, index)[0]


def memory_at(
    inp: StepInputs, h: StageHoldings, index: Num, in_flight: Num = None, buckets: Num = None
) -> dict[str, Num]:
    """Bytes per GPU of a stage holding ``h`` at position ``index`` (step.result.StageMemory byte fields
    + ``peak_bytes``): ``resident_bytes``'s parts of the peak and host memory, and the transformer layers'
    share of the weights and optimizer state and of the in-flight activations (for the report). ``in_flight``:
    the count, default the schedule's (step.schedules.in_flight_microbatches); ``buckets``: ``ddp_buckets(inp)``,
    when the caller has it (the same at every position)."""
    if in_flight is None:
        in_flight = in_flight_microbatches(inp.knobs, inp.pp, inp.microbatches, index)
    out = resident_bytes(inp, h, in_flight, buckets)
    out["transformer_weights_and_optimizer_bytes"] = h.transformer_states
    out["transformer_activations_bytes"] = where(
        inp.knobs.offload_activations,
        (1.0 - h.share) * in_flight * h.transformer_kept + h.offloaded_acts,
        in_flight * h.transformer_kept,
    )
    return out


def resident_bytes(inp: StepInputs, h: StageHoldings, in_flight: Num, buckets: Num = None) -> dict:
    """Bytes per GPU of a stage holding ``h`` with ``in_flight`` micro-batches' activations kept: weights,
    gradients, optimizer state, in-flight activations (step.schedules.in_flight_microbatches), buffers,
    reserved, and ``peak_bytes`` their sum, the gradients and activations resident at the peak
    (cost.memory.peak_residents: the forward's end or the optimizer step where gradients are allocated during
    backward); ``host_bytes`` what offload keeps in host memory (ZeRO-Offload / ZeRO-Infinity, Ren et al.
    2021). What the search's memory check reads (``stage_peaks``); ``memory_at`` adds the report's terms."""
    acts = in_flight * h.kept + h.held
    share, offloaded_acts, knobs = h.share, h.offloaded_acts, inp.knobs
    out = {
        "weights_bytes": where(knobs.offload_weights, h.streamed_weights, h.weights),
        "gradients_bytes": h.grads,
        "optimizer_bytes": where(knobs.offload_optimizer, 0.0, h.optimizer),
        "activations_bytes": where(
            knobs.offload_activations, (1.0 - share) * acts + offloaded_acts, acts
        ),
        "buffers_bytes": h.buffers,
        "reserved_bytes": inp.reserved_bytes + 0.0 * in_flight,
        "host_bytes": where(knobs.offload_optimizer, h.optimizer, 0.0)
        + where(knobs.offload_weights, h.weights, 0.0)
        + share * acts,
    }
    out["gradients_bytes"], out["activations_bytes"] = peak_residents(
        h.grads,
        out["activations_bytes"],
        inp.lazy_gradients,
        inp.microbatches,
        ddp_buckets(inp) if buckets is None else buckets,
    )
    out["peak_bytes"] = (
        out["weights_bytes"]
        + out["gradients_bytes"]
        + out["optimizer_bytes"]
        + out["activations_bytes"]
        + out["buffers_bytes"]
        + out["reserved_bytes"]
    )
    return out


def ddp_buckets(inp: StepInputs) -> Num:
    """1 where some gradient group all-reduces unsharded gradients (ZeRO below 2) over more than one GPU
    (the data-parallel runtime then holds gradient buckets from the start: cost.memory.peak_residents), else 0."""
    replicated = 0.0
    for group in inp.gradient_groups.values():
        replicated = maximum(replicated, where(group.size > 1, 1.0, 0.0))
    return where(inp.knobs.zero >= 2, 0.0, replicated)


def zero3_gathered_bytes(inp: StepInputs, stage: Stage) -> Num:
    """Gathered ZeRO-3 weights resident at once: the layer computing plus the d layers of the deeper of
    the two prefetch depths, d = max(forward, backward) (step.inputs.zero3_prefetch_depths; FSDP gathers
    whole wrapped layers and prefetches the next: Zhao et al. 2023, PyTorch FSDP, VLDB), or under a runtime
    cap on live parameters (DeepSpeed stage3_max_live_parameters) that cap, but
    never less than the block's largest weight tensor, which must be whole to run:
    min((1 + d)·layer, max(cap, largest tensor)) × the gathered copy's bytes per parameter
    (StepInputs.gathered_weight_bytes). The buffer is counted whether or not the
    gather overlaps (the search keeps only the overlapped ZeRO-3 variant, which must need no more memory).
    Under pipeline parallelism where the runtime keeps every layer gathered from its forward to its backward
    (``zero3_pp_keeps_layers``: torchtitan's apply_fsdp, parallelize_llama.py at 9dec370 and 820504e, "For
    PP, do not reshard after forward to avoid per-microbatch all-gathers", reshard_after_forward=False), all
    the stage's transformer-layer parameters at the end of the warm-up forwards. Plus, where the runtime keeps
    its root gathered (``zero3_root_held``), the stage's blocks outside the transformer layers
    (``zero3_root_bytes``)."""
    layer = (1.0 + maximum(*zero3_prefetch_depths(inp))) * zero3_unit_params(stage)
    largest = max_blocks(stage, lambda b: b.largest_weight_params, TRANSFORMER_KINDS)
    live = minimum(layer, maximum(inp.zero3_live_params, largest))
    every = transformer_params(stage)
    kept = where(zero3_pp_keeps(inp), maximum(live, every), live)
    return kept * inp.gathered_weight_bytes + zero3_root_bytes(inp, stage, every)


# the layer kinds whose MLP is a routed-expert MoE (each has one ``experts`` block: step.layout's routed count)
ROUTED_LAYER_KINDS = ("moe_layer", "mtp")


def zero3_unit_params(stage: Stage) -> Num:
    """Parameters per GPU of the stage's largest ZeRO-3 gather unit of its transformer layers: a layer, where its
    MLP is a routed MoE (``ROUTED_LAYER_KINDS``) with its routed experts (the ``experts`` block, one per such
    layer): max over layers of P_layer (+ P_experts). torchtitan under FSDP2 gathers a MoE layer's routed experts
    with its block: with EP they are their own unit on the efsdp mesh, prefetched with the next block, and
    without EP part of the block's (apply_fsdp, torchtitan/models/llama4/infra/parallelize.py at 7e4ab859:
    ``set_modules_to_forward_prefetch([next_transformer_block, next_transformer_block.moe.experts])``, the
    backward's ``[prev_transformer_block, prev_transformer_block.moe.experts]``; fully_shard of
    ``transformer_block.moe.experts`` only where ``ep_degree > 1``). A dense model's is its largest block."""
    experts = max_blocks(stage, lambda b: b.params, ("experts",))
    if scalar_zero(experts):  # no routed experts: 0 × the finite counts, without adding them
        return max_blocks(stage, lambda b: b.params, TRANSFORMER_KINDS)
    return max_blocks(
        stage,
        lambda b: b.params + experts if b.kind in ROUTED_LAYER_KINDS else b.params,
        TRANSFORMER_KINDS,
    )


def zero3_root_bytes(inp: StepInputs, stage: Stage, layer_params: Num) -> Num:
    """The gathered parameters of FSDP2's root held through the whole step: FSDPState._lazy_init sets the root
    group's post_forward_mesh_info to None ("For the root, do not reshard after forward since for training,
    the parameters would be freed and all-gathered immediately": torch/distributed/_composable/fsdp/
    _fsdp_state.py, PyTorch 2.4-2.6, and torch/distributed/fsdp/_fully_shard/_fsdp_state.py up to
    pytorch/pytorch#155319, June 2025, after which only a root whose reshard_after_forward is left unset), so what
    the root owns stays unsharded from its pre-forward all-gather to its post-backward; torchtitan wraps each
    TransformerBlock apart and the whole model last (parallelize_llama.py apply_fsdp at 9dec370), so the root
    owns the embedding, the final norm and the LM head: (stage parameters − transformer-layer parameters,
    ``layer_params``: step.inputs.transformer_params) per GPU × the gathered copy's bytes
    (StepInputs.gathered_outside_bytes), where the profile states ``zero3_root_held``
    (specs.runtime.StackRuntimeFields, with its version range)."""
    outside = sum_blocks(stage, lambda b: b.params) - layer_params
    return inp.zero3_root_held * outside * inp.gathered_outside_bytes


def stage_peaks(inp: StepInputs) -> tuple[Num, Num]:
    """(HBM peak, host-memory use) per GPU, each the largest over stages. Each Stage entry is
    evaluated at its first position: in-flight activations fall with the stage index and the
    entry's stages are otherwise identical, so that is the entry's largest. Under DualPipe each rank
    holds a stage pair (``dualpipe_memory_terms``), evaluated where its terms change slope."""
    peak = host = 0.0
    for s in inp.stages:
        if absent_everywhere(s):  # where_all below gives 0.0 for every candidate: its terms unread
            peak, host = maximum(peak, 0.0), maximum(host, 0.0)
            continue
        in_flight = in_flight_microbatches(inp.knobs, inp.pp, inp.microbatches, s.index)
        terms = resident_bytes(inp, stage_holdings(inp, s), in_flight)
        peak = maximum(peak, where_all(s.count > 0, terms["peak_bytes"], 0.0))
        host = maximum(host, where_all(s.count > 0, terms["host_bytes"], 0.0))
    dual = inp.knobs.dualpipe
    if not any_true(dual):
        return peak, host
    holdings = [stage_holdings(inp, s, 1.0) for s in inp.stages]
    paired_peak = paired_host = 0.0
    for s in inp.stages:  # a rank's bytes are linear in its position between these
        last = s.index + group_count(inp, s) - 1
        ends = (s.index, last, inp.pp - 1 - s.index, inp.pp - 1 - last)
        # the partner of the rank at ends[k] is at ends[k ± 2] (p − 1 − (p − 1 − i) = i, integers): the entry
        # holding each end looked up once (_holding_at compares positions only: the same bits)
        held = [_holding_at(inp, holdings, x) for x in ends]
        for k, x in enumerate(ends):
            (own, found), (partner, _) = held[k], held[(k + 2) % 4]
            terms = _paired_terms(inp, own, partner, x)
            paired_peak = maximum(paired_peak, where(found, terms["peak_bytes"], 0.0))
            paired_host = maximum(paired_host, where(found, terms["host_bytes"], 0.0))
    return where(dual, paired_peak, peak), where(dual, paired_host, host)


def dualpipe_memory_terms(
    inp: StepInputs, holdings: list[StageHoldings], index: Num
) -> tuple[dict[str, Num], Num]:
    """``memory_at`` of the DualPipe rank at position ``index`` (``paired_holdings``: stage i's entry
    and stage p − 1 − i's among the Stage entries, ``holdings`` theirs with one weight copy), and
    whether some present entry holds position ``index``."""
    own, found = _holding_at(inp, holdings, index)
    partner, _ = _holding_at(inp, holdings, inp.pp - 1 - index)
    return _paired_terms(inp, own, partner, index), found


def _paired_terms(
    inp: StepInputs, own: StageHoldings, partner: StageHoldings, index: Num
) -> dict[str, Num]:
    """``memory_at`` of the DualPipe rank at position ``index`` holding ``own`` and its partner's ``partner``."""
    paired, in_flight = paired_holdings(
        own, partner, index, inp.pp, inp.microbatches, inp.knobs.vpp
    )
    return memory_at(inp, paired, index, in_flight)


def group_count(inp: StepInputs, stage: Stage) -> Num:
    """Pipeline positions of the split group that starts at ``stage``'s position: the counts of every entry at
    that index. A group whose stages' links differ is two entries at one index, each with its count, holding
    the same blocks (step.layout.build_step_inputs), so the group covers index … index + their sum − 1, not
    index + count − 1 (DualPipe's rank 3 of pp 8 then found no entry and took the last one's holdings); an entry
    alone at its index: its count."""
    total = 0.0
    for other in inp.stages:
        total = total + where(other.index == stage.index, other.count, 0.0)
    return total


def _holding_at(inp: StepInputs, holdings: list[StageHoldings], position: Num):
    """(the holdings of the present Stage entry that holds ``position``, whether one does)."""
    out, found = holdings[-1], False
    for s, h in zip(reversed(inp.stages), reversed(holdings)):
        inside = (s.count > 0) & (s.index <= position) & (position < s.index + group_count(inp, s))
        out = StageHoldings(*(where(inside, a, b) for a, b in zip(h, out)))
        found = found | inside
    return out, found
