"""The gradient accumulation DeepSpeed's optimizers run at every ZeRO stage where the BF16_Optimizer does not
(step.constants.zero_accumulation_bytes, resolved per candidate by at_zero_stage / zero_stage_values): the
FP16 optimizers (fp16, no ZeRO), the basic optimizer (fp32) and the ZeRO-1 optimizer keep the model-dtype
param.grad into which autograd adds every micro-batch but the first (3 x its bytes; the gradients are None
after each step, so AccumulateGrad takes the first without an add), and the ZeRO-1 optimizer with an fp32
gradient_accumulation_dtype on a 2-byte model casts and adds into fp32 grad_accum (18 B; the first
micro-batch casts only, 6 B); ZeRO 2 copies each micro-batch's gradient into its IPG bucket (2·g per
parameter) and its partition's out of it, adding them up (5·g per partition parameter, 2·g on the first
micro-batch); ZeRO 3 runs no pass on the compute stream. Bytes by hand."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.api import estimate
from paraplan.catalog import load_framework, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.cost.runtimes import (
    accumulation_bytes_per_microbatch,
    param_grad_accumulation_bytes,
    separate_grad_accum_bytes,
    separate_grad_accum_first_bytes,
    zero2_bucket_copy_bytes,
    zero2_partition_bytes,
    zero2_partition_first_bytes,
)
from paraplan.specs.plan import RuntimeFields
from paraplan.step.constants import (
    at_zero_stage,
    least_zero_stage_terms,
    offloaded_partition_accumulation,
    system_terms,
    zero_accumulation_bytes,
    zero_stage_values,
)

H100 = "dgx-h100-80gb"
PLAN = {"gpus": 8, "micro_batch": 4, "global_batch": 64, "seq_length": 2048}


def _system(profile: str):
    return framework_system(load_framework(profile), load_system(H100))


def test_the_passes_by_hand():
    """read the held and the fresh gradient, write the sum: 2 + 2 + 2 and 4 + 4 + 4; cast (2 + 4) and add
    (4 + 4 + 4) into fp32 grad_accum."""
    assert param_grad_accumulation_bytes(2.0) == 6.0
    assert param_grad_accumulation_bytes(4.0) == 12.0
    assert separate_grad_accum_bytes() == 18.0
    assert separate_grad_accum_first_bytes() == 6.0  # the first micro-batch: the cast alone
    # ZeRO 2: the IPG bucket copy (read 2, write 2), the partition's copy (2 + 2) and add (2 + 2 + 2)
    assert zero2_bucket_copy_bytes(2.0) == 4.0 and zero2_bucket_copy_bytes(4.0) == 8.0
    assert zero2_partition_bytes(2.0) == 10.0 and zero2_partition_first_bytes(2.0) == 4.0


def test_the_step_spread_over_its_microbatches():
    """m·g − s over m micro-batches: fp16 param.grad, m = 2: one add of 6 B in the step (3 B each);
    grad_accum, m = 4: 6 + 3·18 = 60 B in the step (15 B each); m = 1: the cast alone."""
    assert accumulation_bytes_per_microbatch(6.0, 6.0, 2) == 3.0
    assert accumulation_bytes_per_microbatch(18.0, 12.0, 4) == 15.0
    assert accumulation_bytes_per_microbatch(18.0, 12.0, 1) == 6.0
    m = np.array([1, 2, 8])
    assert accumulation_bytes_per_microbatch(12.0, 12.0, m).tolist() == [0.0, 6.0, 10.5]


Z2 = (
    4.0,
    0.0,
    10.0,
    6.0,
)  # a 2-byte model's ZeRO 2: bucket copy; partition copy + add, first saves the add
Z2_FP32 = (8.0, 0.0, 20.0, 12.0)
Z3 = (0.0, 0.0, 0.0, 0.0)  # on reduce_and_partition_stream, not the compute stream


@pytest.mark.parametrize(
    "dtype, grad_dtype, cells",
    [
        ("bf16", "bf16", ((6.0, 6.0, 0.0, 0.0), (6.0, 6.0, 0.0, 0.0), Z2, Z3)),
        # zero 1 fp32 offloaded: grad_accum (the BF16_Optimizer's cell else)
        ("bf16", "fp32", ((6.0, 6.0, 0.0, 0.0), (18.0, 12.0, 0.0, 0.0), Z2, Z3)),
        ("fp16", "bf16", ((6.0, 6.0, 0.0, 0.0), (6.0, 6.0, 0.0, 0.0), Z2, Z3)),  # 2-byte dtype
        ("fp16", "fp32", ((6.0, 6.0, 0.0, 0.0), (18.0, 12.0, 0.0, 0.0), Z2, Z3)),
        ("fp32", "fp32", ((12.0, 12.0, 0.0, 0.0), (12.0, 12.0, 0.0, 0.0), Z2_FP32, Z3)),
        ("fp32", "bf16", ((12.0, 12.0, 0.0, 0.0), (12.0, 12.0, 0.0, 0.0), Z2_FP32, Z3)),
    ],
)
def test_cells_by_dtype(dtype, grad_dtype, cells):
    for profile in ("deepspeed", "megatron-deepspeed", "hf-transformers-deepspeed"):
        got = zero_accumulation_bytes(_system(profile), dtype, RuntimeFields(grad_dtype=grad_dtype))
        assert got == cells, profile


def test_stacks_without_deepspeeds_optimizers_have_none():
    assert zero_accumulation_bytes(_system("megatron-core"), "bf16") == ()
    assert zero_accumulation_bytes(_system("deepspeed-2021"), "fp16") == ()  # v0.3.14: not read


@pytest.mark.parametrize(
    "dtype, grad_dtype, by_zero, owned",
    [
        # the BF16_Optimizer at 0 and 1; ZeRO 2's bucket copy and partition passes; none at 3
        ("bf16", "fp32", [18.0, 18.0, 4.0, 0.0], [0.0, 0.0, 10.0, 0.0]),
        ("bf16", "bf16", [18.0, 6.0, 4.0, 0.0], [0.0, 0.0, 10.0, 0.0]),  # zero 1: bf16 param.grad
        ("fp16", "bf16", [6.0, 6.0, 4.0, 0.0], [0.0, 0.0, 10.0, 0.0]),  # FP16, ZeRO-1 optimizers
        ("fp16", "fp32", [6.0, 18.0, 4.0, 0.0], [0.0, 0.0, 10.0, 0.0]),  # ZeRO-1's grad_accum
        ("fp32", "fp32", [12.0, 12.0, 8.0, 0.0], [0.0, 0.0, 20.0, 0.0]),
    ],
)
def test_megatron_deepspeed_by_zero_stage(dtype, grad_dtype, by_zero, owned):
    """One rule at every ZeRO stage: the optimizer DeepSpeed runs decides (the profile's former 18 B field
    at ZeRO 2/3 is gone)."""
    terms = system_terms(_system("megatron-deepspeed"), dtype, RuntimeFields(grad_dtype=grad_dtype))
    picked = at_zero_stage(terms, np.array([0, 1, 2, 3]))
    assert picked["grad_accumulation_bytes"].tolist() == by_zero
    assert picked["grad_accumulation_owned_bytes"].tolist() == owned
    for zero, value in enumerate(by_zero):  # scalars as arrays
        assert at_zero_stage(terms, zero)["grad_accumulation_bytes"] == value


def test_the_bound_takes_the_least_cell():
    """step.compose.pipeline_bound_s prices a group with the least of each term over the ZeRO stages, the
    accumulation spread over the step's micro-batches: ZeRO 3's none, per parameter and per partition
    parameter; without a ZeRO-3 cell (the terms at stages 0-2) zero 1's bf16 param.grad at m = 4: 6 − 6/4,
    and zero 2's bucket copy 4 B would be the least."""
    terms = system_terms(_system("megatron-deepspeed"), "bf16", RuntimeFields(grad_dtype="bf16"))
    stage_terms = at_zero_stage(terms, 0)["zero_stage_terms"]
    least = least_zero_stage_terms(stage_terms, 4)
    assert least["grad_accumulation_bytes"] == 0.0
    assert least["grad_accumulation_owned_bytes"] == 0.0
    assert least["grad_accumulation_first_saving_bytes"] == 0.0
    assert least["grad_accumulation_owned_first_saving_bytes"] == 0.0
    assert (least["grad_bytes"], least["grad_reduce_bytes"]) == (2.0, 2.0)
    zero0, others, zero1, cells = stage_terms
    no_zero3 = (zero0, others, zero1, cells[:2] + (cells[2], cells[2]))
    least = least_zero_stage_terms(no_zero3, 4)
    assert least["grad_accumulation_bytes"] == 4.0  # min(18, 6 − 6/4, 4)
    assert (
        least["grad_accumulation_owned_bytes"] == 0.0
    )  # stages 0, 1 and the BF16_Optimizer own none


