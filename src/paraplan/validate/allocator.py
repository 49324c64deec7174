"""What PyTorch's caching allocator counts of a predicted stage peak: the figures measured memory is
compared on (``peak_allocated_gib``, ``peak_reserved_gib``; validate.run.predicted_metrics)."""

from __future__ import annotations

from paraplan.step.result import StageMemory

__all__ = ["allocator_peak_bytes", "allocator_reserved_peak_bytes"]


def allocator_peak_bytes(stage: StageMemory) -> float:
    """What the caching allocator's peak counts (torch.cuda.max_memory_allocated, the figure a measured
    ``peak_allocated_gib`` is): the predicted peak less the runtime's non-allocator reserves
    (specs.framework.FrameworkSpec.reserved_bytes: CUDA context and kernel images, NCCL / framework
    communication buffers, allocator fragmentation), which that counter does not see (PyTorch docs,
    "CUDA semantics: memory management": memory_allocated counts tensors only; the cached but unused
    blocks are memory_reserved)."""
    return stage.peak_bytes - stage.reserved_bytes


def allocator_reserved_peak_bytes(stage: StageMemory, outside_allocator_bytes: float) -> float:
    """What the caching allocator's reserved peak counts (torch.cuda.max_memory_reserved, memory_stats
    "reserved_bytes.all.peak", the figure a measured ``peak_reserved_gib`` is): the allocated peak plus the
    cached but unused blocks (the profile's allocator_fragmentation share of HBM), i.e. the predicted peak
    less what the allocator never holds, the CUDA context and kernel images and the communication library's
    own buffers (FrameworkSpec.cuda_context + communication_buffers; NCCL allocates its buffers with
    cudaMalloc outside PyTorch's caching allocator)."""
    return stage.peak_bytes - outside_allocator_bytes
