"""The runtime costs of training stacks (issue 33, cost.runtimes): FSDP2's and FSDP1's copies and casts, DeepSpeed's
PipelineEngine (blocking separate transfers, the BF16 optimizer's fp32 accumulation after every micro-batch),
fp8 primary weights gathered in fp8. Each term by hand, then through the step."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import apply_framework, framework_plan_fields, framework_system
from paraplan.cost.runtimes import (
    FSDP_COPY_FIELDS,
    batch_sync_idle_s,
    bf16_optimizer_accumulation_bytes,
    fsdp1_compute_copy_bytes,
    fsdp1_gather_copy_bytes,
    fsdp1_reduce_copy_bytes,
    fsdp1_reduce_unsharded_bytes,
    fsdp2_compute_copy_bytes,
    fsdp2_gather_copy_bytes,
    fsdp2_reduce_copy_bytes,
    fsdp_copy_bytes,
    runtime_copy_s,
    runtime_costs,
)
from paraplan.specs.plan import PlanSpec
from paraplan.specs.runtime import RuntimeCosts
from paraplan.specs.system import SystemSpec
from paraplan.step import constants
from paraplan.step import estimate as step_estimate
from paraplan.step.estimate import estimate


def _with_runtime(system: SystemSpec, **fields) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"]["efficiency"]["runtime"] = RuntimeCosts(**fields).model_dump()
    return SystemSpec.model_validate(data)


def _clear_estimate_caches() -> None:
    for cache in step_estimate.ESTIMATE_CACHES:
        cache.cache_clear()


@pytest.fixture
def with_copies(monkeypatch):
    """Sets the FSDP copies' StepInputs fields to the given values (the rest 0) whatever the stack and dtype,
    to price each on its own through the step (step.constants.runtime_terms reads
    cost.runtimes.fsdp_copy_bytes); the estimator's caches are cleared on each change and after the test."""

    def set_copies(**fields) -> None:
        values = dict.fromkeys(FSDP_COPY_FIELDS, 0.0) | fields
        monkeypatch.setattr(constants, "fsdp_copy_bytes", lambda *_: values)
        _clear_estimate_caches()

    yield set_copies
    monkeypatch.undo()
    _clear_estimate_caches()


def _copy_terms(name: str, dtype: str = "bf16") -> dict:
    """The FSDP copies' StepInputs fields of a ``dtype`` run under profile ``name`` (step.constants.system_terms)."""
    profile = load_framework(name)
    system = framework_system(profile, load_system("dgx-h100-80gb"))
    fields = {"gpus": 16, "zero": 3, "global_batch": 64, "seq_length": 4096, "dtype": dtype}
    plan = PlanSpec(**framework_plan_fields(profile, fields))
    terms = constants.system_terms(system, dtype, plan)
    return {field: terms[field] for field in FSDP_COPY_FIELDS}


def _with_hbm(system: SystemSpec, scale: float) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"]["hbm_bandwidth"] *= scale
    return SystemSpec.model_validate(data)


def test_fsdp2_bytes_by_hand():
    # compute stream: two copy-outs (read 2, write 2) and the reduce-scatter copy-in (read bf16, write fp32)
    assert fsdp2_compute_copy_bytes(2.0, 4.0) == 2 * (2 + 2) + 2 + 4 == 14.0
    assert fsdp2_compute_copy_bytes(2.0, 2.0) == 12.0
    # all-gather copy-in: fp32 shard cast into bf16 (4 + 2), then copied into the all-gather input (2 + 2)
    assert fsdp2_gather_copy_bytes(4.0, 2.0) == 10.0
    assert fsdp2_gather_copy_bytes(2.0, 2.0) == 4.0  # no cast without mixed precision
    # after the reduce-scatter: accumulate into the fp32 shard (4 + 4 + 4), cast first when reduced in bf16
    assert fsdp2_reduce_copy_bytes(4.0, 4.0) == 12.0
    assert fsdp2_reduce_copy_bytes(4.0, 2.0) == 2 + 4 + 12 == 18.0
    # DeepSpeed BF16 optimizer: cast bf16 -> fp32 temp (2 + 4), add into the fp32 gradient (4 + 4 + 4)
    assert bf16_optimizer_accumulation_bytes() == 18.0
    assert runtime_copy_s(1e9, 14.0, 2e12) == pytest.approx(7e-3)


