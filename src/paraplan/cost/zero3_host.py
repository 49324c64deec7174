"""Host and HBM time of DeepSpeed's per-parameter ZeRO-3 collectives (v0.3.13-v0.5.x).

The Python-side issue of each per-parameter all-gather and reduce-scatter (partition views built in a
loop over the ranks, list copies into flat buffers, zeroed gather buffers, the measured fixed host time
per call) and how much of it the GPU work queued beside it hides. ``step.zero3_legacy`` composes them;
the collectives' own wire time is ``cost.comm``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def list_gather_copies_s(
    ranks: Any, calls: Any, size_bytes: Any, kernel_overhead_s: Any, hbm_rate: Any
) -> Any:
    """Copy-back of ``calls`` all-gathers into lists of per-rank outputs, S bytes gathered in all:
    calls·n·t_kernel + 2·S/HBM rate. torch.distributed.all_gather with a list of n output tensors
    (DeepSpeed <= 0.5.4 ``_allgather_param`` passes n partition views) gathers into a flat buffer and
    then copies it into each output, one copy kernel per rank (PyTorch ProcessGroupNCCL::allgather);
    the device synchronize before each gather leaves nothing to hide them behind."""
    return calls * ranks * kernel_overhead_s + 2.0 * size_bytes / hbm_rate


# ---- ZeRO-3 per-parameter collectives of DeepSpeed v0.3.13-v0.5.x (partition_parameters.py) ------------
# Host time of one eager PyTorch view op (narrow / view / split) issued from Python: the PyTorch operator
# micro-benchmark of ``split`` (a call returning views) measured 1.4 us per call in eager mode without the
# __torch_function__ dispatch layer and 2.3 us with it (pytorch/pytorch issue #30831, Dec 2019; PR #32194
# moved that layer to C++ before PyTorch 1.5). A component measurement, not fitted to any step time.
EAGER_VIEW_OP_S = 1.4e-6


def rank_loop_views_s(
    ranks: Any, calls: Any, views_per_rank: Any, view_op_s: Any = EAGER_VIEW_OP_S
) -> Any:
    """calls·n·v·t_view: host time of a Python loop over the n ranks that builds v partition views per rank
    for each of ``calls`` collectives (microsoft/DeepSpeed v0.3.14, 0cd9abf, partition_parameters.py:
    ``_allgather_param`` does ``flat_tensor.narrow(...)`` per rank, v = 1; ``_reduce_scatter_gradient`` does
    ``param.grad.view(-1).narrow(...)`` per rank, v = 2); t_view = EAGER_VIEW_OP_S (pytorch/pytorch#30831).
    The ``torch.distributed.get_rank`` call in the gather loop is not counted (no published measurement)."""
    return calls * ranks * views_per_rank * view_op_s


# Host time of one DeepSpeed per-parameter all-gather, measured: "pre_launch" (torch.zeros, torch.cuda.synchronize,
# the partition loop) ~130 us and "launch" (torch.distributed.all_gather with the n-entry output list) ~250 us on one
# p4d.24xlarge (8 A100, NVLink), DeepSpeed 0.3.16+47ec97eb, PyTorch 1.8.0 (microsoft/DeepSpeed issue #1069, comment of
# 2021-06-21, setup in issue #1174). A component measurement, not fitted to any step time.
DS_GATHER_CALL_HOST_S = 380e-6
DS_GATHER_CALL_HOST_RANKS = 8


def gather_call_host_overhead_s(
    calls: Any, kernel_overhead_s: Any, view_op_s: Any = EAGER_VIEW_OP_S
) -> Any:
    """calls·max(0, T₈ − 8·(t_view + t_kernel)): the per-call host time of DeepSpeed's ``_allgather_param`` beyond its
    per-rank terms (rank_loop_views_s, the list copies of list_gather_copies_s), T₈ = DS_GATHER_CALL_HOST_S measured at
    8 ranks (microsoft/DeepSpeed issue #1069); what stays is the fixed part (allocation, synchronize, the NCCL launch,
    the ``print_rank_0`` f-strings formatted on every call). Issued after a device synchronize: nothing hides it."""
    fixed = np.maximum(
        0.0, DS_GATHER_CALL_HOST_S - DS_GATHER_CALL_HOST_RANKS * (view_op_s + kernel_overhead_s)
    )
    return calls * fixed


def coalesced_gather_copy_back_s(
    ranks: Any, numels: tuple, kernel_overhead_s: Any, view_op_s: Any = EAGER_VIEW_OP_S
) -> Any:
    """Σ_s (1 + ⌈s/p_s⌉·(3·t_view + t_kernel)), p_s = ⌈s/n⌉: host time of DeepSpeed's coalesced gather
    (``_allgather_params``, microsoft/DeepSpeed 0cd9abf, partition_parameters.py) for tensors of s elements: one copy
    of the own partition in, then per tensor a Python loop over the ranks whose padded partition holds a piece,
    each ``partitions[i].narrow``, ``view(-1).narrow`` and one ``copy_`` kernel; t_view = EAGER_VIEW_OP_S."""
    sizes = np.asarray(
        numels, dtype=float
    )  # (tensors,), or (candidates, tensors) padded with zeros (arrays.stack)
    if not sizes.size:
        return 0.0
    n = np.asarray(ranks, dtype=float)
    n = n[..., None] if n.ndim else n
    held = sizes > 0
    safe = np.where(held, sizes, 1.0)
    pieces = np.ceil(safe / np.ceil(safe / n))
    per_tensor = np.where(
        held, kernel_overhead_s + pieces * (3.0 * view_op_s + kernel_overhead_s), 0.0
    )
    total = np.sum(per_tensor, axis=-1)
    return float(total) if np.ndim(total) == 0 else total


def gather_buffer_zeroing_s(size_bytes: Any, hbm_rate: Any) -> Any:
    """S/HBM rate: ``_allgather_param`` (microsoft/DeepSpeed v0.3.14, 0cd9abf, partition_parameters.py)
    allocates each gathered parameter with ``torch.zeros(aligned size)`` and then calls
    ``torch.cuda.synchronize()``, so the memset of the S gathered bytes runs with nothing to hide behind."""
    return size_bytes / hbm_rate


def list_reduce_scatter_host_s(
    ranks: Any, calls: Any, kernel_overhead_s: Any, view_op_s: Any = EAGER_VIEW_OP_S
) -> Any:
    """calls·n·(2·t_view + t_kernel): host time to issue ``calls`` per-parameter reduce-scatters whose input is a
    list of n partition views. DeepSpeed v0.3.13-v0.5.x ``_reduce_scatter_gradient`` (partition_parameters.py,
    microsoft/DeepSpeed 0cd9abf) builds the n views in Python (rank_loop_views_s, v = 2) and passes them to
    ``torch.distributed.reduce_scatter``, which copies each into a flat buffer, one copy kernel per rank
    (PyTorch ProcessGroupNCCL::reduce_scatter, ``inputFlattened[i][j].copy_``), t_kernel the catalog's
    ``efficiency.kernel_overhead_s``. Per-parameter calls lasted until v0.6.0 (reduce_scatter_coalesced)."""
    return rank_loop_views_s(ranks, calls, 2.0, view_op_s) + calls * ranks * kernel_overhead_s


def list_reduce_scatter_device_s(size_bytes: Any, hbm_rate: Any) -> Any:
    """4·S/HBM rate for S gradient bytes reduced per parameter in DeepSpeed v0.3.13-v0.5.x ZeRO-3: ``average_tensor``
    (stage3.py, microsoft/DeepSpeed 0cd9abf) divides the gradients in place by the world size (``div_``: read and
    write S) before ``reduce_gradients_at_owner``, and ProcessGroupNCCL::reduce_scatter copies the n-entry input
    list into its flat buffer (read and write S). The copy into the contiguous IPG bucket is not counted: it is
    skipped for tensors larger than reduce_bucket_size, which a run's config sets."""
    return 4.0 * size_bytes / hbm_rate


def host_exposed_s(host_s: Any, device_s: Any) -> Any:
    """max(0, host − device): host-side issue time that the GPU work queued in the same interval does not hide.
    DeepSpeed v0.3.13-v0.5.x ZeRO-3 issues a bucket's per-parameter reduce-scatters from the gradient hooks while
    the block's backward kernels run, and the next parameter fetch's ``torch.cuda.synchronize()`` (partition_parameters
    ``_allgather_param``) waits for both, so a block takes the longer of the two."""
    return np.maximum(0.0, host_s - device_s)
