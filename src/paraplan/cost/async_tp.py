"""PyTorch AsyncTP: the exposed time of the collective matmuls torch's symmetric memory decomposes (issue 33).

With ``enable_async_tensor_parallel`` (torchtitan; torch._inductor.config._micro_pipeline_tp), Inductor's
micro-pipeline pass replaces an all-gather feeding GEMMs by ``symm_mem.fused_all_gather_matmul`` and a
reduce-scatter of one GEMM's output by ``symm_mem.fused_matmul_reduce_scatter``
(torch/_inductor/fx_passes/micro_pipeline_tp.py). Both are decompositions in Python over the t ranks of the
group, not fused kernels (pytorch/pytorch torch/distributed/_symmetric_memory/__init__.py, read at 0e9ed9cf,
a 2025 revision with the same algorithm as the June 2025 torch the torchtitan AsyncTP benchmarks ran):

- all-gather matmul (``_pipelined_multi_all_gather_and_consume``): each rank copies its shard into its
  symmetric-memory buffer ("mv") and passes a barrier before any GEMM ("we are giving up the chance to overlap
  mv and b with the first shard_consumer"); it multiplies its own shard first, then for each of the t − 1 peers
  pulls the peer's shard with a copy-engine ``copy_`` and multiplies it, on two alternating streams, the
  copies of the two streams never overlapping each other; a final barrier.
- matmul reduce-scatter (``_pipelined_produce_and_all2all``): for each of the t − 1 peers it computes the peer's
  row chunk, passes a barrier, lets the peer pull the chunk with a copy-engine copy and passes a second barrier;
  its own chunk last; then ``torch.sum`` (``reduce_fn = partial(torch.sum, dim=0)``) over the t stacked
  partials, a separate kernel after the pipeline.

So the GEMM runs as t row chunks of M/t (their efficiency is the GEMM pricing's at that shape: wave
quantisation of small chunks), the transfers run as a chain of t − 1 shard copies that hides behind the
GEMM chunks after the first, and two memory passes stay in series: the shard copy before an all-gather matmul
and the reduction after a matmul reduce-scatter. Copy-engine copies take no SMs, so there is no SM contention
to price (unlike Transformer Engine's userbuffers kernels, cost.overlap.userbuffers_contention_s).

Assumed, not measured here: the copy-engine pulls move the collective's bytes at the rate cost.comm gives the
NCCL collective (the project holds no copy-engine peer-copy measurement; nvbandwidth's
device_to_device_memcpy_read_ce on 8 H100s, all pairs at once, would settle it), and a barrier costs one NVLink
message latency. The June 2025 torch of the torchtitan AsyncTP runs (38410cf9) takes this decomposition at their
shapes: the native ``_async_input_mm`` path needs TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP and 2048 < M ≤ 4096 rows,
the multimem path M ≤ 2048 without the gathered input returned.
"""

from __future__ import annotations

from paraplan.cost.comm import GroupSpan, collective_costs_s
from paraplan.cost.compute import gemm_time_s, memory_time_s
from paraplan.cost.elementwise import maximum
from paraplan.cost.overlap import UB_COLUMN_BACKWARD_SMS, UB_ROW_FORWARD_SMS
from paraplan.graph.ops import LayerGraph, Op
from paraplan.specs.system import AcceleratorSpec, SystemSpec

# Share of HBM peak ATen's torch.sum reaches when it reduces the t stacked partials of a matmul reduce-scatter:
# 23-43 % on the shapes measured in pytorch/pytorch PR #191803 ("Fuse the final reduction in
# matmul_reduce_scatter into one Triton kernel", 2026-07: ATen's reduce_kernel is instruction-bound for a
# reduction of extent 2-8; the Triton kernel that replaced it reaches 82-88 % at the same traffic). The
# midpoint of the published range; torch releases before that PR (the June 2025 torchtitan runs among them)
# reduce with torch.sum.
TORCH_SUM_PARTIALS_HBM_SHARE = 0.33