def test_profiles_state_their_runtime():
    eager, compiled = (
        runtime_costs(load_framework("torchtitan")),
        runtime_costs(load_framework("torchtitan-compiled")),
    )
    # eager torchtitan: the copies are one kernel each at the plain HBM rate (eager_traffic_factor prices
    # only the op graph's unfused ops), so the same bytes and seconds as compiled
    assert eager.fsdp_runtime == compiled.fsdp_runtime == "fsdp2"
    assert _copy_terms("torchtitan-compiled") == _copy_terms("torchtitan")
    assert _copy_terms("torchtitan")["zero3_compute_copy_bytes"] == 14.0
    # and the same runtime but for the K/V ring, which compile traces with its waits where issued
    assert (eager.cp_ring_overlap, compiled.cp_ring_overlap) == (True, False)
    # and the parallel kinds but for AsyncTP, which torchtitan runs only under compile
    assert set(compiled.parallelism) - set(eager.parallelism) == {"tp_overlap"}
    assert eager == compiled.model_copy(
        update={"cp_ring_overlap": True, "parallelism": eager.parallelism}
    )
    copies = _copy_terms("torchtitan-compiled")
    assert copies["zero3_gather_copy_bytes"] == 10.0 and copies["zero3_reduce_copy_bytes"] == 12.0
    assert compiled.p2p_transfers_per_exchange == 1.0 and compiled.grad_accumulation_bytes == 0.0
    mds = runtime_costs(load_framework("megatron-deepspeed"))
    # its accumulation is the optimizer DeepSpeed runs (step.constants.at_zero_stage), no profile field
    assert mds.p2p_transfers_per_exchange == 2.0 and mds.grad_accumulation_bytes == 0.0
    assert mds.fsdp_runtime == "none" and set(_copy_terms("megatron-deepspeed").values()) == {0.0}
    assert runtime_costs(load_framework("nemo-24.09")).fp8_param_gather is True
    # Megatron-Core's runtime adds nothing but the interleaved schedule's overlapped p2p and, under its
    # default delayed fp8 recipe, linear_proj's own fp8 input copy (graph.mla.attention_output_bytes)
    assert runtime_costs(load_framework("megatron-core")) == RuntimeCosts(
        p2p_overlap=True, proj_quantised_copy=True
    )
    # Megatron-LM 2021 (v2.6): no context or expert parallelism and no TP comm overlap yet
    assert runtime_costs(load_framework("megatron-lm-2021")) == RuntimeCosts(
        parallelism=("dp", "tp", "sp", "pp")
    )
    for name in ("torchtitan", "nemo-24.09"):
        fw = load_framework(name)
        stated = [
            f for f in ("fsdp_runtime", "grad_accumulation", "fp8_param_gather") if f in fw.sources
        ]
        assert stated, name


def _fsdp_plan(**extra) -> PlanSpec:
    return PlanSpec(gpus=16, zero=3, global_batch=64, seq_length=4096, **extra)


def test_fsdp2_compute_copies_are_exposed_per_microbatch(with_copies):
    """The compute-stream copies add m × P × b / rate to the step, P the GPU's (unsharded) parameters."""
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = _fsdp_plan()
    base = estimate(model, system, plan)
    with_copies(zero3_compute_copy_bytes=10.0)
    one = estimate(model, system, plan)
    with_copies(zero3_compute_copy_bytes=20.0)
    two = estimate(model, system, plan)
    d1, d2 = one.step_time_s - base.step_time_s, two.step_time_s - base.step_time_s
    assert d2 == pytest.approx(2 * d1, rel=1e-9)
    rate = system.accelerator.hbm_bandwidth * system.accelerator.efficiency.hbm
    params = d1 * rate / (plan.microbatches * 10.0)
    assert params == pytest.approx(
        8.03e9, rel=0.01
    )  # Llama 3 8B, every parameter gathered once per pass
    assert one.breakdown.dp_comm_s - base.breakdown.dp_comm_s == pytest.approx(d1, rel=1e-9)


def test_fsdp2_side_copies_lengthen_the_collectives(with_copies):
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = _fsdp_plan(overlap_param_gather=False, overlap_dp_grad_reduce=False)
    base = estimate(model, system, plan).step_time_s
    with_copies(zero3_gather_copy_bytes=10.0, zero3_reduce_copy_bytes=12.0)
    side = estimate(model, system, plan).step_time_s
    # nothing overlaps: the copies of every shard element, twice gathered and once reduced per micro-batch
    rate = system.accelerator.hbm_bandwidth * system.accelerator.efficiency.hbm
    expected = plan.microbatches * 8.03e9 / plan.dp * (2 * 10.0 + 12.0) / rate
    assert side - base == pytest.approx(expected, rel=0.01)


