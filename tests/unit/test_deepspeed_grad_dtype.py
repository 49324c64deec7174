"""DeepSpeed's gradient dtype by ZeRO stage (step.constants.zero0_terms, at_zero_stage): DeepSpeedEngine.get_data_types
keeps a bf16 model's gradients in bf16 under ZeRO 1-3 and in fp32 without ZeRO (the BF16_Optimizer, with its
per-micro-batch accumulation pass), and communication_data_type reduces them in the model dtype; fp16 and fp32
keep theirs at every stage. Bytes by hand."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.api import estimate
from paraplan.catalog import load_framework, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.specs.plan import RuntimeFields
from paraplan.specs.rules_stack import runs_bf16_optimizer
from paraplan.step.constants import at_zero_stage, system_terms, zero0_terms

H100 = "dgx-h100-80gb"
PLAN = {"gpus": 8, "micro_batch": 4, "global_batch": 64, "seq_length": 2048}


def _system(profile: str, **runtime):
    system = framework_system(load_framework(profile), load_system(H100))
    if not runtime:
        return system
    acc = system.accelerator
    eff = acc.efficiency.model_copy(
        update={"runtime": acc.efficiency.runtime.model_copy(update=runtime)}
    )
    return system.model_copy(update={"accelerator": acc.model_copy(update={"efficiency": eff})})


def _grad_terms(terms: dict) -> tuple:
    return terms["grad_bytes"], terms["grad_reduce_bytes"], terms["grad_accumulation_bytes"]


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_bf16_weights_without_zero_run_the_bf16_optimizer(dtype):
    """zero 0: fp32 gradients (4 B), reduced in bf16 (communication_data_type: 2 B), 2 + 4 + 3·4 = 18 B of
    accumulation per parameter and micro-batch (update_hp_grads)."""
    assert zero0_terms(_system("deepspeed"), dtype) == {
        "grad_bytes": 4.0,
        "grad_reduce_bytes": 2.0,
        "grad_accumulation_bytes": 18.0,
    }


def test_bf16_with_zero_keeps_and_reduces_bf16_gradients():
    """ZeRO 1-3 (get_data_types: grad_accum_dtype = the model dtype): 2 B kept, 2 B reduced; at ZeRO 1 autograd
    adds each micro-batch into the bf16 param.grad (2 + 2 + 2 = 6 B: step.constants.zero_accumulation_bytes),
    ZeRO 3 none on the compute stream."""
    terms = system_terms(_system("deepspeed"), "bf16", load_framework("deepspeed"))
    assert _grad_terms(terms) == (2.0, 2.0, 0.0)
    assert _grad_terms(at_zero_stage(terms, 1)) == (2.0, 2.0, 6.0)
    assert _grad_terms(at_zero_stage(terms, 3)) == (2.0, 2.0, 0.0)
    assert _grad_terms(at_zero_stage(terms, 0)) == (4.0, 2.0, 18.0)


def test_at_zero_stage_picks_per_candidate():
    terms = system_terms(_system("deepspeed"), "bf16", load_framework("deepspeed"))
    picked = at_zero_stage(terms, np.array([0, 1, 2, 3]))
    assert picked["grad_bytes"].tolist() == [4.0, 2.0, 2.0, 2.0]
    assert picked["grad_accumulation_bytes"].tolist() == [
        18.0,
        6.0,
        4.0,
        0.0,
    ]  # ZeRO 2's bucket copy
    assert "zero0" not in picked


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_fp16_and_fp32_keep_their_gradients_at_every_stage(dtype):
    """fp16: the FP16 optimizers keep fp16 gradients as ZeRO does; fp32: fp32 everywhere."""
    assert zero0_terms(_system("deepspeed"), dtype) == {}


def test_stacks_without_the_flag_keep_one_gradient_dtype():
    assert zero0_terms(_system("megatron-core"), "bf16") == {}
    assert zero0_terms(_system("deepspeed", zero0_bf16_optimizer=False), "bf16") == {}


def test_megatron_deepspeed_keeps_fp32_gradients_and_reduce():
    """Megatron-DeepSpeed's BF16_Optimizer at every stage: fp32 kept and reduced (4 B), 18 B accumulation."""
    profile = load_framework("megatron-deepspeed")
    terms = system_terms(_system("megatron-deepspeed"), "bf16", profile)
    for zero in (0, 1):
        assert _grad_terms(at_zero_stage(terms, zero)) == (4.0, 4.0, 18.0)


def _estimate(zero: int, framework="deepspeed"):
    return estimate("gpt3-1.3b", H100, framework=framework, zero=zero, dtype="bf16", **PLAN)