def _backward_added(zero: int, dtype: str, offload: bool = False) -> tuple[float, float]:
    """(backward seconds the deepspeed profile adds to the same stack without DeepSpeed's optimizers
    (zero0_bf16_optimizer false: no pass), P per GPU) of gpt3-1.3b on 8 H100s, micro-batch 4, global
    batch 64 (m = 2) at ZeRO ``zero`` in ``dtype``, the optimizer offloaded where ``offload``."""
    fields = {"zero": zero, "dtype": dtype, "offload_optimizer": offload, **PLAN}
    on = estimate("gpt3-1.3b", H100, framework="deepspeed", **fields)
    off = estimate(
        "gpt3-1.3b",
        H100,
        framework=load_framework("deepspeed").model_dump() | {"zero0_bf16_optimizer": False},
        **fields,
    )
    return on.breakdown.backward_s - off.breakdown.backward_s, on.stages[0].weights_bytes / 2.0


def test_fp16_zero1_pays_autograds_pass_by_hand():
    """gpt3-1.3b on 8 H100s, micro-batch 4, global batch 64, fp16 at ZeRO 1 under deepspeed: m = 2
    micro-batches, the first's gradient taken by AccumulateGrad (param.grad None after the step's
    zero_grad), the second adding P·6 B into the fp16 param.grad at the HBM rate
    (cost.runtimes.grad_accumulation_s): one add per step."""
    added, params = _backward_added(1, "fp16")
    by_hand = params * 6.0 / _system("deepspeed").accelerator.hbm_rate()
    assert by_hand == pytest.approx(0.0027765, rel=1e-3)
    assert added == pytest.approx(by_hand, rel=1e-9)


