"""Write the DeepGEMM kernel table (catalog/kernels/h800-deepgemm/) from DeepGEMM's published per-shape results.

Source: github.com/deepseek-ai/DeepGEMM (MIT) README.md at commit 327ec92f6977e7fee022cb76a8f273b75483c3d8
(2025-04-09, "Update roadmap"), section "Performance", the last README that publishes the per-shape tables (the
next README change, 37aa127 of 2025-04-14, "Use swizzling instead of padding (#86)", removed the section; the
first published figures, a6d97a1 of 2025-02-25, were raised in 55ab91f of 2025-03-25, "Update performance").
The section's text is saved beside this script (README-327ec92-performance.md, the README's lines 32-79):
"We test all shapes potentially used in DeepSeek-V3/R1 inference (...) on H800 SXM5 with NVCC 12.8", fp8
inputs with fine-grained (1x128 / 128x128) scaling and bf16 output. Three tables: normal (dense) GEMMs (M, N,
K), grouped GEMMs in the contiguous layout and in the masked layout (#Groups, M per group, N, K), each with
"Computation" in TFLOPS, "Memory bandwidth" in GB/s and a speedup over DeepSeek's CUTLASS-3.6-based kernels.
The README does not state power, clocks or driver.

The figures were printed by tests/test_core.py at that commit: kernel time by the PyTorch profiler (bench_kineto,
the ``fp8_gemm`` kernel's duration alone, on inputs built once so that they are not L2-resident), throughput
2·groups·m·n·k / t (masked layout: every group full, masked_m = m). This script inverts that:
time_us = 2·groups·m·n·k / (TFLOPS·1e12) · 1e6 (to the README's 3-4 significant figures). Columns: DeepGEMM's
M per group is the routed tokens (tokens_per_expert), K the contraction (k), N the output width (n) of
D = A·Bᵀ (the NT layout: A m×k, B n×k), as cost.kernel_tables' grouped-GEMM columns. Dense rows go to a
second file with m, n, k (not read by the catalog: see table.yaml).

    git -C DeepGEMM show 327ec92:README.md | sed -n 32,79p > benchmarks/deepgemm/README-327ec92-performance.md
    python benchmarks/deepgemm/grouped_table.py benchmarks/deepgemm/README-327ec92-performance.md \
        src/paraplan/catalog/kernels/h800-deepgemm
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTIONS = {
    "### Normal GEMMs for dense models": "dense",
    "### Grouped GEMMs for MoE models (contiguous layout)": "contiguous",
    "### Grouped GEMMs for MoE models (masked layout)": "masked",
}


def numbers(cell: str) -> float:
    """The number in a README cell: '1346 TFLOPS' -> 1346.0, '1.3x' -> 1.3."""
    match = re.search(r"[0-9]+(?:\.[0-9]+)?", cell)
    if match is None:
        raise ValueError(f"no number in README cell {cell!r}")
    return float(match.group())


def tables(text: str) -> dict[str, list[list[float]]]:
    """Section ('dense', 'contiguous', 'masked') -> its rows' numbers, in README order."""
    out: dict[str, list[list[float]]] = {}
    section = None
    for line in text.splitlines():
        if line.strip() in SECTIONS:
            section = SECTIONS[line.strip()]
            out[section] = []
        elif section and line.startswith("|") and not re.match(r"^\|[\s:|-]+\|$", line):
            cells = [c for c in line.strip().strip("|").split("|")]
            if not re.search(r"[0-9]", cells[0]):
                continue  # the header row
            out[section].append([numbers(c) for c in cells])
    return out


def time_us(flops: float, tflops: float) -> float:
    """The kernel time the README's rate implies: flops / (TFLOPS · 1e12), in microseconds."""
    return flops / (tflops * 1e12) * 1e6


def grouped_lines(parsed: dict[str, list[list[float]]]) -> list[str]:
    """grouped_gemm_deepgemm.csv: contiguous then masked rows."""
    lines = ["experts,tokens_per_expert,k,n,dtype,time_us,layout,tflops,gb_per_s,speedup"]
    for layout in ("contiguous", "masked"):
        for groups, m, n, k, tflops, gbps, speedup in parsed[layout]:
            t = time_us(2.0 * groups * m * n * k, tflops)
            lines.append(
                f"{groups:.0f},{m:.0f},{k:.0f},{n:.0f},fp8,{t:.4f},{layout},{tflops:g},{gbps:g},{speedup:g}"
            )
    return lines


def dense_lines(parsed: dict[str, list[list[float]]]) -> list[str]:
    """dense_gemm_deepgemm.csv: the normal GEMMs, m n k as cost.kernel_tables' GEMM columns."""
    lines = ["m,n,k,dtype,time_us,tflops,gb_per_s,speedup"]
    for m, n, k, tflops, gbps, speedup in parsed["dense"]:
        t = time_us(2.0 * m * n * k, tflops)
        lines.append(f"{m:.0f},{n:.0f},{k:.0f},fp8,{t:.4f},{tflops:g},{gbps:g},{speedup:g}")
    return lines


def main(readme: str, folder: str) -> None:
    parsed = tables(Path(readme).read_text(encoding="utf-8"))
    for name, lines in (
        ("grouped_gemm_deepgemm.csv", grouped_lines(parsed)),
        ("dense_gemm_deepgemm.csv", dense_lines(parsed)),
    ):
        out = Path(folder) / name
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{len(lines) - 1} rows -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