def test_bf16_gradients_under_zero_take_less_memory_and_reduce_time():
    """ZeRO-1 under DeepSpeed's default keeps 2 B gradients (the bf16 weights' 2 B per parameter, unsharded at
    stage 1) instead of the 4 B of a stated fp32 grad_accum_dtype; both reduce in communication_data_type (bf16),
    the fp32 one through the BF16_Optimizer's own traffic as at zero 0 (step.bf16_optimizer_sync: all-reduce and
    the weights' all-gather, where ZeRO-1 reduce-scatters)."""
    bf16, fp32 = (
        _estimate(1),
        estimate(
            "gpt3-1.3b",
            H100,
            framework="deepspeed",
            zero=1,
            dtype="bf16",
            grad_dtype="fp32",
            **PLAN,
        ),
    )
    mem16, mem32 = bf16.stages[0], fp32.stages[0]
    assert mem16.gradients_bytes == pytest.approx(mem16.weights_bytes, rel=1e-12)
    assert mem32.gradients_bytes == pytest.approx(2.0 * mem16.gradients_bytes, rel=1e-12)
    assert fp32.breakdown.dp_comm_s == _estimate(0).breakdown.dp_comm_s
    assert bf16.breakdown.dp_comm_s < fp32.breakdown.dp_comm_s


def test_bf16_optimizer_at_zero0_lengthens_the_backward():
    """zero 0 runs the BF16_Optimizer's accumulation pass in every micro-batch's backward and keeps 4 B gradients."""
    on = _estimate(0)
    off = estimate(
        "gpt3-1.3b",
        H100,
        framework=load_framework("deepspeed").model_dump() | {"zero0_bf16_optimizer": False},
        zero=0,
        dtype="bf16",
        **PLAN,
    )
    assert on.breakdown.backward_s > off.breakdown.backward_s
    assert on.stages[0].gradients_bytes == pytest.approx(2.0 * off.stages[0].gradients_bytes)
    assert on.stages[0].gradients_bytes == pytest.approx(2.0 * on.stages[0].weights_bytes)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_zero1_with_fp32_gradients_runs_the_bf16_optimizer(dtype):
    """_do_optimizer_sanity_check (engine.py at v0.16.4): bf16 model, grad_accum_dtype fp32, stage
    1, no CPU offload -> BFLOAT16: 4 B kept, reduced in bf16 (2 B), 18 B accumulation per
    micro-batch, as at zero 0; with the optimizer offloaded the ZeRO-1 optimizer, whose fp32 grad_accum
    (fill_grad_accum_attribute) moves the same 18 B; at stage 2 the ZeRO-2 optimizer's bucket copy of
    the model-dtype gradient (4 B; zero_accumulation_bytes), none at stage 3."""
    assert _system("deepspeed").accelerator.efficiency.runtime.zero0_bf16_optimizer
    terms = system_terms(_system("deepspeed"), dtype, RuntimeFields(grad_dtype="fp32"))
    assert _grad_terms(at_zero_stage(terms, 1)) == (4.0, 2.0, 18.0)
    assert _grad_terms(at_zero_stage(terms, 0)) == (4.0, 2.0, 18.0)
    assert _grad_terms(at_zero_stage(terms, 1, offload_optimizer=True)) == (4.0, 2.0, 18.0)
    assert _grad_terms(at_zero_stage(terms, 2)) == (4.0, 2.0, 4.0)
    assert _grad_terms(at_zero_stage(terms, 3)) == (4.0, 2.0, 0.0)
    picked = at_zero_stage(terms, np.array([0, 1, 1, 2]), np.array([False, False, True, False]))
    assert picked["grad_accumulation_bytes"].tolist() == [18.0, 18.0, 18.0, 4.0]
    # the first micro-batch: the BF16_Optimizer adds every one; fill_grad_accum_attribute casts only (18 - 6)
    assert picked["grad_accumulation_first_saving_bytes"].tolist() == [0.0, 0.0, 12.0, 0.0]


def test_runs_bf16_optimizer_by_stage():
    assert runs_bf16_optimizer(0, False) and runs_bf16_optimizer(0, True)
    assert not runs_bf16_optimizer(1, False)
    assert runs_bf16_optimizer(1, True) and not runs_bf16_optimizer(1, True, True)
    assert not runs_bf16_optimizer(2, True) and not runs_bf16_optimizer(3, True)


def test_zero1_fp32_gradients_pay_the_accumulation_pass_by_hand():
    """gpt3-1.3b on 8 H100s, micro-batch 4, global batch 64: m = 2 micro-batches, each adding P·18 B
    at the HBM rate (cost.runtimes.grad_accumulation_s; the BF16_Optimizer adds into its fp32 buffer on
    every one) against the bf16 param.grad's one add of P·6 B per step at ZeRO 1 with bf16 gradients (the
    first micro-batch's gradient stolen by AccumulateGrad): P = the bf16 weights' bytes / 2."""
    bf16 = _estimate(1)
    fp32 = estimate(
        "gpt3-1.3b", H100, framework="deepspeed", zero=1, dtype="bf16", grad_dtype="fp32", **PLAN
    )
    params = bf16.stages[0].weights_bytes / 2.0
    rate = _system("deepspeed").accelerator.hbm_rate()
    by_hand = params * (2 * 18.0 - 6.0) / rate
    assert by_hand == pytest.approx(0.0138825, rel=1e-3)
    assert fp32.breakdown.backward_s - bf16.breakdown.backward_s == pytest.approx(by_hand, rel=1e-9)
    assert fp32.breakdown.backward_s == pytest.approx(_estimate(0).breakdown.backward_s, rel=1e-12)
    # the BF16_Optimizer's own traffic, as at zero 0 (step.bf16_optimizer_sync)
    assert fp32.breakdown.dp_comm_s == pytest.approx(_estimate(0).breakdown.dp_comm_s, rel=1e-12)
