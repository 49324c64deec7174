"""A synthetic cluster with known constants and its "measurements", written in the tools' formats.

Used by the acceptance test (fit the measurements, recover the constants) and to regenerate the
bundled sample inputs (``paraplan calibrate --write-samples DIR``). Measurements are paraplan's own
predictions on the true system, rounded as the tools print them (nccl-tests: microseconds with two
decimals), so a correct fit recovers the constants up to that rounding.
"""

from __future__ import annotations

from pathlib import Path

from paraplan.calibrate.fit import (
    NIC_EFF,
    NIC_LAT,
    NIC_OVERLAP,
    NVLINK_EFF,
    NVLINK_LAT,
    NVLINK_OVERLAP,
    attention_flops,
    nccl_span,
    with_values,
)
from paraplan.calibrate.readers import AttentionSample, NcclRun
from paraplan.calibrate.steps import StepRun
from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import collective_time_s, gather_or_scatter_time_s
from paraplan.cost.compute import attention_time_s, gemm_time_s, memory_time_s
from paraplan.io.documents import atomic_write_text
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec

EFF = "accelerator.efficiency"
TRUE_VALUES = {
    NVLINK_EFF: 0.72,
    NIC_EFF: 0.81,
    NVLINK_LAT: 7e-6,
    NIC_LAT: 18e-6,
    f"{EFF}.kernel_overhead_s": 5e-6,
    f"{EFF}.attention": 0.55,
    f"{EFF}.hbm": 0.80,
    NVLINK_OVERLAP: 0.3,
    NIC_OVERLAP: 0.05,
}
# the GEMM kernels alone (gemm.csv): kernel caps, no step ramp. The true system's in-step caps and ramp
# are the base's (a kernel table does not show them: calibrate keeps them, docs/calibration.md), which
# its kernels, faster than the base's in-step rate, allow
KERNEL_CAPS = {f"{EFF}.gemm": 0.77, f"{EFF}.gemm_fp8": 0.64}
BASE_SYSTEM = "dgx-h100-80gb"
NCCL_RUNS = (
    ("all_reduce", 8, 1),
    ("all_reduce", 32, 4),
    ("all_gather", 8, 1),
    ("reduce_scatter", 16, 2),
    ("sendrecv", 16, 2),
    ("alltoall", 8, 1),
)
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}


def true_system() -> SystemSpec:
    return with_values(load_system(BASE_SYSTEM), TRUE_VALUES).model_copy(
        update={"name": "synthetic-h100"}
    )


