"""The host model (cost/host.py): kernel counts, graph scope, issue time, synchronisations, the optimizer's host
overhead, each against hand-computed values; and properties of whole estimates: a slower host or more launches is
never faster, full-iteration CUDA graphs are never slower than none."""

from __future__ import annotations

import pytest

from paraplan import api
from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.cost import host as H
from paraplan.graph.ops import Op
from paraplan.specs.system import EfficiencySpec


def _gemm(name="attention_projection", batch=1):
    return Op(name, "gemm", 1.0, 0.0, 2.0, 0.0, (batch, 8, 8, 8))


def _mem(name, fwd_flops=0.0, fwd_bytes=1.0):
    return Op(name, "memory", fwd_flops, fwd_bytes, 2 * fwd_flops, 2 * fwd_bytes)


SYNC = Op("dispatch_host_sync", "host_sync", 0.0, 0.0, 0.0, 0.0)
GROUPED = Op("expert_fc1", "grouped_gemm", 1.0, 0.0, 2.0, 0.0, (8, 16, 16, 16))
ATTN = Op("flash_attention", "attention", 1.0, 0.0, 2.0, 0.0)


def test_kernel_counts():
    assert H.op_kernels(_gemm(), eager=False) == (1, 2)
    assert H.op_kernels(_gemm(), eager=True, autocast=True) == (2, 3)
    # the GEMM after a norm casts no input of its own (the norm's activation casts, cost.autocast); a bias adds
    # its cast and its gradient's reduction and cast
    assert H.op_kernels(_gemm("qkv_projection"), eager=True, autocast=True) == (2, 3)
    assert H.op_kernels(_gemm(), eager=True, autocast=True, bias=True) == (3, 5)
    assert H.op_kernels(_gemm(), eager=True, bias=True) == (1, 3)
    assert H.op_kernels(_gemm("qkv_projection"), eager=True, bias=True, qkv_bias=False) == (1, 2)
    assert H.op_kernels(_gemm("lm_head"), eager=True, autocast=True, bias=True) == (2, 3)
    assert H.op_kernels(_gemm("attention_scores", batch=12), eager=True, autocast=True) == (1, 2)
    assert H.op_kernels(GROUPED, eager=False) == (8, 16)
    # eager attention adds the output's layout copy forward and the q/k/v gradients' concatenation backward
    assert H.op_kernels(ATTN, eager=False) == (1, 3)
    assert H.op_kernels(ATTN, eager=True) == (2, 4)
    assert H.eager_views(ATTN, eager=True) == 5 and H.eager_views(ATTN, eager=False) == 0
    assert H.eager_views(_gemm(), eager=True) == 0
    assert H.op_kernels(SYNC, eager=True) == (0, 0)
    assert H.op_kernels(_mem("input_norm"), eager=False) == (1, 1)
    assert H.op_kernels(_mem("input_norm"), eager=True) == (1, 2)
    # a LayerNorm's backward zero-fills its gain/bias gradients; an RMSNorm's does not
    layernorm = _mem("input_norm")._replace(kernel=("layernorm", 1024, 4096))
    rmsnorm = _mem("input_norm")._replace(kernel=("rmsnorm", 1024, 4096))
    assert H.op_kernels(layernorm, eager=True) == (1, 3)
    assert H.op_kernels(rmsnorm, eager=True) == (1, 2)
    # autocast over fp32 norms and residual stream (wide roles): the norm's output cast forward and its
    # gradient's back, the residual's branch-gradient cast backward (cost.autocast); none without autocast
    wide = frozenset({"norm", "residual"})
    add = _mem("attention_residual")._replace(kernel=("add", 1024, 4096))
    assert H.op_kernels(rmsnorm, eager=True, autocast=True, wide_roles=wide) == (2, 3)
    assert H.op_kernels(layernorm, eager=True, autocast=True, wide_roles=wide) == (2, 4)
    assert H.op_kernels(add, eager=True, autocast=True, wide_roles=wide) == (1, 2)
    assert H.op_kernels(add, eager=True, autocast=True) == (1, 1)
    assert H.op_kernels(_mem("rotary_embedding"), eager=True) == (10, 10)
    assert H.op_kernels(_mem("cross_entropy"), eager=True) == (3, 4)
    # the MLP activation by its kernel family (Op.kernel): GeLU one kernel each way, SwiGLU silu and a
    # multiply forward, silu_backward and two multiplies backward; the experts' activation alike
    gelu = _mem("mlp_activation", 8.0, 4.0)._replace(kernel=("gelu", 1024, 4096))
    swiglu = _mem("mlp_activation", 5.0, 6.0)._replace(kernel=("swiglu", 1024, 4096))
    assert H.op_kernels(gelu, eager=True) == (1, 1)
    assert H.op_kernels(swiglu, eager=True) == (2, 3)
    experts = _mem("experts_activation", 0.0, 6.0)._replace(kernel=("swiglu", 1024, 4096))
    assert H.op_kernels(experts, eager=True) == (2, 3)
    no_backward = Op("x", "memory", 0.0, 1.0, 0.0, 0.0)
    assert H.op_kernels(no_backward, eager=False) == (1, 0)


