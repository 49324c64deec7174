"""One definition decides autocast's casts for the host's kernel count and the device time
(graph.eager_modules.autocast_runs): a composite module (graph.eager_modules: gelu_new, LlamaRMSNorm,
rotate_half) launches as many kernels on the host (cost.host.op_host_s) as the device prices
(cost.eager_kernels.composite_times_s), whether the profile autocasts or not (``autocast_casts``, e.g. a
pure-bf16 loop), in bf16 and in fp32 runs.

The device count is read from the device time on an accelerator whose HBM is so fast that every kernel takes
its launch floor (efficiency.kernel_overhead_s): time = floor x kernels x tensors."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost import host as H
from paraplan.cost.eager_kernels import composite_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph.eager_modules import FAMILY_ROLE, autocast_runs, impl_key
from paraplan.graph.transformer import LayerShape
from paraplan.step.blocks import BLOCK_KINDS

FLOOR = 1e-6


def _system(autocast_casts: bool):
    base = framework_system(load_framework("hf-transformers"), load_system("dgx-h100-80gb"))
    acc = base.accelerator
    # one figure per kernel (no call kinds, cost.host_kinds), so that the host's seconds count its kernels
    update = {"autocast_casts": autocast_casts, "kernel_overhead_s": FLOOR, "host_launch_s": 1.0}
    eff = acc.efficiency.model_copy(update={**update, "host_dispatch_s": {}})
    acc = acc.model_copy(update={"hbm_bandwidth": 1e30, "efficiency": eff})
    return base.model_copy(update={"accelerator": acc})


def _composite_ops(model_name: str, system, dtype: str):
    shape = LayerShape(
        tp=1,
        cp=1,
        micro_batch=1,
        seq_length=1024,
        sequence_parallel=False,
        attention="flash",
        dtype=dtype,
        module_impl=impl_key(system.accelerator.efficiency.module_impl),
    )
    model = load_model(model_name)
    if model_name == "gpt3-125m":  # GPT-2's NewGELUActivation (transformers ACT2FN["gelu_new"])
        model = model.model_copy(update={"activation": "gelu_new"})
    graph = BLOCK_KINDS["decoder"].graph(model, shape)
    return [op for op in graph.ops if op.kernel is not None and op.kernel[0] in FAMILY_ROLE]


@pytest.mark.parametrize("autocast_casts", [True, False])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("model_name", ["gpt3-125m", "llama2-7b"])
def test_host_and_device_count_the_same_kernels(autocast_casts, dtype, model_name):
    system = _system(autocast_casts)
    eff = system.accelerator.efficiency
    ops = _composite_ops(model_name, system, dtype)
    assert ops, "no composite op: the profile's module_impl did not reach the graph"
    for op in ops:
        device = composite_times_s(op, system.accelerator, dtype)
        assert device is not None, op.name
        host = H.op_host_s(op, eff, False, dtype=dtype)  # seconds at 1 s per kernel
        per_tensor = [round(t / FLOOR) for t in device]
        assert [round(h) for h in host] == per_tensor, (op.name, dtype, autocast_casts)


@pytest.mark.parametrize(
    "autocast_casts, dtype, runs",
    [(True, "bf16", True), (False, "bf16", False), (True, "fp32", False), (True, "tf32", False)],
)
def test_autocast_runs_by_hand(autocast_casts, dtype, runs):
    act = 4 if dtype in ("fp32", "tf32") else 2
    assert autocast_runs(autocast_casts, act) is runs