def decomposed_collective_matmul_exposed_s(comm_s, gemm_s, tp, serial_s, step_sync_s):
    """Exposed seconds of one collective matmul decomposed over ``tp`` ranks (module docstring): the GEMM in tp
    row chunks (``gemm_s``: their summed time), the collective's bytes as a chain of tp − 1 peer copies
    (``comm_s``: the collective's time, each copy comm/(tp − 1)) each after ``step_sync_s`` of barriers, and
    ``serial_s`` of memory passes no GEMM hides. The chain starts with the first GEMM chunk (the own shard,
    or the first peer's chunk) and the last GEMM chunk (the last shard, or the own chunk) runs after it, so
    tp − 1 chunks hide the chain:
    exposed = serial + max(0, comm + (tp − 1)·sync − (tp − 1)/tp·gemm)."""
    t = maximum(tp, 1.0)
    chain = comm_s + (t - 1.0) * step_sync_s
    return serial_s + maximum(0.0, chain - (t - 1.0) / t * gemm_s)


def shard_copy_s(collective_bytes: float, tp: int, acc: AcceleratorSpec) -> float:
    """Seconds of an all-gather matmul's copy of the own shard into the symmetric-memory buffer (one
    ``copy_`` kernel): S/t bytes read and written once, 2·S/t bytes through the one rule of a memory-bound
    pass, cost.compute.memory_time_s (2·S/t / (B_HBM·η_HBM) + the kernel overhead, or the accelerator's
    measured copy table), S the gathered tensor's bytes. Its eager traffic factor is the compiled stack's 1:
    torchtitan refuses AsyncTP without torch.compile (torchtitan/models/llama3/infra/parallelize.py
    parallelize_llama: "Async TP requires --training.compile")."""
    return memory_time_s(2.0 * collective_bytes / max(tp, 1), acc)


def stacked_partials_reduce_s(collective_bytes, tp, hbm_bandwidth):
    """Seconds of a matmul reduce-scatter's torch.sum over the tp stacked partials: S read (the t partial
    chunks of S/t, S the reduce-scatter's input bytes) and S/t written, at TORCH_SUM_PARTIALS_HBM_SHARE of HBM
    peak: S·(1 + 1/t) / (B_HBM · share)."""
    return (
        collective_bytes
        * (1.0 + 1.0 / maximum(tp, 1.0))
        / (hbm_bandwidth * TORCH_SUM_PARTIALS_HBM_SHARE)
    )


# the GEMMs an AsyncTP pass fuses with the sequence-parallel collectives around them: column-parallel GEMMs consume
# an all-gathered input (the output projection too: the final norm's Shard(1) output is gathered for the LM head),
# row-parallel GEMMs produce a reduce-scattered output, and in backward the row-parallel dgrad consumes the
# all-gathered output gradient (the names of graph.transformer's TP GEMMs, cost.overlap's userbuffers tables)
COLUMN_GEMMS = (*UB_COLUMN_BACKWARD_SMS, "lm_head")
ROW_GEMMS = tuple(UB_ROW_FORWARD_SMS)


def chunked_gemm_s(op: Op, acc: AcceleratorSpec, dtype: str, tp: int, dgrad: bool = False) -> float:
    """Seconds of ``op``'s forward GEMM (or, ``dgrad``, its data-gradient GEMM dX = dY·Wᵀ, half its backward
    FLOPs) as the decomposed collective matmuls run it: t row chunks of M/t rows issued on two alternating
    streams, so two consecutive chunks run at once ("in addition to computation/communication overlapping, the
    strategy allows for computation/computation overlapping, greatly reducing quantization inefficiency",
    module docstring's source): t/2 × cost.compute.gemm_time_s of a GEMM of 2M/t rows (a pair's tiles share
    the SMs; the GEMM pricing gives the pair its wave quantisation and ramp)."""
    b, m, n, k = op.gemm_shape
    pairs = max(1.0, tp / 2.0)
    rows = max(1, round(m / pairs))
    if dgrad:
        return pairs * gemm_time_s(op.bwd_flops / 2.0 / pairs, (b, rows, k, n), acc, dtype)
    return pairs * gemm_time_s(op.fwd_flops / pairs, (b, rows, n, k), acc, dtype)


