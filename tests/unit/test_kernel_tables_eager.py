"""Eager stacks with a measured kernel table attached (cost.kernel_tables, cost.compute; issue 32)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.compute import memory_time_s
from paraplan.cost.frameworks import framework_system
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import estimate

H100_TABLE = "h100-sxm5-80gb"


def attached(system: SystemSpec, ref: str = H100_TABLE) -> SystemSpec:
    acc = system.accelerator.model_copy(update={"kernel_tables": ref})
    return SystemSpec.model_validate({**system.model_dump(), "accelerator": acc.model_dump()})


def test_the_eager_traffic_factor_applies_with_a_table_attached_too():
    base = load_system("dgx-h100-80gb")
    eager = load_framework("pytorch-eager")
    f = eager.eager_traffic_factor
    assert f > 1
    for system in (base, attached(base)):
        fused = framework_system(load_framework("pytorch-compile"), system).accelerator
        slow = framework_system(eager, system).accelerator
        for size in (3e7, 4e8, 3e9):
            assert memory_time_s(size, slow) == pytest.approx(memory_time_s(f * size, fused))
            assert memory_time_s(size, slow) > memory_time_s(size, fused)


def test_an_eager_step_is_slower_than_the_same_step_fused_with_a_table_attached():
    model = load_model("gpt3-350m")
    plan = PlanSpec(gpus=1, micro_batch=4, global_batch=4, seq_length=2048, dtype="bf16")
    system = attached(load_system("dgx-h100-80gb"))
    eager = load_framework("pytorch-eager")
    fused = eager.model_copy(update={"fused_kernels": True})
    t_eager = estimate(model, framework_system(eager, system), plan).step_time_s
    t_fused = estimate(model, framework_system(fused, system), plan).step_time_s
    assert t_eager > 1.02 * t_fused


def _op(name, kernel, fwd_bytes=1e8, bwd_bytes=2e8):
    from paraplan.graph.ops import Op

    return Op(name, "memory", 0.0, fwd_bytes, 0.0, bwd_bytes, kernel=kernel)


def test_the_kernels_table_is_read_and_prices_eager_ops_at_measured_shapes():
    from paraplan.cost import kernel_tables as kt
    from paraplan.cost.compute import op_times_s

    table = kt.load_table(H100_TABLE)
    assert {"rmsnorm_fwd", "swiglu_fwd_bwd", "cross_entropy_fp32_fwd_bwd"} <= set(table.kernels)
    # a measured shape returns its own time (kernels.csv: rmsnorm_fwd 4096x4096 29.9077 us)
    assert kt.kernel_time_s(H100_TABLE, None, "rmsnorm_fwd", (4096, 4096)) == pytest.approx(
        29.9077e-6
    )
    system = attached(load_system("dgx-h100-80gb"))
    acc = framework_system(load_framework("pytorch-eager-bf16"), system).accelerator
    fwd, bwd = op_times_s(_op("input_norm", ("rmsnorm", 4096.0, 4096.0)), acc, "bf16")
    assert fwd == pytest.approx(29.9077e-6)
    leaf = (
        6 * 4096 * 4096 / (acc.hbm_bandwidth * acc.efficiency.hbm)
    )  # x.grad += dx in the benchmark
    assert bwd == pytest.approx(153.6371e-6 - 29.9077e-6 - leaf)
    # the loss: the measured fwd+bwd less the leaf logits' lg.grad += dlg (3 x 2 B per bf16 logit,
    # cost.leaf_grads), split 3 : 2 as the graph's bytes
    ce = op_times_s(_op("cross_entropy", ("cross_entropy", 4096.0, 32000.0), 3e8, 2e8), acc, "bf16")
    logits_leaf = 6 * 4096 * 32000 / (acc.hbm_bandwidth * acc.efficiency.hbm)
    assert sum(ce) == pytest.approx(2492.0321e-6 - logits_leaf) and ce[0] == pytest.approx(
        1.5 * ce[1]
    )
    # AMP (pytorch-eager): the norm in fp32 (twice the bytes) and its output cast to bf16
    amp = framework_system(load_framework("pytorch-eager"), system).accelerator
    fwd32, _ = op_times_s(_op("input_norm", ("rmsnorm", 4096.0, 4096.0)), amp, "bf16")
    assert fwd32 == pytest.approx(2 * 29.9077e-6 + 54.8739e-6)


def test_fused_stacks_and_tables_without_kernels_keep_the_copy_pricing():
    from paraplan.cost.compute import op_times_s

    system = attached(load_system("dgx-h100-80gb"))
    op = _op("input_norm", ("rmsnorm", 4096.0, 4096.0))
    for name in ("megatron-core", "pytorch-compile"):
        acc = framework_system(load_framework(name), system).accelerator
        assert op_times_s(op, acc, "bf16") == (
            memory_time_s(op.fwd_bytes, acc),
            memory_time_s(op.bwd_bytes, acc),
        )
    # no table: the eager profile keeps the analytical form with its traffic factor
    acc = framework_system(
        load_framework("pytorch-eager"), load_system("dgx-h100-80gb")
    ).accelerator
    assert op_times_s(op, acc, "bf16")[0] == memory_time_s(op.fwd_bytes, acc)


@pytest.mark.parametrize(
    "framework, dtype, file",
    [
        ("pytorch-eager", "bf16", "kernels.csv"),
        ("pytorch-eager-bf16", "bf16", "kernels.csv"),
        ("megatron-core", "fp8", "fp8_kernels.csv"),
    ],
)
def test_a_step_never_gets_faster_when_a_measured_kernel_gets_slower(
    tmp_path, framework, dtype, file
):
    import random
    import shutil
    from importlib import resources
    from pathlib import Path

    from paraplan.cost import kernel_tables as kt

    rng = random.Random(32)
    src = Path(str(resources.files("paraplan.catalog") / "kernels" / H100_TABLE))
    fw = load_framework(framework)
    plans = [
        (load_model("gpt3-350m"), dict(micro_batch=8, seq_length=2048)),
        (
            load_model("llama3-8b").model_copy(update={"layers": 2}),
            dict(micro_batch=1, seq_length=4096),
        ),
    ]
    plans = [
        (m, PlanSpec(gpus=1, global_batch=p["micro_batch"], dtype=dtype, **p)) for m, p in plans
    ]
    base = framework_system(fw, attached(load_system("dgx-h100-80gb")))
    before = [estimate(m, base, p).step_time_s for m, p in plans]
    lines = (src / file).read_text().splitlines()
    for trial in range(6):
        dst = tmp_path / f"t{trial}"
        shutil.copytree(src, dst)
        rows = set(range(1, len(lines))) if trial == 0 else {rng.randrange(1, len(lines))}
        out = [
            ",".join(c[:-1] + [repr(1.25 * float(c[-1]))]) if i in rows else ln
            for i, ln in enumerate(lines)
            for c in [ln.split(",")]
        ]
        (dst / file).write_text("\n".join(out) + "\n")
        slow = framework_system(fw, attached(load_system("dgx-h100-80gb"), str(dst)))
        after = [estimate(m, slow, p).step_time_s for m, p in plans]
        for b, a in zip(before, after):
            assert a >= b * (1 - 1e-12), (trial, b, a)
        if trial == 0:  # every step reads the file's kernels
            assert all(a > b * 1.003 for b, a in zip(before, after)), (before, after)
    kt.clear_caches()


def test_fp8_operand_casts_are_priced_as_transformer_engine_cast_transposes_with_a_table():
    """The recipes one by one: tests/unit/test_quantisation.py."""
    from paraplan.cost import kernel_tables as kt
    from paraplan.cost.compute import op_times_s
    from paraplan.cost.quantisation import FUSED_ROW, measured_rate
    from paraplan.graph.transformer import LayerShape, fp8_cast_op

    model = load_model("llama3-8b")
    shape = LayerShape(1, 1, 1, 8192, False, "flash", "fp8")
    op = fp8_cast_op(model, shape)
    family, rows, width = op.kernel
    assert family == "fp8_cast" and rows * width * 3.0 == pytest.approx(op.fwd_bytes)
    system = attached(load_system("dgx-h100-80gb"))
    acc = framework_system(load_framework("megatron-core"), system).accelerator
    fwd, bwd = op_times_s(op, acc, "fp8")
    # H100, delayed scaling (the profile states no recipe): the measured fused amax + cast + transpose pass
    # (fp8_kernels.csv) at its 16k-token rate, 4 B per element (cost.quantisation)
    rate = measured_rate(acc, FUSED_ROW, 4.0, width)
    assert fwd == pytest.approx(rows * width * 4.0 / rate)
    assert bwd > fwd  # the output gradients: more elements (q + 2kv, 2f)
    # H200 has no fp8 table: the cast kernel's bytes/s at 2 + 1 + 1 B per element
    h200 = framework_system(
        load_framework("megatron-core"), attached(load_system("dgx-h200"), "h200-sxm-141gb")
    )
    cast = kt.kernel_time_s(
        "h200-sxm-141gb", h200.accelerator.l2_cache, "cast_bf16_fp32", (rows, width)
    )
    assert op_times_s(op, h200.accelerator, "fp8")[0] == pytest.approx(cast * 4.0 / 6.0)
    # slower than the same bytes as a plain copy, faster than nothing; no table: the copy form
    assert fwd > memory_time_s(op.fwd_bytes, acc)
    bare = framework_system(load_framework("megatron-core"), load_system("dgx-h100-80gb"))
    assert op_times_s(op, bare.accelerator, "fp8")[0] == pytest.approx(
        memory_time_s(op.fwd_bytes * 4.0 / 3.0, bare.accelerator)
    )
