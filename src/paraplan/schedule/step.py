"""Compose per-block times into a training step, and training state into memory per stage.

Every function here is plain arithmetic that works the same on Python floats and on numpy arrays
(one element per candidate plan), so ``estimate`` (one plan) and the search (millions at once)
share one implementation and agree to the last bit.

Stages come in three kinds: the first (input embedding; also the LM head when pp = 1), the
middle ones (identical), and the last (LM head). Pipeline time: m micro-batches of the slowest
stage's work plus the bubble (schedule/pipeline.py); then the data-parallel gradient sync, the
optimizer step and offload traffic that the overlap switches do not hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from paraplan.cost.comm import hidden_share
from paraplan.cost.memory import in_flight_chunks
from paraplan.schedule.pipeline import bubble_from_work_s, layers_on_stage

Num = Any  # float or numpy array, broadcastable

# Optimizer-step HBM traffic per parameter on its owner, one pass per kernel of Megatron-LM's
# mixed-precision step: zero the fp32 grad buffer (write 4), unscale + inf check (read 4, write 4),
# gradient-norm for clipping (read 4), Adam (read grad, master, m, v: 16; write master, m, v: 12),
# copy master to the half-precision weight (read 4, write 2) = 54 B (state sizes: ZeRO §3.1).
OPTIMIZER_BYTES_PER_PARAM = 54.0
# Bytes per parameter in the data-parallel gradient reduction: Megatron-LM reduces its fp32 main
# gradients (4 B/param, as in Korthikanti et al. 2022's memory accounting).
GRAD_REDUCE_BYTES = 4.0


@dataclass(frozen=True)
class BlockTerms:
    """Per-micro-batch seconds of one block: compute and exposed communication (see estimate.block_times)."""

    forward: Num
    backward: Num
    recompute: Num
    tp: Num  # exposed TP collectives: forward + backward + re-run in full recompute
    cp: Num  # exposed context-parallel ring exchange


RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}


def block_terms(compute, comm, recompute_code: Num, overlap_tp_comm: Num, tp_cost: Num, cp_cost: Num) -> BlockTerms:
    """Per-micro-batch block time from its summed op times (``compute``: estimate.BlockCompute) and
    collective times (``comm``: estimate.BlockComm); fields may be floats or arrays.

    Recompute (Korthikanti et al. 2022 §5): full (code 2) re-runs the forward, selective (1) the
    core attention. The context-parallel ring exchange hides behind the attention of the chunk
    already received (Liu et al. 2023). Backward TP collectives run beside the GEMMs they do not
    depend on: the SP input re-gather beside dgrad, the gradient all-reduce / reduce-scatter beside
    wgrad (Megatron-LM's async tensor-parallel communication); each half of the backward GEMM time
    is one of the two (equal FLOPs, Narayanan et al. 2021 §5.1). With ``overlap_tp_comm``
    (Transformer Engine's comm-GEMM overlap, TP group inside one NVLink domain) forward and
    remaining backward TP collectives also hide behind the neighbouring GEMMs. Hidden
    communication still costs its tier's share of its time (cost.comm.hidden_share)."""
    c = compute
    full = recompute_code == 2
    rc = np.where(full, c.forward, np.where(recompute_code == 1, c.attention_forward, 0.0))
    cp_f = hidden_share(comm.cp_forward, np.maximum(0.0, comm.cp_forward - c.attention_forward), cp_cost)
    cp_b = hidden_share(comm.cp_backward, np.maximum(0.0, comm.cp_backward - c.attention_backward), cp_cost)
    cp = cp_f + cp_b + np.where(recompute_code > 0, cp_f, 0.0)
    backward_comm = comm.tp_backward + comm.tp_hidden_by_dgrad + comm.tp_hidden_by_wgrad
    tp_b_async = (
        comm.tp_backward
        + np.maximum(0.0, comm.tp_hidden_by_dgrad - c.gemm_backward / 2.0)
        + np.maximum(0.0, comm.tp_hidden_by_wgrad - c.gemm_backward / 2.0)
    )
    tp_f = np.where(
        overlap_tp_comm,
        hidden_share(comm.tp_forward, np.maximum(0.0, comm.tp_forward - c.gemm_forward), tp_cost),
        comm.tp_forward,
    )
    tp_b = hidden_share(backward_comm, np.where(overlap_tp_comm, np.maximum(0.0, backward_comm - c.gemm_backward), tp_b_async), tp_cost)
    tp_rc = np.where(full, tp_f, 0.0)  # full recompute re-runs the forward collectives
    return BlockTerms(c.forward, c.backward, rc, tp_f + tp_b + tp_rc, cp)


@dataclass(frozen=True)
class StepInputs:
    """Everything the step and memory composition needs, per candidate (floats or arrays)."""

    pp: Num
    vpp: Num
    microbatches: Num
    layers: Num  # decoder layers of the whole model (split over stages by pipeline.layers_on_stage)
    interleaved: Num  # bool
    gpipe: Num  # bool
    layer: BlockTerms
    embedding: BlockTerms
    head: BlockTerms
    p2p_transfer_s: Num  # one activation send between neighbouring stages
    # parameters held per GPU
    layer_params: Num
    embedding_params: Num
    head_params: Num
    # data-parallel (data × context) group and its collectives in linear form
    dp_size: Num
    dp_overlap_cost: Num  # share of hidden DP collective time still paid (cost.comm.overlap_cost)
    zero: Num
    all_reduce: tuple[Num, Num]
    reduce_scatter: tuple[Num, Num]
    all_gather: tuple[Num, Num]
    overlap_dp_grad_reduce: Num
    overlap_param_gather: Num
    # offload
    offload_weights: Num
    offload_activations: Num
    offload_optimizer: Num
    host_bandwidth: Num  # bytes/s (any positive number when no offload is possible)
    hbm_rate: Num  # achieved HBM bytes/s for the optimizer step
    # memory terms
    weight_bytes: Num  # per parameter (state_bytes_per_param)
    grad_bytes: Num
    optimizer_bytes: Num
    layer_activation_bytes: Num  # per layer per micro-batch with the plan's recompute mode
    embedding_activation_bytes: Num
    head_activation_bytes: Num
    layer_buffer_bytes: Num  # full-recompute re-materialisation + SP all-gather buffer
    reserved_bytes: Num


def stage_layers(inp: StepInputs) -> dict[str, Num]:
    """Layers on the first stage, on the fullest middle stage (stage 1) and on the last stage."""
    return {
        "first": layers_on_stage(inp.layers, inp.pp, 0),
        "middle": layers_on_stage(inp.layers, inp.pp, 1),
        "last": layers_on_stage(inp.layers, inp.pp, inp.pp - 1),
    }


def _stage_sum(inp: StepInputs, layers: Num, with_embedding: Num, with_head: Num) -> dict[str, Num]:
    out = {}
    for part in ("forward", "backward", "recompute", "tp", "cp"):
        out[part] = (
            layers * getattr(inp.layer, part)
            + with_embedding * getattr(inp.embedding, part)
            + with_head * getattr(inp.head, part)
        )
    return out


def stage_parts(inp: StepInputs, layers: dict[str, Num]) -> dict[str, dict[str, Num]]:
    """Per-micro-batch work of the first, (fullest) middle and last stage kinds (layers: stage_layers)."""
    single = inp.pp == 1
    p2p = np.where(single, 0.0, 2.0 * inp.vpp * inp.p2p_transfer_s)
    first = _stage_sum(inp, layers["first"], 1.0, np.where(single, 1.0, 0.0))
    middle = _stage_sum(inp, layers["middle"], 0.0, 0.0)
    last = _stage_sum(inp, layers["last"], 0.0, 1.0)
    for parts in (first, middle, last):
        parts["pp"] = p2p
    return {"first": first, "middle": middle, "last": last}


def _work(parts: dict[str, Num]) -> Num:
    return parts["forward"] + parts["backward"] + parts["recompute"] + parts["tp"] + parts["cp"] + parts["pp"]


def _stage_params(inp: StepInputs, layers: dict[str, Num]) -> dict[str, Num]:
    single = inp.pp == 1
    return {
        "first": layers["first"] * inp.layer_params + inp.embedding_params + np.where(single, inp.head_params, 0.0),
        "middle": layers["middle"] * inp.layer_params,
        "last": layers["last"] * inp.layer_params + inp.head_params,
    }


def tail_terms(inp: StepInputs, params: Num, parts: dict[str, Num]) -> tuple[Num, Num, Num]:
    """(exposed DP communication, optimizer step, optimizer offload) of one stage.

    zero 0: all-reduce of fp32 gradients; zero 1-2: reduce-scatter of gradients + all-gather of
    weights (Megatron distributed optimizer / ZeRO); zero 3: per micro-batch all-gather of weights
    in forward and backward and reduce-scatter of gradients (ZeRO §5.3). Gradient reduction
    overlaps the last micro-batch's backward, the weight all-gather the first micro-batch's
    forward, when the overlap switches are on (Megatron-LM --overlap-grad-reduce /
    --overlap-param-gather). Optimizer offload (ZeRO-Offload, Ren et al. 2021) moves gradients to
    the host and weights back over host_bandwidth instead of the on-GPU step."""
    # windows are wall time of a micro-batch's backward / forward, exposed TP / CP / PP communication
    # included (it sits on the same critical path), so faster compute never lengthens the step
    backward_window = parts["backward"] + parts["recompute"] + parts["tp"] + parts["cp"] + parts["pp"]
    forward_window = parts["forward"] + parts["tp"] + parts["cp"]
    grad_window = backward_window * inp.overlap_dp_grad_reduce
    gather_window = forward_window * inp.overlap_param_gather
    grad_size = params * GRAD_REDUCE_BYTES
    weight_size = params * inp.weight_bytes
    all_reduce = grad_size * inp.all_reduce[0] + inp.all_reduce[1]
    reduce_scatter = grad_size * inp.reduce_scatter[0] + inp.reduce_scatter[1]
    all_gather = weight_size * inp.all_gather[0] + inp.all_gather[1]
    cost = inp.dp_overlap_cost
    zero0 = hidden_share(all_reduce, np.maximum(0.0, all_reduce - grad_window), cost)
    zero12 = hidden_share(
        reduce_scatter + all_gather,
        np.maximum(0.0, reduce_scatter - grad_window) + np.maximum(0.0, all_gather - gather_window),
        cost,
    )
    per_microbatch = 2.0 * all_gather + reduce_scatter
    zero3 = inp.microbatches * hidden_share(
        per_microbatch,
        np.maximum(0.0, all_gather - forward_window) + np.maximum(0.0, all_gather + reduce_scatter - backward_window),
        cost,
    )
    exposed = np.where(inp.zero == 0, zero0, np.where(inp.zero == 3, zero3, zero12))
    exposed = np.where(inp.dp_size > 1, exposed, 0.0)
    owned = params / np.where(inp.zero >= 1, inp.dp_size, 1)
    optimizer = np.where(inp.offload_optimizer, 0.0, owned * OPTIMIZER_BYTES_PER_PARAM / inp.hbm_rate)
    offload = np.where(inp.offload_optimizer, owned * (GRAD_REDUCE_BYTES + inp.weight_bytes) / inp.host_bandwidth, 0.0)
    return exposed, optimizer, offload


def _select(kinds: list[str], values: dict[str, Num], present: dict[str, Num]) -> tuple[Num, Num]:
    """(max value, index of the kind that attains it first) over present kinds."""
    best = None
    index = None
    for i, k in enumerate(kinds):
        v = np.where(present[k], values[k], -np.inf)
        if best is None:
            best, index = v, np.zeros_like(v, dtype=np.int64) if isinstance(v, np.ndarray) else 0
        else:
            better = v > best
            best = np.where(better, v, best)
            index = np.where(better, i, index)
    return best, index


KINDS = ["first", "middle", "last"]


def compose_step(inp: StepInputs) -> dict[str, Num]:
    """Step time and its breakdown (forward, backward, recompute, optimizer, bubble, TP / CP / PP /
    DP communication, offload) of the slowest stage, per Narayanan et al. 2021 §2.2 (see
    schedule/pipeline.py for the bubble)."""
    layers = stage_layers(inp)
    parts = stage_parts(inp, layers)
    present = {"first": True, "middle": inp.pp > 2, "last": inp.pp > 1}
    work = {k: _work(parts[k]) for k in KINDS}
    slowest_work, slowest = _select(KINDS, work, present)
    layer_unit = _work(_stage_sum(inp, 1.0, 0.0, 0.0) | {"pp": 0.0})
    middle_layers = inp.layers - layers["first"] - np.where(present["last"], layers["last"], 0)
    middle_total = np.where(present["middle"], middle_layers * layer_unit + (inp.pp - 2) * parts["middle"]["pp"], 0.0)
    total_work = work["first"] + np.where(present["last"], work["last"], 0.0) + middle_total
    bubble = bubble_from_work_s(total_work, slowest_work, np.where(inp.interleaved, inp.vpp, 1))

    params = _stage_params(inp, layers)
    tails = {k: tail_terms(inp, params[k], parts[k]) for k in KINDS}
    tail_sum = {k: tails[k][0] + tails[k][1] + tails[k][2] for k in KINDS}
    _, tail_kind = _select(KINDS, tail_sum, present)

    def pick(index, values):
        return np.where(index == 0, values[0], np.where(index == 1, values[1], values[2]))

    m = inp.microbatches
    names = {"forward": "forward_s", "backward": "backward_s", "recompute": "recompute_s",
             "tp": "tp_comm_s", "cp": "cp_comm_s", "pp": "pp_comm_s"}  # report.result.TimeBreakdown fields
    out = {name: m * pick(slowest, [parts[k][part] for k in KINDS]) for part, name in names.items()}
    out["bubble_s"] = bubble
    out["dp_comm_s"] = pick(tail_kind, [tails[k][0] for k in KINDS])
    out["optimizer_s"] = pick(tail_kind, [tails[k][1] for k in KINDS])
    busy = out["forward_s"] + out["backward_s"] + out["recompute_s"] + out["tp_comm_s"] + out["cp_comm_s"]
    fullest = np.maximum(layers["first"], np.maximum(layers["middle"], layers["last"]))
    traffic = 2.0 * fullest * (
        inp.layer_activation_bytes * inp.offload_activations + inp.layer_params * inp.weight_bytes * inp.offload_weights
    )
    streamed = m * np.maximum(0.0, traffic / inp.host_bandwidth - busy / m)
    # activation / weight streaming (PCIe) and the DP sync (NIC / NVLink) run on different links, so
    # they hide behind the same compute and each other: only what outlasts the DP exposure shows
    out["offload_s"] = pick(tail_kind, [tails[k][2] for k in KINDS]) + np.maximum(0.0, streamed - out["dp_comm_s"])
    out["step_time_s"] = (
        out["forward_s"] + out["backward_s"] + out["recompute_s"] + out["optimizer_s"] + out["bubble_s"]
        + out["tp_comm_s"] + out["cp_comm_s"] + out["pp_comm_s"] + out["dp_comm_s"] + out["offload_s"]
    )
    return out


def stage_memory_terms(inp: StepInputs, stage: Num) -> dict[str, Num]:
    """Bytes per GPU of pipeline stage ``stage``: weights, gradients, optimizer state (ZeRO-sharded
    over data × context ranks), in-flight activations, buffers, reserved."""
    is_first = stage == 0
    is_last = stage == inp.pp - 1
    layers = layers_on_stage(inp.layers, inp.pp, stage)
    params = (
        layers * inp.layer_params
        + np.where(is_first, inp.embedding_params, 0.0)
        + np.where(is_last, inp.head_params, 0.0)
    )
    transformer_params = layers * inp.layer_params
    shard_w = np.where(inp.zero >= 3, inp.dp_size, 1)
    shard_g = np.where(inp.zero >= 2, inp.dp_size, 1)
    shard_o = np.where(inp.zero >= 1, inp.dp_size, 1)
    in_flight = in_flight_chunks(inp.gpipe, inp.interleaved, inp.pp, inp.vpp, inp.microbatches, stage)
    transformer_acts = in_flight * layers * inp.layer_activation_bytes
    acts = (
        transformer_acts
        + np.where(is_first, in_flight * inp.embedding_activation_bytes, 0.0)
        + np.where(is_last, inp.head_activation_bytes, 0.0)
    )
    offloaded_acts = 2.0 * inp.layer_activation_bytes  # one layer being written out, one read back
    streamed_weights = 2.0 * inp.layer_params * inp.weight_bytes
    out = {
        "weights": np.where(inp.offload_weights, streamed_weights, params * inp.weight_bytes / shard_w),
        "gradients": params * inp.grad_bytes / shard_g,
        "optimizer": np.where(inp.offload_optimizer, 0.0, params * inp.optimizer_bytes / shard_o),
        "activations": np.where(inp.offload_activations, offloaded_acts, acts),
        "transformer_activations": np.where(inp.offload_activations, offloaded_acts, transformer_acts),
        "transformer_states": transformer_params
        * (inp.weight_bytes / shard_w + inp.grad_bytes / shard_g + inp.optimizer_bytes / shard_o),
        "buffers": inp.layer_buffer_bytes + np.where(inp.zero >= 3, streamed_weights, 0.0),
        "reserved": inp.reserved_bytes,
    }
    out["peak"] = out["weights"] + out["gradients"] + out["optimizer"] + out["activations"] + out["buffers"] + out["reserved"]
    # second tier: what offload keeps in host memory (ZeRO-Offload / ZeRO-Infinity, Ren et al. 2021)
    out["host"] = (
        np.where(inp.offload_optimizer, params * inp.optimizer_bytes / shard_o, 0.0)
        + np.where(inp.offload_weights, params * inp.weight_bytes / shard_w, 0.0)
        + np.where(inp.offload_activations, acts, 0.0)
    )
    return out


def stage_peaks(inp: StepInputs) -> tuple[Num, Num]:
    """(HBM peak, host-memory use) per GPU, each the largest over stages: the first, the second
    (largest in-flight count among the middle stages) and the last suffice, since in-flight counts
    fall with the stage index."""
    first = stage_memory_terms(inp, 0)
    second = stage_memory_terms(inp, 1)
    last = stage_memory_terms(inp, inp.pp - 1)

    def largest(key: str) -> Num:
        return np.maximum(
            first[key], np.maximum(np.where(inp.pp > 2, second[key], 0.0), np.where(inp.pp > 1, last[key], 0.0))
        )

    return largest("peak"), largest("host")
