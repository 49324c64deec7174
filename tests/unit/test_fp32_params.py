"""fp32 parameters that are their own master (issue 33: MaxText weight_dtype float32, dtype bfloat16):
4 + 4 + 8 B of state per parameter (the gradient in the parameters' dtype whatever the reduction's), the layers' bf16 casts gathered (2 B) and the weight gradients reduced in
bf16 (2 B) before their cast to fp32 (cost.memory.state_bytes_per_param, compute_copy_bytes,
grad_reduce_bytes_per_param; the maxtext profile's sources cite MaxText and XLA). Every other profile keeps
its state and collective bytes, but torchtitan's (FSDP2 over fp32 parameters gathered as bf16 casts)."""

from __future__ import annotations

import pytest

from paraplan.catalog import framework_names, load_framework, load_model, load_system
from paraplan.cost.frameworks import apply_framework
from paraplan.cost.memory import (
    StateBytes,
    compute_copy_bytes,
    grad_reduce_bytes_per_param,
    state_bytes_per_param,
)
from paraplan.graph.params import parameter_counts
from paraplan.specs.plan import PlanSpec
from paraplan.step.constants import grad_reduce_bytes, system_terms
from paraplan.step.estimate import estimate

GiB = 2**30


def test_fp32_params_state_is_4_plus_4_plus_8():
    # fp32 parameters (4), fp32 gradients (4), Adam m and v in fp32 (8): 16 B, not 2 + 4 + 12 = 18
    assert state_bytes_per_param("bf16", "fp32", "fp32_params") == StateBytes(4.0, 4.0, 8.0)
    # a bf16 gradient reduction still leaves the kept gradient in the parameters' fp32 (FSDP2's foreach_reduce
    # casts the reduce-scatter output to the sharded parameter's dtype; JAX's gradient has the primal's dtype)
    assert state_bytes_per_param("bf16", "bf16", "fp32_params") == StateBytes(4.0, 4.0, 8.0)
    assert grad_reduce_bytes_per_param("bf16", "bf16") == 2.0
    assert state_bytes_per_param("fp8", "fp32", "fp32_params") == StateBytes(4.0, 4.0, 8.0)
    # fp32 training is 4 + 4 + 8 whatever the optimizer state
    assert state_bytes_per_param("fp32", "fp32", "fp32_params") == StateBytes(4.0, 4.0, 8.0)
    # the other states keep their values
    assert state_bytes_per_param("bf16", "fp32", "fp32_master") == StateBytes(2.0, 4.0, 12.0)
    assert state_bytes_per_param("bf16", "bf16", "param_dtype") == StateBytes(2.0, 2.0, 4.0)


def test_gradient_reduction_bytes_by_dtype():
    assert (
        compute_copy_bytes("bf16") == compute_copy_bytes("fp8") == compute_copy_bytes("fp16") == 2.0
    )
    assert compute_copy_bytes("fp32") == compute_copy_bytes("tf32") == 4.0
    assert grad_reduce_bytes_per_param("bf16", "fp32", "kept") == 4.0  # fp32 main grads
    assert grad_reduce_bytes_per_param("bf16", "bf16", "kept") == 2.0
    assert (
        grad_reduce_bytes_per_param("bf16", "fp32", "compute") == 2.0
    )  # bf16 wgrad output reduced
    assert grad_reduce_bytes_per_param("fp32", "fp32", "compute") == 4.0


def _terms(framework: str, dtype: str) -> dict:
    system, fields = apply_framework(
        load_framework(framework),
        load_system("dgx-h100-80gb"),
        {"gpus": 8, "global_batch": 16, "seq_length": 4096, "dtype": dtype},
    )
    return system, PlanSpec(**fields)


def test_maxtext_terms():
    system, plan = _terms("maxtext", "bf16")
    t = system_terms(system, "bf16", plan)
    assert (t["weight_bytes"], t["grad_bytes"], t["optimizer_bytes"]) == (4.0, 4.0, 8.0)
    assert (
        t["param_gather_bytes"] == t["gathered_weight_bytes"] == 2.0
    )  # the bf16 casts are gathered
    assert t["grad_reduce_bytes"] == 2.0 == grad_reduce_bytes(system, "bf16", plan)


