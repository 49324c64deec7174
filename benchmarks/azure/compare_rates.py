"""Compare the Azure AI-benchmarking-guide GEMM tables (catalog/kernels/nd-*) with the catalog's in-step GEMM rates.

For each table and row: the published kernel rate (2·m·n·k / time), the rate its catalog system prices the same
GEMM at without a table (cost.compute.gemm_kernel_time_s: the analytical in-step kernel time, the step-level ramp
left out), in the row's dtype and in bf16 (fp16 rows: bf16 is the dtype), and their ratio; per table
r = Σ table time / Σ priced time (calibrate.in_step.in_step_ratios' definition, r < 1: the kernels alone run
faster than a step keeps them) over all rows and over the rows of ≥ 0.2 TFLOP. Component data only: nothing
here changes a catalog constant.

    PYTHONPATH=src python benchmarks/azure/compare_rates.py
"""

from __future__ import annotations

import re
from pathlib import Path

from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.comm import GroupSpan, all_reduce_time_s
from paraplan.cost.compute import gemm_kernel_time_s, gemm_time_s

# table -> the catalog system priced (its accelerator is the one the table lists)
SYSTEMS = {
    "nd-gb300-v6-cublaslt": "gb300-nvl72",
    "nd-gb200-v6-cublaslt": "gb200-nvl72",
    "nd-h100-v5-cublaslt": "dgx-h100-80gb",
    "nd-h200-v5-cublaslt": "dgx-h200",
    "nd-mi300x-v5-hipblaslt": "mi300x-8",
    "nd-a100-v4-cublaslt": "dgx-a100-80gb",
}
# results file (benchmarks/azure/sources) -> (catalog system, ranks of the single-VM NCCL all_reduce_perf run)
NCCL = {
    "ND_GB300_v6_results-18e80a2.md": ("gb300-nvl72", 4),
    "ND_GB200_v6_results-4c986ce.md": ("gb200-nvl72", 4),
    "ND_H100_v5_results-b79e721.md": ("dgx-h100-80gb", 8),
    "ND_H200_v5_results-ae775aa.md": ("dgx-h200", 8),
}
BIG = 0.2e12  # FLOPs: the rows past the small, launch-bound shapes


def priced_tflops(acc, m: int, n: int, k: int, dtype: str, aligned: bool = True) -> float:
    """The catalog's in-step kernel rate of an m×n×k GEMM, TFLOPS (no table attached): with ``aligned``, no
    odd dimension is an operand's leading dimension (cost.gemm_alignment's share not applied: the benchmark's
    1024 x 2145 x 1024 row runs near its neighbours' rate), else the catalog's default rule."""
    flops = 2.0 * m * n * k
    if not aligned:
        return flops / gemm_kernel_time_s(flops, (1, m, n, k), acc, dtype) / 1e12
    t = gemm_time_s(flops, (1, m, n, k), acc, dtype, True) - acc.efficiency.gemm_ramp_s
    return flops / t / 1e12


def compare(table: str) -> dict:
    acc = load_system(SYSTEMS[table]).accelerator
    assert acc.kernel_tables is None, "the catalog system attaches no table"
    rows = kt.load_table(table).rows["gemm"]
    out = []
    for row in rows:
        m, n, k = (int(row[c]) for c in ("m", "n", "k"))
        dtype, t = row["dtype"], float(row["time_us"]) * 1e-6
        rate = 2.0 * m * n * k / t / 1e12
        same = priced_tflops(acc, m, n, k, dtype)
        bf16 = priced_tflops(acc, m, n, k, "bf16")
        odd = priced_tflops(acc, m, n, k, dtype, aligned=False)
        out.append((m, n, k, dtype, rate, same, bf16, t, 2.0 * m * n * k / same / 1e12, odd))
    r_all = sum(x[7] for x in out) / sum(x[8] for x in out)
    big = [x for x in out if 2.0 * x[0] * x[1] * x[2] >= BIG]
    r_big = sum(x[7] for x in big) / sum(x[8] for x in big)
    return {"system": SYSTEMS[table], "rows": out, "r": r_all, "r_big": r_big, "n_big": len(big)}


def nccl_rows(text: str) -> list[tuple[int, float]]:
    """(bytes, bus GB/s) of a results file's NCCL all-reduce table: nccl-tests all_reduce_perf -b 8 -e 8G -f 2
    (Benchmarks/NVIDIA/NCCLBandwidth.py), so the n-th size label from 1K is 2^(10+n) bytes."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            inside = "NCCL Bandwidth" in line
        elif inside and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 2 and re.fullmatch(r"[0-9]+[KMG]", cells[0]):
                out.append((2 ** (10 + len(out)), float(cells[1])))
    return out


def nccl_compare(sources: Path) -> None:
    """Bus bandwidth of one VM's all-reduce (every GPU of the VM, one NVLink domain): published against
    cost.comm.all_reduce_time_s on the catalog system, busbw = 2(n−1)/n · bytes / time."""
    for file, (name, ranks) in NCCL.items():
        system = load_system(name)
        span = GroupSpan(ranks, ranks, 1)
        print(f"{file} ({ranks} ranks) vs {name}")
        for size, bus in nccl_rows((sources / file).read_text(encoding="utf-8")):
            if size < 2**20:
                continue
            model = 2 * (ranks - 1) / ranks * size / all_reduce_time_s(size, span, system) / 1e9
            print(
                f"  {size:>12} B  published {bus:7.1f}  model {model:7.1f}  ratio {bus / model:5.2f}"
            )


def main() -> None:
    for table in SYSTEMS:
        res = compare(table)
        print(
            f"{table} vs {res['system']}: r = {res['r']:.3f} (all rows), {res['r_big']:.3f} "
            f"({res['n_big']} rows of >= 0.2 TFLOP)"
        )
        print("    m      n      k   dtype  table TF  priced TF  ratio  priced bf16 TF  table/bf16")
        for m, n, k, dtype, rate, same, bf16, _, _, odd in res["rows"]:
            extra = (
                f"   (unaligned rule: priced {odd:.1f}, ratio {rate / odd:.2f})"
                if odd != same
                else ""
            )
            print(
                f"  {m:>6} {n:>6} {k:>6} {dtype:>5} {rate:9.1f} {same:10.1f} {rate / same:6.3f}"
                f" {bf16:14.1f} {rate / bf16:10.3f}{extra}"
            )
    nccl_compare(Path(__file__).parent / "sources")


if __name__ == "__main__":
    main()