def test_fsdp2_runtime_costs_nothing_without_zero3():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=16, zero=1, global_batch=64, seq_length=4096)
    fsdp = _with_runtime(
        system, **runtime_costs(load_framework("torchtitan-compiled")).model_dump()
    )
    assert estimate(model, fsdp, plan).step_time_s == estimate(model, system, plan).step_time_s


def _pipe_plan() -> PlanSpec:
    # no DP overlap: DeepSpeed's PipelineEngine refuses it with pp > 1 (specs.rules_stack.engine_dp_overlap_rule)
    return PlanSpec(
        gpus=64,
        tp=4,
        pp=4,
        zero=1,
        global_batch=256,
        seq_length=2048,
        micro_batch=2,
        overlap_dp_grad_reduce=False,
    )


def test_deepspeed_pipeline_transfers_are_separate():
    """Blocking separate send and receive: every exchange costs two transfers (pp_comm doubles)."""
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    one = estimate(model, _with_runtime(system), _pipe_plan()).breakdown.pp_comm_s
    two = estimate(model, _with_runtime(system, p2p_transfers_per_exchange=2.0), _pipe_plan())
    assert one > 0 and two.breakdown.pp_comm_s == pytest.approx(2 * one, rel=1e-12)


def test_bf16_optimizer_accumulation_per_microbatch():
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = _pipe_plan()
    base = estimate(model, _with_runtime(system), plan)
    acc = estimate(model, _with_runtime(system, grad_accumulation_bytes=18.0), plan)
    delta = acc.breakdown.backward_s - base.breakdown.backward_s
    rate = system.accelerator.hbm_bandwidth * system.accelerator.efficiency.hbm
    # m micro-batches of the slowest stage's parameters (a quarter of the layers over tp = 4, plus an embedding)
    per_gpu = delta * rate / (plan.microbatches * 18.0)
    assert 13e9 / 16 < per_gpu < 13e9 / 16 + 5.2e4 * 5120 / 4 * 1.01
    assert acc.step_time_s > base.step_time_s + delta * 0.99


def test_deepspeed_batch_loads_synchronise_the_end_stages():
    # one synchronisation per micro-batch: the .item() round trip and one kernel issue, 10.5 + 31.6 us
    assert batch_sync_idle_s(1.0, 10.5e-6, 31.6e-6) == pytest.approx(42.1e-6)
    assert runtime_costs(load_framework("megatron-deepspeed")).batch_syncs == 1.0
    assert runtime_costs(load_framework("megatron-core")).batch_syncs == 0.0
    model, system = load_model("gpt3-13b"), load_framework_system("megatron-deepspeed")
    plan = _pipe_plan()
    off = estimate(model, _with_field(system, batch_syncs=0.0), plan)
    on = estimate(model, system, plan)
    eff = system.accelerator.efficiency
    idle = eff.host_sync_latency_s + eff.host_launch_s / eff.host_speed
    delta = on.step_time_s - off.step_time_s
    # the slowest (an end) stage's forward gains the idle per micro-batch; the bubble at most pp - 1 more
    assert (
        plan.microbatches * idle * 0.999
        <= delta
        <= (plan.microbatches + plan.pp - 1) * idle * 1.001
    )
    # no pipeline, no PipelineEngine instruction: nothing added (no DP overlap: the BF16_Optimizer at
    # zero 1 reduces after the backward, specs.rules_stack.deepspeed_allreduce_fallback)
    one_stage = PlanSpec(
        gpus=64,
        tp=4,
        zero=1,
        global_batch=256,
        seq_length=2048,
        micro_batch=2,
        overlap_dp_grad_reduce=False,
    )
    assert estimate(model, system, one_stage).step_time_s == pytest.approx(
        estimate(model, _with_field(system, batch_syncs=0.0), one_stage).step_time_s
    )


def load_framework_system(name: str) -> SystemSpec:
    return framework_system(load_framework(name), load_system("dgx-a100-80gb"))


def _with_field(system: SystemSpec, **fields) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"]["efficiency"]["runtime"].update(fields)
    return SystemSpec.model_validate(data)


def test_fp8_param_gather_halves_the_weight_gather():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(
        gpus=64, zero=1, dtype="fp8", global_batch=64, seq_length=8192, overlap_param_gather=False
    )
    bf16 = estimate(model, _with_runtime(system), plan).breakdown.dp_comm_s
    fp8 = estimate(model, _with_runtime(system, fp8_param_gather=True), plan).breakdown.dp_comm_s
    assert fp8 < bf16
    # bf16 runs gather bf16 whatever the flag
    plan16 = plan.model_copy(update={"dtype": "bf16"})
    a = estimate(model, _with_runtime(system), plan16).step_time_s
    b = estimate(model, _with_runtime(system, fp8_param_gather=True), plan16).step_time_s
    assert a == b


