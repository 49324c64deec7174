"""Write the V100 GEMM kernel table (catalog/kernels/v100-sxm2-deepbench/gemm.csv) from DeepBench's results.

Source: github.com/baidu-research/DeepBench, results/train/DeepBench_NV_V100.xlsx at commit 30c5115
(2019-10-07, "update NVIDIA results"; sheet Specs: NVIDIA DGX-1, V100, CUDA 10.1.243, cuDNN 7.6.2, driver
418.67). Sheets "Results FP32" and "Results - FP16 ip, Mixed math" (fp16 inputs; gemm_bench.cu at 30c5115
asks cuBLAS for CUDA_R_16F compute), section "Dense Matrix Multiplication": columns M, N, K, A Transpose,
B Transpose, Time (msec). DeepBench's GEMM is C(M×N) = A(M×K)·B(K×N) with N the mini-batch (README "GEMM"); the table's m is the rows of activations
(tokens), so a row is written m = N, n = M, k = K, keeping DeepBench's M, N, K, the transposes and the sheet
row as provenance. An fp16 row's m, n, k are the problem the benchmark ran: gemm_bench.cu pads an fp16 GEMM off
cuBLAS's tensor-op grid to multiples of 8 before timing it (``padded``), so the row is that aligned kernel.

    python benchmarks/deepbench/v100_gemm_table.py DeepBench_NV_V100.xlsx src/paraplan/catalog/kernels/v100-sxm2-deepbench/gemm.csv

Reads the .xlsx with the standard library (zipfile + xml); rows whose M, N, K or time are not numbers
(section titles, blank rows) are skipped; the section ends at the "Convolution" title.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
SHEETS = {"Results FP32": "fp32", "Results - FP16 ip, Mixed math": "fp16"}
COLUMNS = {"C": "M", "D": "N", "E": "K", "F": "ta", "G": "tb", "I": "ms"}


def _shared_strings(z: zipfile.ZipFile) -> list[str]:
    if "xl/sharedStrings.xml" not in z.namelist():
        return []
    root = ET.fromstring(z.read("xl/sharedStrings.xml"))
    return ["".join(t.text or "" for t in si.iter(NS + "t")) for si in root.iter(NS + "si")]


def _cells(row, strings: list[str]) -> dict[str, str]:
    out = {}
    for c in row.iter(NS + "c"):
        v = c.find(NS + "v")
        text = "" if v is None or v.text is None else v.text
        if c.get("t") == "s" and text:
            text = strings[int(text)]
        out["".join(ch for ch in c.get("r") if ch.isalpha())] = text
    return out


def sheet_rows(path: Path):
    """(dtype, sheet row number, M, N, K, A transpose, B transpose, time ms) of each GEMM row."""
    z = zipfile.ZipFile(path)
    strings = _shared_strings(z)
    book = ET.fromstring(z.read("xl/workbook.xml"))
    rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
    targets = {r.get("Id"): r.get("Target") for r in rels}
    for sheet in book.iter(NS + "sheet"):
        dtype = SHEETS.get(sheet.get("name"))
        if dtype is None:
            continue
        root = ET.fromstring(z.read("xl/" + targets[sheet.get(REL)].removeprefix("/xl/")))
        for row in root.iter(NS + "row"):
            cells = _cells(row, strings)
            if cells.get("A", "").strip() == "Convolution":
                break
            try:
                m, n, k = (int(cells[c]) for c in "CDE")
                ms = float(cells["I"])
            except (KeyError, ValueError):
                continue
            yield dtype, int(row.get("r")), m, n, k, cells["F"], cells["G"], ms


def _up8(x: int) -> int:
    return -(-x // 8) * 8


def padded(m: int, n: int, k: int, ta: str, tb: str) -> tuple[int, int, int]:
    """The fp16 problem gemm_bench.cu ran for DeepBench's (M, N, K) (code/nvidia/gemm_bench.cu at 30c5115,
    PAD_KERNELS 1 with tensor cores): M and K padded to multiples of 8 for NN and TN, M and N for NT, all
    three for TT, where one of them is not a multiple of 8 (cuBLAS's tensor-op restrictions)."""
    if tb == "N":
        return (_up8(m), n, _up8(k)) if m % 8 or k % 8 else (m, n, k)
    if ta == "N":
        return (_up8(m), _up8(n), k) if m % 8 or n % 8 else (m, n, k)
    return (_up8(m), _up8(n), _up8(k)) if m % 8 or n % 8 or k % 8 else (m, n, k)


def main(xlsx: str, out: str) -> None:
    lines = [
        "m,n,k,dtype,time_us,deepbench_m,deepbench_n,deepbench_k,a_transpose,b_transpose,sheet_row"
    ]
    for dtype, r, m, n, k, ta, tb, ms in sheet_rows(Path(xlsx)):
        pm, pn, pk = padded(m, n, k, ta, tb) if dtype == "fp16" else (m, n, k)
        lines.append(f"{pn},{pm},{pk},{dtype},{ms * 1000:.6g},{m},{n},{k},{ta},{tb},{dtype}:{r}")
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines) - 1} rows -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