def with_async_tp_exposure(
    comm, block: LayerGraph, system: SystemSpec, dtype: str, tp_span: GroupSpan
):
    """``comm`` (a step.block_sums.BlockComm) with the block's TP exposure under PyTorch AsyncTP (module
    docstring), read by step.block_terms where the plan overlaps TP communication: ``tp_async`` 1,
    ``tp_async_forward`` the forward TP seconds exposed (each all-gather fused with its column-parallel GEMM,
    each reduce-scatter with its row-parallel GEMM, decomposed_collective_matmul_exposed_s; the block's other
    forward TP collectives whole), ``tp_async_backward`` the exposed seconds of the backward collectives AsyncTP
    fuses (the output-gradient all-gathers with the row-parallel dgrads; in a block without row-parallel
    GEMMs, the LM head, its input-gradient reduce-scatter with its dgrad) and ``tp_async_backward_comm`` those
    collectives' seconds (the rest of the backward stays as block_comm booked it). Unchanged where the block's
    collectives and GEMMs do not pair one to one (the embedding's reduce-scatter has no GEMM) or TP is 1."""
    tp = tp_span.size
    if tp <= 1 or not block.collectives:
        return comm
    calls = _tp_calls(block, system, tp_span)
    if calls is None:
        return comm
    acc = system.accelerator
    cols = [op for op in block.ops if op.kind == "gemm" and op.name in COLUMN_GEMMS]
    rows = [op for op in block.ops if op.kind == "gemm" and op.name in ROW_GEMMS]
    ag_f, rs_f, ag_b = calls
    if len(ag_f) != len(cols) or len(rs_f) != len(rows) or not (cols or rows):
        return comm
    sync = system.node.nvlink_latency  # one symmetric-memory barrier: a message latency over NVLink
    gathered = [_gathered(t, s, op, acc, dtype, tp, sync, False) for (t, s), op in zip(ag_f, cols)]
    scattered = [
        _scattered(t, s, op, acc, dtype, tp, sync, False) for (t, s), op in zip(rs_f, rows)
    ]
    fused_f = sum(t for t, _ in ag_f) + sum(t for t, _ in rs_f)
    if rows and len(ag_b) == len(rows):
        back = [_gathered(t, s, op, acc, dtype, tp, sync, True) for (t, s), op in zip(ag_b, rows)]
    elif not rows and len(ag_b) == len(cols):
        back = [_scattered(t, s, op, acc, dtype, tp, sync, True) for (t, s), op in zip(ag_b, cols)]
    else:
        return comm
    return comm._replace(
        tp_async=1.0,
        tp_async_forward=comm.tp_forward - fused_f + sum(gathered) + sum(scattered),
        tp_async_backward=sum(back),
        tp_async_backward_comm=sum(t for t, _ in ag_b),
    )


def _gathered(time_s, size, op, acc, dtype, tp, sync, dgrad) -> float:
    """An all-gather matmul's exposure: the shard copy and its two barriers in series."""
    serial = shard_copy_s(size, tp, acc) + 2.0 * sync
    gemm = chunked_gemm_s(op, acc, dtype, tp, dgrad)
    return decomposed_collective_matmul_exposed_s(time_s, gemm, tp, serial, 0.0)


def _scattered(time_s, size, op, acc, dtype, tp, sync, dgrad) -> float:
    """A matmul reduce-scatter's exposure: two barriers per peer copy, the partials' reduction in series."""
    serial = stacked_partials_reduce_s(size, tp, acc.hbm_bandwidth) + 2.0 * sync
    gemm = chunked_gemm_s(op, acc, dtype, tp, dgrad)
    return decomposed_collective_matmul_exposed_s(time_s, gemm, tp, serial, 2.0 * sync)


def _tp_calls(block: LayerGraph, system: SystemSpec, tp_span: GroupSpan):
    """(forward all-gathers, forward reduce-scatters, backward all-gathers) of the block's group-tp collectives,
    one (seconds, bytes) per call (cost.comm.collective_costs_s); None for a 2D-grid block (tp_row / tp_col)."""
    ag_f, rs_f, ag_b = [], [], []
    for c in block.collectives:
        if c.group in ("tp_row", "tp_col"):
            return None
        if c.group != "tp" or c.kind not in ("all_gather", "reduce_scatter"):
            continue
        time = collective_costs_s(c.kind, c.bytes, tp_span, system)[0]
        call = (time, c.bytes)
        if c.kind == "all_gather" and c.overlaps_with == "none":
            ag_f += [call] * c.count_fwd
            ag_b += [call] * c.count_bwd
        elif c.kind == "reduce_scatter":
            rs_f += [call] * c.count_fwd
    return ag_f, rs_f, ag_b
