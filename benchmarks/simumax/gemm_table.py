"""Write a GEMM kernel table (catalog/kernels/<name>-simumax/gemm.csv) from one of SimuMax's system files.

Source: github.com/MooreThreads/SimuMax (Apache-2.0) at commit 4dcaae5 (2026-05-11, v1.2):
configs/system/b200_bf16_ceperm.json (last changed in 1b8ca90, 2026-05-06; ``tflops`` 2250, the B200's
dense bf16 datasheet peak) and configs/system/a100_pcie.json (last changed in acdbb66, 2025-12-15;
``tflops`` 312, the A100's), ``accelerator.op.matmul``: ``tflops`` and ``accurate_efficient_factor``,
one entry per shape keyed ``b, m, k, n, layout, accumulate, out_dtype``. SimuMax measures an entry with
simu_tools/efficency_test/test_gemm_efficiency.py (same commit): Transformer Engine's ``general_gemm`` on
bf16 operands, back-to-back calls after warm-up timed by wall clock between device syncs, efficiency =
2·b·m·n·k / time / (tflops·1e12). This script inverts that: time_us = 2·b·m·n·k / (efficiency · tflops) ·
1e6; m, n, k are SimuMax's (C(m×n) = A(m×k)·B(k×n): TN the forward GEMM with m the tokens, NN the
data-gradient GEMM, NT the weight-gradient GEMM, k the tokens). A b > 1 entry is written as b·m rows
(cost.kernel_tables: a batch of b GEMMs is one GEMM of b·m rows). Each row keeps the source key and the
efficiency as provenance.

With a third path, the ``accelerator.op.group_matmul`` entries (keyed ``ng, M, N, K, ..., stage``; measured
by simu_tools/efficency_test/test_grouped_gemm_efficiency.py: Transformer Engine's ``general_grouped_gemm``
over ng experts of M tokens, the call Transformer Engine's GroupedLinear makes, one cuBLAS GEMM per expert;
efficiency = 2·ng·M·N·K / time / tflops) are written as grouped-GEMM rows, each stage as the GEMM it runs
per expert (rows m, contraction k, columns n): fwd y(M×N) = x(M×K)·wᵀ: m = M, k = K, n = N; bwd_grad_act
dx(M×K) = dy(M×N)·w: m = M, k = N, n = K; bwd_grad_w dw(N×K) = dyᵀ(N×M)·x: m = N, k = M, n = K. The time
goes in ``loop_time_us`` (the per-expert loop column cost.kernel_tables reads); SimuMax did not time one fused
grouped kernel, so there is no ``time_us`` column.

    git show 4dcaae5:configs/system/b200_bf16_ceperm.json > b200.json
    python benchmarks/simumax/gemm_table.py b200.json src/paraplan/catalog/kernels/b200-simumax/gemm.csv \
        src/paraplan/catalog/kernels/b200-simumax/grouped_gemm.csv
    git show 4dcaae5:configs/system/a100_pcie.json > a100.json
    python benchmarks/simumax/gemm_table.py a100.json src/paraplan/catalog/kernels/a100-pcie-simumax/gemm.csv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def parse_key(key: str) -> dict[str, str]:
    """SimuMax's shape key 'b=1, m=4096, k=8192, n=10240, layout=TN, ...' as a dict."""
    return dict(part.strip().split("=", 1) for part in key.split(","))


def rows(system: dict):
    """(m, n, k, time_us, layout, accumulate, out_dtype, efficiency, key) of each matmul entry."""
    matmul = system["accelerator"]["op"]["matmul"]
    peak = float(matmul["tflops"]) * 1e12
    for key, eff in matmul["accurate_efficient_factor"].items():
        f = parse_key(key)
        b, m, n, k = (int(f[c]) for c in "bmnk")
        time_us = 2.0 * b * m * n * k / (float(eff) * peak) * 1e6
        yield b * m, n, k, time_us, f["layout"], f["accumulate"], f["out_dtype"], float(eff), key


def grouped_rows(system: dict):
    """(experts, rows per expert m, k, n, time_us, stage, efficiency, key) of each group_matmul entry."""
    group = system["accelerator"]["op"].get("group_matmul") or {}
    peak = float(group.get("tflops", 0)) * 1e12
    for key, eff in (group.get("accurate_efficient_factor") or {}).items():
        f = parse_key(key)
        ng, big_m, big_n, big_k = (int(f[c]) for c in ("ng", "M", "N", "K"))
        m, k, n = {
            "fwd": (big_m, big_k, big_n),
            "bwd_grad_act": (big_m, big_n, big_k),
            "bwd_grad_w": (big_n, big_m, big_k),
        }[f["stage"]]
        time_us = 2.0 * ng * big_m * big_n * big_k / (float(eff) * peak) * 1e6
        yield ng, m, k, n, time_us, f["stage"], float(eff), key


def write_grouped(system: dict, out: str) -> None:
    """The grouped-GEMM CSV (module docstring)."""
    lines = [
        "experts,tokens_per_expert,k,n,dtype,loop_time_us,stage,simumax_efficiency,simumax_key"
    ]
    for ng, m, k, n, t, stage, eff, key in grouped_rows(system):
        lines.append(f'{ng},{m},{k},{n},bf16,{t:.6g},{stage},{eff:.10g},"{key}"')
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines) - 1} rows -> {out}")


def main(src: str, out: str, grouped_out: str | None = None) -> None:
    system = json.loads(Path(src).read_text(encoding="utf-8"))
    lines = ["m,n,k,dtype,time_us,layout,accumulate,out_dtype,simumax_efficiency,simumax_key"]
    for m, n, k, t, layout, acc, out_dtype, eff, key in rows(system):
        lines.append(f'{m},{n},{k},bf16,{t:.6g},{layout},{acc},{out_dtype},{eff:.10g},"{key}"')
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines) - 1} rows -> {out}")
    if grouped_out:
        write_grouped(system, grouped_out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
