"""Write the Azure AI-benchmarking-guide GEMM kernel tables (catalog/kernels/nd-*/gemm.csv) from its results files.

Source: github.com/egmsft/AI-benchmarking-guide (MIT, Microsoft; the fork the Azure results were published in:
github.com/Azure/AI-benchmarking-guide stops at 8fd0c6e, 2024-09-27, before the ND GB200 / GB300 / MI300X files),
Azure_Results/ND_<VM>_results.md at repository head 3371c0c (2025-12-03). Each file is saved beside this script
as sources/ND_<VM>_results-<commit>.md, <commit> the file's last change (identical at 3371c0c), with its tables and
headings at their line numbers and its prose left out (each blank line stands for one; the line that states a
GEMM section's precision is replaced by our note of the precision it names):

- ND GB300 v6 @ 18e80a2 (2025-11-11): GB300 288GB, CUDA 13.0, driver 580.82.07
- ND GB200 v6 @ 4c986ce (2025-11-11; GEMM rows last changed in 3862f8f, 2025-06-17): GB200 185GB, CUDA 12.8,
  driver 570.133.20
- ND H100 v5 @ b79e721 (2025-02-25): H100 80GB HBM3, CUDA 12.6, driver 560.35.03
- ND H200 v5 @ ae775aa (2025-11-11; GEMM rows last changed in b408bf8, 2025-07-07): H200 141GB, CUDA 12.8,
  driver 570.133.20
- ND MI300X v5 @ bf209ab (2025-03-27): MI300X, ROCm 6.8.5 (as the file states), hipBLASLt a11ccf6
- ND A100 v4 @ b79e721 (2025-02-25): A100-SXM4-80GB, CUDA 12.5, driver 550.90.07 (fp16: no fp8 on Ampere)

Section "GEMM CuBLASLt" (NVIDIA: Benchmarks/NVIDIA/GEMMCublasLt.py, superbench's ``cublaslt_gemm`` from
github.com/gitaumark/superbenchmark, ``-b 1 -i 1000 -w 10000 -t fp8e4m3`` (fp16 on the A100), random
inputs) or "GEMM HipBLASLt" (AMD: Benchmarks/AMD/hipBLAS_runner.sh, ``hipblaslt-bench --flush``, TN, f8 inputs,
f16 output, f32 compute, 2,000 timed after 100 cold iterations, 512 MB rotating buffers): m, n, k and the rate
in TFLOPS. The harness prints TFLOPS = 2·m·n·k / time; this script inverts it:
time_us = 2·m·n·k / (TFLOPS·1e12) · 1e6. The FP4 sections (GB200 / GB300) are not written: the file does not
say which fp4 format (NVFP4 or MXFP4 scaling) the superbench fork's fp4 branch runs. Each row keeps the
published rate (``tflops``) and its source (``source``: file@commit:line).

    python benchmarks/azure/gemm_tables.py benchmarks/azure/sources src/paraplan/catalog/kernels
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# results file (in sources/) -> the table folder it is written to
TABLES = {
    "ND_GB300_v6_results-18e80a2.md": "nd-gb300-v6-cublaslt",
    "ND_GB200_v6_results-4c986ce.md": "nd-gb200-v6-cublaslt",
    "ND_H100_v5_results-b79e721.md": "nd-h100-v5-cublaslt",
    "ND_H200_v5_results-ae775aa.md": "nd-h200-v5-cublaslt",
    "ND_MI300X_v5_results-bf209ab.md": "nd-mi300x-v5-hipblaslt",
    "ND_A100_v4_results-b79e721.md": "nd-a100-v4-cublaslt",
}
# the precision a section's sentence states -> the table's dtype (fp16 is read as bf16 by the tables)
DTYPES = {"FP8": "fp8", "FP16": "fp16"}
HEADER = "m,n,k,dtype,time_us,tflops,source"


def time_us(m: int, n: int, k: int, tflops: float) -> float:
    """The kernel time the published rate implies: 2·m·n·k / (TFLOPS·1e12), in microseconds."""
    return 2.0 * m * n * k / (tflops * 1e12) * 1e6


def gemm_rows(text: str, file: str) -> list[tuple[int, int, int, str, float, int]]:
    """(m, n, k, dtype, TFLOPS, line number) of each GEMM row of a results file, in file order: rows of a
    '### GEMM' section whose sentence names FP8 or FP16 (other precisions, FP4, are skipped)."""
    out, dtype = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            dtype = "?" if line.startswith("### GEMM") else None
        elif dtype == "?" and "random initialization" in line:
            named = [DTYPES[w] for w in re.findall(r"\bFP\d+\b", line) if w in DTYPES]
            dtype = named[0] if named else None
        elif dtype and dtype != "?" and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and all(re.fullmatch(r"[0-9]+(\.[0-9]+)?", c) for c in cells):
                m, n, k = (int(c) for c in cells[:3])
                out.append((m, n, k, dtype, float(cells[3]), number))
    if not out:
        raise ValueError(f"{file}: no FP8 / FP16 GEMM rows found")
    return out


def table_lines(text: str, file: str) -> list[str]:
    """gemm.csv's lines for one results file."""
    source = file.removesuffix(".md").replace("_results-", "_results.md@")
    lines = [HEADER]
    for m, n, k, dtype, tflops, number in gemm_rows(text, file):
        t = time_us(m, n, k, tflops)
        lines.append(f"{m},{n},{k},{dtype},{t:.6g},{tflops:g},{source}:L{number}")
    return lines


def main(sources: str, out: str) -> None:
    for file, table in TABLES.items():
        lines = table_lines((Path(sources) / file).read_text(encoding="utf-8"), file)
        path = Path(out) / table / "gemm.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{len(lines) - 1} rows -> {path}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