def test_autocast_activation_casts_one_definition():
    """cost.autocast: a norm run wider than the activations casts its output forward and its gradient back, a
    residual add casts the branch gradient backward; nothing when the role runs at the activations' width."""
    from paraplan.cost.autocast import activation_casts

    assert activation_casts("norm", True) == (1, 1)
    assert activation_casts("residual", True) == (0, 1)
    assert activation_casts("activation", True) == (0, 0)
    assert activation_casts("norm", False) == (0, 0)
    assert activation_casts(None, True) == (0, 0)
    # the host reads the wide roles off the profile's eager_kernels precisions, only under autocast
    eff = EfficiencySpec(autocast_casts=True, eager_kernels={"norm": "fp32", "activation": "bf16"})
    assert H.wide_roles(eff) == frozenset({"norm"})
    assert H.wide_roles(eff.model_copy(update={"autocast_casts": False})) == frozenset()


def test_compiled_graph_calls_by_hand():
    """cost.host.graph_calls: a layer-compiled stack calls one graph per transformer layer block and pass, a
    model-compiled one a single graph, carried by the embedding's block; its host time joins the block's issue."""
    layer = (_mem("input_norm"), _gemm("qkv_projection"), ATTN)
    embedding = (_mem("embedding_lookup"),)
    head = (_mem("final_norm"), _gemm("lm_head"), _mem("cross_entropy"))
    assert [H.graph_calls(b, "layer") for b in (layer, embedding, head)] == [1, 0, 0]
    assert [H.graph_calls(b, "model") for b in (layer, embedding, head)] == [0, 1, 0]
    assert H.graph_calls(layer, "none") == 0
    device = {op: (1e-6, 2e-6) for op in layer}
    base = H.host_sums(layer, EFF, device)
    compiled = EFF.model_copy(update={"compiled_graphs": "layer", "host_graph_call_s": 40e-6})
    sums = H.host_sums(layer, compiled, device)
    assert sums.forward == pytest.approx(base.forward + 40e-6)
    assert sums.backward == pytest.approx(base.backward + 40e-6)
    slow = compiled.model_copy(update={"host_speed": 0.5})
    assert H.host_sums(layer, slow, device).forward >= sums.forward


def test_graph_scopes():
    qkv, head, permute = _gemm("qkv_projection"), _gemm("lm_head"), _mem("permute")
    assert not H.graphed(qkv, "none", False)
    assert H.graphed(qkv, "attention", False) and not H.graphed(
        _gemm("mlp_in_projection"), "attention", False
    )
    assert H.graphed(qkv, "layer", False) and not H.graphed(head, "layer", False)
    assert H.graphed(head, "full_iteration", False)
    assert H.graphed(permute, "full_iteration", False)
    assert not H.graphed(
        permute, "full_iteration", True
    )  # dropless: the expert section stays eager


EFF = EfficiencySpec(
    host_launch_s=30e-6,
    graph_kernel_s=1e-6,
    host_sync_latency_s=10e-6,
    host_sync_s=100e-6,
    host_eager=True,
    autocast_casts=True,
)


def test_op_host_time_by_hand():
    assert H.op_host_s(_gemm(), EFF, False) == pytest.approx((60e-6, 90e-6))
    # grouped GEMM: one dispatch, the other 7 (forward) and 15 (backward) GEMMs launched from C++ at 3.8 us
    assert H.op_host_s(GROUPED, EFF, False) == pytest.approx(
        (30e-6 + 7 * 3.8e-6, 30e-6 + 15 * 3.8e-6)
    )
    graphed = EFF.model_copy(update={"cuda_graph_scope": "layer"})
    assert H.op_host_s(_gemm(), graphed, False) == pytest.approx((2e-6, 3e-6))
    slow = EFF.model_copy(update={"host_speed": 0.5})
    assert H.op_host_s(_gemm(), slow, False) == pytest.approx((120e-6, 180e-6))
    assert H.op_host_s(_gemm(), EfficiencySpec(), False) == (0.0, 0.0)  # host not priced
    # eager attention: (2, 4) kernels at 30 us and five zero-kernel calls at 11 us, half each way
    viewing = EFF.model_copy(update={"host_view_s": 11e-6})
    assert H.op_host_s(ATTN, viewing, False) == pytest.approx((60e-6 + 27.5e-6, 120e-6 + 27.5e-6))
    assert H.op_host_s(
        ATTN, viewing.model_copy(update={"host_eager": False}), False
    ) == pytest.approx((30e-6, 90e-6))