@pytest.mark.parametrize(
    "name, plan",
    [
        ("torchtitan", _fsdp_plan()),
        ("torchtitan-compiled", _fsdp_plan()),
        ("llm-foundry", _fsdp_plan()),
        ("megatron-deepspeed", _pipe_plan()),
        (
            "nemo-24.09",
            PlanSpec(gpus=64, tp=2, zero=1, dtype="fp8", global_batch=64, seq_length=4096),
        ),
    ],
)
@pytest.mark.parametrize("scale", [1.25, 2.0])
def test_runtime_costs_never_make_faster_memory_slower(name, plan, scale):
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    fw = load_framework(name)
    slow, fields = apply_framework(fw, system, plan.model_dump(exclude_unset=True))
    fast = framework_system(fw, _with_hbm(system, scale))
    full = PlanSpec(**fields)
    assert estimate(model, fast, full).step_time_s <= estimate(model, slow, full).step_time_s


def test_overlapped_p2p_by_hand():
    from paraplan.step.p2p import overlapped_p2p_exposed_s

    # half the transfers behind the backward, half behind the forward; only what outlasts its window shows
    assert overlapped_p2p_exposed_s(0.2, 1.0, 2.0) == 0.0
    assert overlapped_p2p_exposed_s(3.0, 1.0, 2.0) == pytest.approx(0.5)  # 1.5 behind B = 2: hidden
    assert overlapped_p2p_exposed_s(6.0, 1.0, 2.0) == pytest.approx(1.0 + 2.0)


def test_p2p_overlap_only_with_interleaving():
    """Megatron-LM turns overlap_p2p_comm off without the interleaved schedule."""
    model, system = load_model("llama3-70b"), load_system("dgx-h100-80gb")
    base = dict(gpus=64, tp=4, pp=4, zero=1, global_batch=64, seq_length=8192)
    base |= dict(sequence_parallel=True)
    overlap = _with_runtime(system, p2p_overlap=True)
    flat = PlanSpec(**base)
    assert (
        estimate(model, overlap, flat).step_time_s
        == estimate(model, _with_runtime(system), flat).step_time_s
    )
    inter = PlanSpec(**base, vpp=5, schedule="interleaved")
    exposed = estimate(model, _with_runtime(system), inter)
    hidden = estimate(model, overlap, inter)
    assert exposed.breakdown.pp_comm_s > 0 and hidden.breakdown.pp_comm_s == 0.0
    assert hidden.step_time_s < exposed.step_time_s
    assert load_framework("nemo-24.09").overlap_p2p_comm
    assert runtime_costs(load_framework("nemo-24.09")).p2p_overlap
    # DeepSpeed's engine has no overlapped p2p whatever the flag says
    assert not runtime_costs(load_framework("megatron-deepspeed")).p2p_overlap


def test_fsdp1_bytes_by_hand():
    # compute stream: only the split's backward concatenating the views' bf16 gradients (read 2, write 2);
    # the all-gather writes the flat parameter in place (no copy-in, no copy-out)
    assert fsdp1_compute_copy_bytes(2.0) == 4.0
    # before each all-gather: the fp32 shard cast into the bf16 _mp_shard; nothing without mixed precision
    assert fsdp1_gather_copy_bytes(4.0, 2.0) == 6.0 and fsdp1_gather_copy_bytes(2.0, 2.0) == 0.0
    # unsharded gradient before the reduce-scatter: pre-divide in place (bf16: 2 + 2), cast first when the
    # reduce dtype differs from the param dtype (bf16 -> fp32: 2 + 4, then 4 + 4)
    assert fsdp1_reduce_unsharded_bytes(2.0, 2.0) == 4.0
    assert fsdp1_reduce_unsharded_bytes(2.0, 4.0) == 2 + 4 + 8 == 14.0
    # shard after it: post-divide (2 + 2), cast to fp32 (2 + 4), accumulate (4 + 4 + 4)
    assert fsdp1_reduce_copy_bytes(4.0, 2.0) == 4 + 6 + 12 == 22.0