# FSDP2 keeps the fp32 sharded parameters and gathers their bf16 casts (the torchtitan profiles' sources), so does
# FSDP1 under Accelerate's MixedPrecision (hf-transformers-fsdp's sources)
FP32_PARAMS = ("maxtext", "torchtitan", "torchtitan-compiled", "hf-transformers-fsdp")
# DeepSpeedEngine.communication_data_type defaults to the model dtype (the deepspeed profile's sources)
DEEPSPEED_COMMUNICATION_DTYPE = ("deepspeed", "hf-transformers-deepspeed")


def test_hf_fsdp_terms():
    """Accelerate's FSDP1 policy: fp32 shards (weights 4, gradients 4, moments 8 B), bf16 gathered (2 B) and
    reduce_dtype = param_dtype, so the reduce-scatter moves 2 B per parameter (grad_reduce_dtype compute)."""
    system, plan = _terms("hf-transformers-fsdp", "bf16")
    t = system_terms(system, "bf16", plan)
    assert (t["weight_bytes"], t["grad_bytes"], t["optimizer_bytes"]) == (4.0, 4.0, 8.0)
    assert t["param_gather_bytes"] == t["gathered_weight_bytes"] == 2.0
    assert t["grad_reduce_bytes"] == 2.0 == grad_reduce_bytes(system, "bf16", plan)


@pytest.mark.parametrize("framework", ["torchtitan", "torchtitan-compiled"])
def test_torchtitan_terms(framework):
    system, plan = _terms(framework, "bf16")
    t = system_terms(system, "bf16", plan)
    assert (t["weight_bytes"], t["grad_bytes"], t["optimizer_bytes"]) == (4.0, 4.0, 8.0)
    assert (
        t["param_gather_bytes"] == t["gathered_weight_bytes"] == t["gathered_outside_bytes"] == 2.0
    )
    assert t["grad_reduce_bytes"] == 4.0  # MixedPrecisionPolicy reduce_dtype float32


@pytest.mark.parametrize("framework", [f for f in framework_names() if f not in FP32_PARAMS])
@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp32"])
def test_every_other_profile_keeps_its_bytes(framework, dtype):
    """No other profile sets fp32 parameters or a compute-dtype reduction but DeepSpeed's, whose
    communication_data_type is the model dtype, the kept one under ZeRO (step.constants.zero0_terms: the
    BF16_Optimizer's fp32 gradients at zero 0 are reduced in bf16): the weights' bytes are what a gather moves
    (outside fp8 primary weights, gathered and held in fp8 in the layers) and holds, and gradients are reduced
    in the dtype they are kept in (under ZeRO for DeepSpeed's)."""
    assert load_framework(framework).optimizer_state != "fp32_params"
    reduce = "compute" if framework in DEEPSPEED_COMMUNICATION_DTYPE else "kept"
    assert load_framework(framework).grad_reduce_dtype == reduce
    system, plan = _terms(framework, dtype)
    t = system_terms(system, dtype, plan)
    # the layers' gathered copy holds what the gather moves (fp8 where fp8 weights are gathered), the blocks
    # outside them the weights' own bytes
    assert t["gathered_weight_bytes"] == t["param_gather_bytes"]
    assert t["gathered_outside_bytes"] == t["weight_bytes"]
    assert t["param_gather_bytes"] in (t["weight_bytes"], 1.0)
    assert t["grad_reduce_bytes"] == t["grad_bytes"]


def test_maxtext_case_state_memory_by_hand():
    """Llama-2 7B on 8 H100s, FSDP 8 (zero 3): each GPU holds P/8 parameters at 4 + 4 + 8 B."""
    model = load_model("llama2-7b")
    system, fields = apply_framework(
        load_framework("maxtext"),
        load_system("dgx-h100-80gb"),
        {"gpus": 8, "dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 16, "seq_length": 4096},
    )
    est = estimate(model, system, PlanSpec(**fields))
    p = parameter_counts(model).total
    stage = est.stages[0]
    assert stage.weights_bytes == pytest.approx(p * 4 / 8, rel=1e-12)
    assert stage.gradients_bytes == pytest.approx(p * 4 / 8, rel=1e-12)
    assert stage.optimizer_bytes == pytest.approx(p * 8 / 8, rel=1e-12)
    # 6,738,415,616 parameters: (4 + 8) B / 8 = 9.4135 GiB of weights and optimizer state
    assert p == 6_738_415_616
    assert (stage.weights_bytes + stage.optimizer_bytes) / GiB == pytest.approx(9.4135, abs=1e-4)