def test_sync_terms_by_hand():
    fc2 = Op("expert_fc2", "grouped_gemm", 1.0, 0.0, 2.0, 0.0, (8, 16, 16, 16))
    ops = (_gemm("router"), _mem("permute"), GROUPED, fc2, _mem("unpermute"), SYNC)
    device = {op: (5e-6, 10e-6) for op in ops}
    sums = H.host_sums(ops, EFF, device)
    per_grouped = 30e-6 + 7 * 3.8e-6
    section_host = (
        2 * 30e-6 + 2 * per_grouped
    )  # permute, unpermute (eager (1, 1)), two grouped GEMMs
    assert sums.forward == pytest.approx(60e-6 + section_host)
    # after the sync: the round trip, then the dispatch call (no device time here) and the section's ops but
    # permutation 1 (issued before the sync); the host leads until the last op: idle = its issue less the device
    # time before it (cost.moe_host.reissue_idle_s)
    reissue = 30e-6 + 2 * per_grouped + 30e-6 - 2 * 5e-6
    assert sums.sync_idle == pytest.approx(10e-6 + reissue + 100e-6)
    assert sums.sync_wait == pytest.approx(10e-6)
    assert H.host_sums(ops[:-1], EFF, device).sync_idle == 0.0  # padded dispatch: no sync
    # the re-issue and the fitted remnant are host time: a host at half speed doubles them
    slow = H.host_sums(ops, EFF.model_copy(update={"host_speed": 0.5}), device)
    assert slow.sync_idle == pytest.approx(
        10e-6 + 2 * (30e-6 + 2 * per_grouped + 30e-6) - 10e-6 + 200e-6
    )
    # an fp8 layer re-issues the two Fp8Padding calls too
    fp8 = H.host_sums(ops, EFF, device, dtype="fp8")
    assert fp8.sync_idle == pytest.approx(sums.sync_idle + 2 * 30e-6)


def test_activation_sync_by_hand():
    """A clamped GLU's scalar copy (graph.moe_mlp.clamped_glu_ops) drains the queue once more: its round trip, the
    re-issue of the ops after the clamp only (no dispatch call), and the fitted remnant, as the dispatch's."""
    clamp, act = _mem("expert_glu_clamp"), _mem("expert_activation")
    fc2 = Op("expert_fc2", "grouped_gemm", 1.0, 0.0, 2.0, 0.0, (8, 16, 16, 16))
    sync = Op("activation_host_sync", "host_sync", 0.0, 0.0, 0.0, 0.0)
    ops = (_mem("permute"), GROUPED, clamp, sync, act, fc2, _mem("unpermute"), SYNC)
    device = {op: (5e-6, 10e-6) for op in ops}
    per_grouped = 30e-6 + 7 * 3.8e-6
    base = H.host_sums(tuple(op for op in ops if op is not sync), EFF, device)
    sums = H.host_sums(ops, EFF, device)
    # after the clamp: activation 30 us, fc2 per_grouped, unpermute 30 us issued; 5 us of device time each
    # before the last: idle = 30 + per_grouped + 30 - 2 x 5 us
    reissue = 30e-6 + per_grouped + 30e-6 - 2 * 5e-6
    assert sums.sync_idle == pytest.approx(base.sync_idle + 10e-6 + reissue + 100e-6)
    assert sums.sync_wait == pytest.approx(base.sync_wait + 10e-6)
    # without the dispatch's sync (drop-and-pad) the layer is not dropless: only the activation's sync is priced
    padded = H.host_sums(ops[:-1], EFF, device)
    assert padded.sync_idle == pytest.approx(10e-6 + reissue + 100e-6)
    assert sums.recompute_sync_idle == 0.0
    # moe_act recomputation re-runs the clamp and its copy in the backward: the same idle once more there
    again = tuple(op._replace(selective_recompute=True) if op is clamp else op for op in ops)
    recomputed = H.host_sums(again, EFF, {op: (5e-6, 10e-6) for op in again})
    assert recomputed.recompute_sync_idle == pytest.approx(10e-6 + reissue + 100e-6)
    assert recomputed.sync_idle == pytest.approx(sums.sync_idle)


