"""Write a cuDNN fused-attention kernel table (catalog/kernels/<name>/attention_cudnn.csv) from cuDNN's
published SDPA training benchmark.

Source: github.com/NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/llama3.1/<gpu>/*.csv,
last changed by commit fb682ce761a2705e40f9b5d528737a3e0eb33cec (2026-04-29; read at 3929da2ef4c1, 2026-05-08).
Each row is one pass timed by benchmark_single_sdpa.py (cudnn-frontend 1.21.1, cuDNN backend 9.22.0):
columns data_type, attn_mask (top_left: causal; no_mask), batch_size, q_seqlen, kv_seqlen, num_q_heads,
num_kv_heads, head_dim_qk, head_dim_vo, profile_pass (fwd / bwd), deterministic_bwd, time_ms, tflops.
Kept: bf16 rows (the table's dtype; fp8 / mxfp8 attention is not priced from tables, cost.kernel_tables),
non-deterministic backward (what Megatron-Core / Transformer Engine run unless deterministic mode is set),
q_seqlen = kv_seqlen. A row is written with heads = num_q_heads (the FLOPs count query heads; GQA's shared
K/V heads are kept as kv_heads), causal = 1 for top_left, time_us = time_ms x 1000, and source_row = the
source file and its line. The benchmark's own tflops column is kept: its FLOP count is the table's
(forward 4·b·h·s²·d × causal half, backward 2.5× forward; tests/unit/test_cudnn_sdpa_tables.py checks it).

Windowed rows (results/gpt_oss/<gpu>/*.csv, last changed by the same commit: GPT-OSS attention, 128 query and
128 K/V heads, head dim 64, causal top_left with sliding_window_size 128, batch 2, sequence 2k-32k) are kept
the same way with window = sliding_window_size (empty for rows without one): the benchmark counts their FLOPs
as 4·b·h·d·(w·s − w(w−1)/2) forward, the scores a causal window of w keys keeps (graph.mla.window_fraction).

The shipped tables are llama3.1, gpt_oss, qwen35, wan22 and ltx2 of one GPU, in that order (dsv3 and kimiK26
are MLA, head_dim_qk != head_dim_vo, which the filter leaves out).

    python benchmarks/cudnn_sdpa/sdpa_table.py SOURCE.csv [SOURCE.csv ...] OUT.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

COLUMNS = [
    "batch",
    "heads",
    "seq_len",
    "head_dim",
    "causal",
    "direction",
    "dtype",
    "time_us",
    "kv_heads",
    "tflops",
    "source_row",
    "window",
]


def table_rows(source: Path, name: str) -> list[dict[str, str]]:
    """The kept rows of one benchmark CSV in the table's columns (module docstring)."""
    out = []
    with source.open(encoding="utf-8") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            keep = (
                row["data_type"] == "bfloat16"
                and row["deterministic_bwd"] == "False"
                and row["q_seqlen"] == row["kv_seqlen"]
                and row["head_dim_qk"] == row["head_dim_vo"]
                and row["success"] == "True"
            )
            if not keep:
                continue
            out.append(
                {
                    "batch": row["batch_size"],
                    "heads": row["num_q_heads"],
                    "seq_len": row["q_seqlen"],
                    "head_dim": row["head_dim_qk"],
                    "causal": "1" if row["attn_mask"] == "top_left" else "0",
                    "direction": row["profile_pass"],
                    "dtype": "bf16",
                    "time_us": f"{float(row['time_ms']) * 1000:.0f}",
                    "kv_heads": row["num_kv_heads"],
                    "tflops": row["tflops"],
                    "source_row": f"{name}:{line}",
                    "window": row.get("sliding_window_size") or "",
                }
            )
    return out


def main(*args: str) -> None:
    *sources, out = args
    rows = []
    for source in sources:
        path = Path(source)
        rows += table_rows(path, "/".join(path.parts[-3:]))
    with open(out, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