def test_llm_foundry_runs_fsdp1():
    fw = load_framework("llm-foundry")
    assert fw.fsdp_runtime == "fsdp1" and "fsdp_runtime" in fw.sources
    costs = runtime_costs(fw)
    assert (
        costs
        == RuntimeCosts(
            fsdp_runtime="fsdp1",
            zero2_reduce_per_microbatch=True,  # Composer enters no_sync only for DDP (step.tail.zero2_reduces)
            proj_quantised_copy=True,  # TE v0.10 te.Linear under DelayedScaling keeps its fp8 input copy
            pipeline_engine="none",  # the profile's: no pipeline parallelism
            parallelism=("dp",),  # DDP or FSDP only (Composer's dist_strategy)
        )
    )
    # PURE mixed precision: bf16 params and reduce, fp32 shards
    assert _copy_terms("llm-foundry") == {
        "zero3_compute_copy_bytes": 4.0,
        "zero3_gather_copy_bytes": 6.0,
        "zero3_reduce_unsharded_bytes": 4.0,
        "zero3_reduce_copy_bytes": 22.0,
    }
    # FSDP2 copies out of and into its flat buffers on the compute stream; FSDP1 does not
    compute = "zero3_compute_copy_bytes"
    assert _copy_terms("llm-foundry")[compute] < _copy_terms("torchtitan")[compute]


def test_fsdp_copies_of_an_fp32_run_by_hand():
    """An fp32 run gathers fp32 parameters (p = 4, no cast from the fp32 shard) and reduces in fp32 (r = 4)
    under every FSDP stack (cost.runtimes.fsdp_copy_bytes); a bf16 run under torchtitan gathers bf16 and
    reduces fp32 (its mixed_precision_reduce)."""
    assert fsdp_copy_bytes("fsdp2", 2.0, 4.0) == _copy_terms("torchtitan", "bf16")
    titan = _copy_terms("torchtitan", "fp32")
    assert (
        titan["zero3_compute_copy_bytes"] == 2 * (4 + 4) + 4 + 4 == 24.0
    )  # copy-out twice, copy-in
    assert titan["zero3_gather_copy_bytes"] == 2 * 4  # the copy-in only: p = s
    assert titan["zero3_reduce_copy_bytes"] == 3 * 4  # the accumulation only: r = s
    foundry = _copy_terms(
        "llm-foundry", "fp32"
    )  # PURE at precision fp32: fp32 param and reduce dtype
    assert foundry == {
        "zero3_compute_copy_bytes": 2 * 4,
        "zero3_gather_copy_bytes": 0.0,
        "zero3_reduce_unsharded_bytes": 2 * 4,
        "zero3_reduce_copy_bytes": 2 * 4 + 3 * 4,
    }
    assert set(fsdp_copy_bytes("none", 4.0, 4.0).values()) == {0.0}


def test_fsdp1_unsharded_gradient_passes_lengthen_the_reduce_scatter(with_copies):
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(
        gpus=16,
        zero=3,
        global_batch=64,
        seq_length=4096,
        overlap_param_gather=False,
        overlap_dp_grad_reduce=False,
    )
    base = estimate(model, system, plan).step_time_s
    z1 = plan.model_copy(update={"zero": 1})
    base_z1 = estimate(model, system, z1).step_time_s
    with_copies(zero3_reduce_unsharded_bytes=4.0)
    side = estimate(model, system, plan)
    # nothing overlaps: every gathered (unsharded) parameter once per micro-batch, 4 B, at the HBM rate
    rate = system.accelerator.hbm_bandwidth * system.accelerator.efficiency.hbm
    expected = plan.microbatches * 8.03e9 * 4.0 / rate
    assert side.step_time_s - base == pytest.approx(expected, rel=0.01)
    # and nothing without ZeRO-3
    assert estimate(model, system, z1).step_time_s == base_z1


def test_synchronous_launches_overlap_nothing():
    """CUDA_LAUNCH_BLOCKING=1 (profile launch_blocking): no collective runs beside a kernel, so the async TP
    backward, the K/V ring's overlap and the interleaved p2p overlap are off, and the backward TP collectives are
    exposed; the same profile without it keeps Megatron's async TP backward."""
    from paraplan.step.block_sums import dtensor_tp, tp_backward_hides

    profile = load_framework("megatron-deepspeed").model_dump()
    free = framework_system(load_framework(profile), load_system("dgx-a100-80gb"))
    tied = framework_system(
        load_framework(profile | {"launch_blocking": True}), load_system("dgx-a100-80gb")
    )
    assert tp_backward_hides(free) == {"dgrad": "tp_hidden_by_dgrad", "wgrad": "tp_hidden_by_wgrad"}
    assert tp_backward_hides(tied) == {}
    runtime = tied.accelerator.efficiency.runtime
    assert not runtime.cp_ring_overlap and not runtime.p2p_overlap
    # Megatron's TP stays Megatron's: the DTensor reading of tp_backward_async is untouched
    assert runtime.tp_backward_async and not dtensor_tp(tied)