def test_graph_regions_cost_one_launch_each():
    """(iii): a captured region is one launch at host_launch_s; the dropless expert section splits it."""
    ops = (_gemm("qkv_projection"), _mem("attention_residual"), _gemm("mlp_in_projection"))
    device = {op: (1e-3, 2e-3) for op in ops}
    attn = EFF.model_copy(
        update={"cuda_graph_scope": "attention", "host_eager": False, "autocast_casts": False}
    )
    # qkv (1, 2) and the residual (1, 1) in one graph at 1 us a kernel, plus one launch; the MLP GEMM eager
    assert H.host_sums(ops, attn, device).forward == pytest.approx(2e-6 + 30e-6 + 30e-6)
    assert H.host_sums(ops, attn, device).backward == pytest.approx(3e-6 + 30e-6 + 60e-6)
    whole = attn.model_copy(update={"cuda_graph_scope": "full_iteration"})
    assert H.host_sums(ops, whole, device).forward == pytest.approx(
        3e-6
    )  # one launch a step, not a block
    moe = (_gemm("router"), _mem("permute"), GROUPED, _mem("unpermute"), _mem("mlp_residual"), SYNC)
    split = H.host_sums(moe, whole, {op: (1e-3, 2e-3) for op in moe})
    per_grouped = 30e-6 + 7 * 3.8e-6
    assert split.forward == pytest.approx(2 * 1e-6 + 2 * 30e-6 + 2 * 30e-6 + per_grouped)


def test_region_and_step_overhead():
    assert H.host_bound_s(2.0, 1.0) == 2.0
    assert H.host_bound_s(1.0, 3.0) == 3.0
    assert H.host_bound_s(1.0, 0.5, sync_idle_s=0.25, sync_wait_s=0.1) == 1.25
    assert H.step_host_overhead_s(100, 2e-6, 5e-4) == pytest.approx(7e-4)


def test_synchronous_launches_add_the_host_to_the_device_by_hand():
    """CUDA_LAUNCH_BLOCKING=1: the GPU idles while the host issues, so a region takes D + H, not max(D, H)."""
    assert H.launch_blocking_idle_s(0.5, False) == 0.0
    assert H.launch_blocking_idle_s(0.5, True) == 0.5
    # D = 2, H = 0.5: asynchronously 2, synchronously 2.5; D = 1, H = 3: 3 and 4
    assert H.host_bound_s(2.0, 0.5, H.launch_blocking_idle_s(0.5, True)) == 2.5
    assert H.host_bound_s(1.0, 3.0, H.launch_blocking_idle_s(3.0, True)) == 4.0
    assert H.host_bound_s(1.0, 3.0, H.launch_blocking_idle_s(3.0, False)) == 3.0
    # each synchronous launch is also a device round trip: 100 kernels at t_sync 10 us add 1 ms, H 0.5 ms
    assert H.launch_blocking_idle_s(5e-4, True, 100, 10e-6) == pytest.approx(1.5e-3)
    assert H.launch_blocking_idle_s(5e-4, False, 100, 10e-6) == 0.0