def nccl_text(
    kind: str, ranks: int, nodes: int, sizes: list[int], times_us: list[float], gpu: str
) -> str:
    """nccl-tests' output layout (nccl-tests 2.13 column set)."""
    per_node = ranks // nodes
    lines = [
        f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 4(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(ranks):
        lines.append(
            f"#  Rank {r:2d} Group  0 Pid {40000 + r:6d} on node-{r // per_node:03d} device {r % per_node:2d} "
            f"[0x{(r % per_node) * 16 + 7:02x}] {gpu}"
        )
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    busbw_sum = 0.0
    for size, t in zip(sizes, times_us):
        count = size // 4 // (ranks if kind in ("all_gather", "alltoall") else 1)
        algbw = size / (t * 1e-6) / 1e9
        busbw = algbw * BUSBW_FACTOR[kind](ranks)
        busbw_sum += busbw
        cell = f"{t:8.2f} {algbw:7.2f} {busbw:7.2f} {0:6d}"
        lines.append(
            f"{size:12d} {count:13d} {'float':>9s} {REDOP.get(kind, 'none'):>7s} {-1:7d} {cell} {cell}"
        )
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {busbw_sum / len(sizes):.4g} ",
        "#",
    ]
    return "\n".join(lines) + "\n"


def nccl_measurements(system: SystemSpec) -> dict[str, str]:
    """File name -> nccl-tests output of each run on ``system``."""
    sizes = [8 * 4**i for i in range(15)]  # 8 B .. 2 GiB, factor 4
    out = {}
    for kind, ranks, nodes in NCCL_RUNS:
        probe = NcclRun("", kind, ranks, nodes, (), ())
        span = nccl_span(probe, system)
        model_kind = {"sendrecv": "send_recv", "alltoall": "all_gather"}.get(
            kind, kind
        )  # all-to-all: stand-in
        times = [
            (
                gather_or_scatter_time_s(s, span, system)
                if kind == "alltoall"
                else collective_time_s(model_kind, s, span, system)
            )
            * 1e6
            for s in sizes
        ]
        out[f"{kind}_perf_{nodes}n{ranks}g.txt"] = nccl_text(
            kind, ranks, nodes, sizes, times, "NVIDIA H100 80GB HBM3"
        )
    return out


GEMM_SHAPES = [
    (m, n, k) for m in (512, 2048, 8192) for n in (1024, 4096, 12288) for k in (1024, 4096, 12288)
]


def gemm_csv(system: SystemSpec) -> str:
    """The GEMM kernels timed alone: at KERNEL_CAPS, without the step-level ramp."""
    rows = ["m,n,k,dtype,time_us"]
    acc = with_values(system, {**KERNEL_CAPS, f"{EFF}.gemm_ramp_s": 0.0}).accelerator
    for dtype in ("bf16", "fp8"):
        for m, n, k in GEMM_SHAPES:
            t = gemm_time_s(2.0 * m * n * k, (1, m, n, k), acc, dtype)
            rows.append(f"{m},{n},{k},{dtype},{t * 1e6:.4f}")
    return "\n".join(rows) + "\n"


def attention_csv(system: SystemSpec) -> str:
    rows = ["batch,heads,seq_len,head_dim,causal,direction,dtype,time_us"]
    for seq in (1024, 2048, 4096, 8192):
        for direction in ("fwd", "bwd"):
            s = AttentionSample(4, 32, seq, 128, True, direction, "bf16", 0.0)
            t = attention_time_s(*attention_flops(s), system.accelerator, "bf16")
            rows.append(f"4,32,{seq},128,1,{direction},bf16,{t * 1e6:.4f}")
    return "\n".join(rows) + "\n"


def memory_csv(system: SystemSpec) -> str:
    rows = ["bytes,time_us"]
    for size in (2**16, 2**20, 2**24, 2**26, 2**28, 2**30):
        rows.append(f"{size},{memory_time_s(size, system.accelerator) * 1e6:.4f}")
    return "\n".join(rows) + "\n"


_SP_OVERLAP = {"sequence_parallel": True, "overlap_tp_comm": True}  # Megatron-LM's usual TP flags
# the synthetic runs' plans: (gpus, tp, pp, micro_batch, global_batch, further plan fields)
_STEP_PLAN_ROWS = (
    (64, 8, 1, 1, 64, _SP_OVERLAP),
    (64, 4, 2, 2, 128, _SP_OVERLAP | {"zero": 1}),
    (64, 2, 1, 1, 64, {"zero": 3}),
    (32, 8, 1, 2, 64, {"sequence_parallel": True}),
    (64, 8, 2, 1, 128, _SP_OVERLAP | {"recompute": "selective"}),
)
STEP_PLANS = [
    dict(gpus=gpus, tp=tp, pp=pp, micro_batch=mb, global_batch=gb, **more)
    for gpus, tp, pp, mb, gb, more in _STEP_PLAN_ROWS
]
STEP_MODEL = "gpt3-13b"


def step_runs(system: SystemSpec) -> list[StepRun]:
    from paraplan.step.estimate import estimate

    model = load_model(STEP_MODEL)
    out = []
    for i, fields in enumerate(STEP_PLANS):
        plan = PlanSpec(seq_length=2048, **fields)
        out.append(
            StepRun(f"run{i + 1}", model, plan, round(estimate(model, system, plan).step_time_s, 6))
        )
    return out


def steps_yaml(system: SystemSpec) -> str:
    import yaml

    runs = [
        {
            "name": r.name,
            "step_time_s": r.step_time_s,
            "plan": r.plan.model_dump(exclude_defaults=True),
        }
        for r in step_runs(system)
    ]
    return yaml.safe_dump({"model": STEP_MODEL, "runs": runs}, sort_keys=False)


def write_samples(folder: Path) -> list[Path]:
    """Write the synthetic cluster's measurements into ``folder``; returns the files written."""
    system = true_system()
    files = dict(nccl_measurements(system))
    files["gemm.csv"] = gemm_csv(system)
    files["attention.csv"] = attention_csv(system)
    files["memory.csv"] = memory_csv(system)
    files["steps.yaml"] = steps_yaml(system)
    return [
        atomic_write_text(folder / name, text, make_parents=True) for name, text in files.items()
    ]