def test_zero2_passes_by_hand():
    """The same run in bf16 at ZeRO 2: each micro-batch copies the P bf16 gradients into the IPG bucket
    (P·4 B) and, of its P/8 partition, copies them out (4 B) and, but on the first micro-batch, adds them up
    (6 B): the step's backward moves 2·P·4 + P/8·(2·10 − 6) B more at the HBM rate."""
    added, params = _backward_added(2, "bf16")
    step_bytes = 2 * params * 4.0 + params / 8 * (2 * 10.0 - 6.0)
    assert added == pytest.approx(
        step_bytes / _system("deepspeed").accelerator.hbm_rate(), rel=1e-9
    )


def test_zero2_offloaded_runs_no_partition_pass_by_hand():
    """The same run with the optimizer offloaded: copy_grads_in_partition returns early under cpu_offload
    and the epilogue's averaged_gradients add runs only without it (stage_1_and_2.py 1315-1326, 763 at
    0050fdad): the IPG bucket copy alone, 2·P·4 B in the step (0.81 ms less than without offload)."""
    added, params = _backward_added(2, "bf16", offload=True)
    hbm = _system("deepspeed").accelerator.hbm_rate()
    assert added == pytest.approx(2 * params * 4.0 / hbm, rel=1e-9)
    kept, _ = _backward_added(2, "bf16")
    assert kept - added == pytest.approx(params / 8 * (2 * 10.0 - 6.0) / hbm, rel=1e-9)


def test_offloaded_partition_cells_are_zero_over_candidates():
    """zero_stage_values over candidates (the search's arrays): the partition cells 0 where offloaded, the
    bucket copy kept; offloaded_partition_accumulation by hand."""
    assert offloaded_partition_accumulation(10.0, True) == 0.0
    assert offloaded_partition_accumulation(10.0, False) == 10.0
    terms = system_terms(_system("deepspeed"), "bf16", RuntimeFields(grad_dtype="bf16"))
    stage_terms = at_zero_stage(terms, 0)["zero_stage_terms"]
    got = zero_stage_values(stage_terms, np.array([2, 2, 1]), np.array([False, True, True]))
    assert got["grad_accumulation_bytes"].tolist() == [4.0, 4.0, 6.0]
    assert got["grad_accumulation_owned_bytes"].tolist() == [10.0, 0.0, 0.0]
    assert got["grad_accumulation_owned_first_saving_bytes"].tolist() == [6.0, 0.0, 0.0]