def test_synchronous_launches_region_times_by_hand():
    """A decoder layer's forward and backward regions under launch_blocking: device + host issue seconds + one
    device round trip per kernel each (block_sums puts the host's issue time and the round trips in the GPU
    idle), where asynchronously the longer of device and host counts."""
    from paraplan.api import plan_from_fields
    from paraplan.graph.layers import decoder_layer
    from paraplan.step.block_sums import block_compute
    from paraplan.step.block_terms import host_region_times_s
    from paraplan.step.estimate import layer_shape

    model = load_model("gpt3-125m")
    plan = plan_from_fields(dict(gpus=1, micro_batch=1, seq_length=128, global_batch=1))
    runs = {}
    for blocking in (False, True):
        profile = load_framework("pytorch-eager").model_dump() | {"launch_blocking": blocking}
        system = framework_system(load_framework(profile), load_system("dgx-h100-80gb"))
        layer = decoder_layer(model, layer_shape(plan, system))
        runs[blocking] = block_compute(layer, system, "bf16")
    free, tied = runs[False], runs[True]
    # n kernels, each launch a device round trip t_sync (host_sync_latency_s) beside the host's issue
    eff = system.accelerator.efficiency
    sums = H.host_sums(layer.ops, eff, {op: (0.0, 0.0) for op in layer.ops})
    kernels = (sums.kernels_forward, sums.kernels_backward)
    assert kernels == H.counted_kernels(layer.ops, eff)  # the one count, in host_sums' one walk
    assert kernels[0] > 0 and kernels[1] > 0 and eff.host_sync_latency_s > 0.0
    trips = [n * eff.host_sync_latency_s for n in kernels]
    assert free.host_forward > 0.0 and (free.forward, free.host_forward) == (
        tied.forward,
        tied.host_forward,
    )
    forward, backward = host_region_times_s(tied)
    assert forward == pytest.approx(free.forward + free.sync_idle + free.host_forward + trips[0])
    assert backward == pytest.approx(free.backward + free.host_backward + trips[1])
    assert host_region_times_s(free) == (
        max(free.forward + free.sync_idle, free.host_forward + free.sync_wait),
        max(free.backward, free.host_backward),
    )


CASE = dict(model="gpt3-125m", system="dgx-h100-80gb", gpus=1, micro_batch=1, seq_length=128)


def _step(**profile_updates) -> float:
    profile = load_framework("pytorch-eager").model_dump()
    profile.update(profile_updates)
    return api.estimate(**CASE, framework=profile).step_time_s


def test_a_small_eager_step_is_host_bound():
    """At micro-batch 1 and 128 tokens the device work of a 125M model is a few milliseconds; the host's launches
    (about 450 kernels at 35.6 us) set the step."""
    priced, unpriced = _step(), _step(host_launch_s=0.0)
    assert priced > 1.5 * unpriced


@pytest.mark.parametrize("launch", [5e-6, 31.6e-6, 80e-6])
def test_a_slower_host_is_never_faster(launch):
    assert _step(host_launch_s=launch * 1.5) >= _step(host_launch_s=launch)
    assert _step(host_launch_s=launch, host_step_s=2e-3) >= _step(host_launch_s=launch)
    assert _step(host_launch_s=launch, host_view_s=30e-6) >= _step(host_launch_s=launch)
    for scope in ("model", "layer"):
        calls = {"host_launch_s": launch, "compiled_graphs": scope}
        assert _step(**calls, host_graph_call_s=75e-6) >= _step(**calls, host_graph_call_s=37.5e-6)
        assert _step(**calls, host_graph_call_s=37.5e-6) >= _step(host_launch_s=launch)


def test_synchronous_launches_are_never_faster():
    """A host-bound eager step (test_a_small_eager_step_is_host_bound) gets slower still with synchronous launches:
    its device time adds to the host's, at every per-kernel host figure."""
    assert _step(launch_blocking=True) > _step()
    for launch in (5e-6, 80e-6):
        assert _step(launch_blocking=True, host_launch_s=launch) > _step(host_launch_s=launch)


def test_more_launches_are_never_faster():
    assert _step(autocast_casts=True) >= _step(autocast_casts=False)
    unbiased = load_model("gpt3-125m").model_dump() | {"bias": False, "name": "gpt3-125m-no-bias"}
    args = {k: v for k, v in CASE.items() if k != "model"}
    no_bias = api.estimate(unbiased, framework="pytorch-eager", **args).step_time_s
    assert _step() > no_bias  # the biases' casts and gradient reductions are launched too
    assert _step(fused_kernels=False) >= _step(fused_kernels=True, eager_traffic_factor=1.0) - 1e-12


@pytest.mark.parametrize("scope", ["attention", "layer", "full_iteration"])
def test_cuda_graphs_are_never_slower(scope):
    none = _step(cuda_graph_scope="none")
    assert _step(cuda_graph_scope=scope) <= none
    assert _step(cuda_graph_scope="full_iteration") <= _step(cuda_graph_scope=scope)


def test_host_speed_scales_the_host_bound_step():
    fast = framework_system(load_framework("pytorch-eager"), load_system("dgx-h100-80gb"))
    data = fast.model_dump()
    data["accelerator"]["efficiency"]["host_speed"] = 0.5
    args = {k: v for k, v in CASE.items() if k not in ("model", "system")}
    slow_s = api.estimate("gpt3-125m", data, **args).step_time_s
    assert slow_s > api.estimate("gpt3-125m", fast, **args).step_time_s


