"""Blocking copies of the CUDA RNG state (issue 32): what saving and restoring the generator costs a layer
on a PyTorch whose CUDA generator state lives on the GPU.

Up to PyTorch 1.1 the CUDA generator kept 200 MTGP32 states on the device, and ``torch.cuda.get_rng_state``
copied them to a host tensor with ``cudaMemcpy`` (aten/src/THC/THCTensorRandom.cu THCRandom_getRNGState:
states_size = MAX_NUM_BLOCKS · sizeof(curandStateMtgp32) = 200 · 4120 B, plus the 8 B seed and the 8 B Philox
offset, host-side: 824,016 B in all, the size pytorch/pytorch issue #20843 reports for 1.1.0);
``set_rng_state`` copied them back (THCRandom_setRNGState, ``cudaMemcpy`` host to device and a fix-up kernel).
``cudaMemcpy`` from device to pageable host memory returns only once the copy is done, and to the device from
pageable memory syncs the stream first (CUDA Runtime API, "API synchronization behavior"); PyTorch issued on
the legacy default stream, so each copy drains the GPU. PyTorch 1.2 dropped the MTGP32 states (pytorch/pytorch
pull 20886, "Remove curandStateMTGP32 usage", May 2019): the state is the host-side seed and offset, no
device copy, and a profile of such a stack states 0 bytes.

Megatron-LM saves and restores the state around every attention dropout (mpu/random.py
CudaRNGStatesTracker.fork: get, set, get, set) and in its activation checkpoint (CheckpointFunction: a get in
forward; in backward a get, a set before the recomputed forward and a set after it): a profile states the two
counts (``rng_copies_per_pass``, ``rng_copies_per_checkpoint``) and the bytes (``rng_state_copy_bytes``).
"""

from __future__ import annotations

from paraplan.specs.system import EfficiencySpec


def rng_state_copy_s(
    copy_bytes: float, host_bandwidth: float, sync_latency_s: float, launch_s: float
) -> float:
    """GPU seconds idle per blocking copy of the CUDA RNG state: t_sync + t_launch + B / W, 0 when B = 0.

    The copy drains the queue (the device round trip t_sync, ``host_sync_latency_s``), moves B bytes over
    the host link at W (``host_bandwidth``: the pinned-memory rate, so a floor for the pageable host tensor
    PyTorch copies into), and the GPU then waits for the host to issue the next kernel (t_launch, one
    kernel issue), as a batch-load synchronisation does (cost.runtimes.batch_sync_idle_s)."""
    if copy_bytes <= 0.0:
        return 0.0
    return sync_latency_s + launch_s + copy_bytes / host_bandwidth


def layer_rng_copies_s(
    eff: EfficiencySpec, host_bandwidth: float, dropout_calls: int, attention_calls: int
) -> tuple[float, float]:
    """(per forward run, per recomputed block) GPU seconds of a block's CUDA RNG state copies: the tracker's
    ``rng_copies_per_pass`` around each of the block's ``dropout_calls`` attention dropouts, every time the
    forward runs (a recomputed forward again), and the checkpoint function's ``rng_copies_per_checkpoint``
    once per recomputed block that holds a layer (``attention_calls`` > 0; Megatron-LM checkpoints one layer
    per call, --checkpoint-num-layers 1); each copy rng_state_copy_s."""
    per_copy = rng_state_copy_s(
        eff.rng_state_copy_bytes,
        host_bandwidth,
        eff.host_sync_latency_s,
        eff.host_launch_s / eff.host_speed,
    )
    if per_copy == 0.0 or attention_calls == 0:
        return 0.0, 0.0
    return (
        dropout_calls * eff.rng_copies_per_pass * per_copy,
        eff.rng_copies_per_checkpoint * per_copy,
    )