def test_eager_layer_kernels_match_the_profiled_count():
    """Structural check (a count, not a time): the kernels cost.host counts for one eager AMP GPT layer against
    the profiled kernels one layer adds to a tiny GPT step (torch.profiler gpu_events of the 2- and 16-layer steps,
    benchmarks/gpu/measured/h100-2026-11-27b/host/tiny_steps.json: 159 and 1,033, 62.4 a layer, memsets and
    copies included). cost.host counts 58 (21 forward, 37 backward): within 10 %, and never more."""
    import json
    from pathlib import Path

    from paraplan.graph.transformer import LayerShape, decoder_layer_1d
    from paraplan.validate.case_files import load_cases

    root = Path(__file__).resolve().parents[2]
    records = json.loads(
        (root / "benchmarks/gpu/measured/h100-2026-11-27b/host/tiny_steps.json").read_text()
    )["records"]
    events = {r["model"]["layers"]: r["profile"]["gpu_events"] for r in records}
    per_layer = (events[16] - events[2]) / 14
    case = next(
        c
        for c in load_cases([root / "src/paraplan/validate/cases/tiny-steps-2026-11.json"])
        if c.name == "h100-tiny-gpt-2l-eager-amp-s256-mb4"
    )
    shape = LayerShape(1, 1, 4, 256, False, "flash", "bf16")
    eff = framework_system(load_framework("pytorch-eager"), load_system("dgx-h100-80gb"))
    eff = eff.accelerator.efficiency
    bias = (case.model.has_bias, case.model.has_qkv_bias)
    counted = [
        H.op_kernels(op, eff.host_eager, eff.autocast_casts, *bias, wide_roles=H.wide_roles(eff))
        for op in decoder_layer_1d(case.model, shape).ops
    ]
    forward, backward = (sum(k[i] for k in counted) for i in (0, 1))
    assert (forward, backward) == (21, 37)
    assert 0.9 * per_layer <= forward + backward <= per_layer


# the ops of a tiny GPT layer that a residual MLP layer (LayerNorm, Linear, GeLU, Linear, residual add) runs
MLP_LAYER = (
    "post_attention_norm",
    "mlp_in_projection",
    "mlp_activation",
    "mlp_out_projection",
    "mlp_residual",
)


@pytest.mark.parametrize(
    "framework, mode, layers, counted",
    [
        ("pytorch-eager", "eager", (2, 16), (10, 17)),
        ("pytorch-compile", "default", (2, 8), (9, 13)),
    ],
)
def test_the_per_kernel_host_figure_is_the_step_growth_over_the_counted_kernels(
    framework, mode, layers, counted
):
    """host_launch_s is the growth per layer of the measured host-bound residual MLP stack (hidden 256, 1,024
    tokens, autocast bf16 over fp32 parameters, with biases) over the kernels cost.host counts for that layer
    (cost.host.per_kernel_host_s), not over the profiler's count: eager 960.7 us / 27 = 35.6 us, compiled
    863.2 us / 22 = 39.2 us (benchmarks/gpu/measured/h100-2026-11-27c/modules/inductor_host.csv)."""
    import csv
    from pathlib import Path

    from paraplan.graph.transformer import LayerShape, decoder_layer_1d

    root = Path(__file__).resolve().parents[2]
    rows = csv.DictReader(
        (root / "benchmarks/gpu/measured/h100-2026-11-27c/modules/inductor_host.csv").open()
    )
    step = {int(r["layers"]): float(r["step_us"]) for r in rows if r["mode"] == mode}
    growth = (step[layers[1]] - step[layers[0]]) / (layers[1] - layers[0]) * 1e-6
    model = load_model("gpt3-125m").model_copy(
        update={"hidden": 256, "heads": 4, "kv_heads": 4, "ffn_hidden": 1024, "layers": 2}
    )
    eff = framework_system(load_framework(framework), load_system("dgx-h100-80gb"))
    eff = eff.accelerator.efficiency
    ops = [
        op
        for op in decoder_layer_1d(model, LayerShape(1, 1, 4, 256, False, "flash", "bf16")).ops
        if op.name in MLP_LAYER
    ]
    assert len(ops) == len(MLP_LAYER)
    assert H.counted_kernels(ops, eff, (True, True)) == counted
    figure = H.per_kernel_host_s(growth, sum(counted))
    assert eff.host_launch_s == pytest.approx(figure, abs=0.05e-6)
    assert H.per_kernel_host_s(1e-3, 25) == pytest.approx(40e-6)
