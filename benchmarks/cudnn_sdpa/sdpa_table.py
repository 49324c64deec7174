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
K/V heads are kept as kv_heads), causal = 1 for top_left (cost.kernel_tables.CAUSAL_WORDS), time_us =
time_ms x 1000, and source_row = the source file and its line. The benchmark's own tflops column is kept: its FLOP count is the table's
(forward 4·b·h·s²·d × causal half, backward 2.5× forward; tests/unit/test_cudnn_sdpa_tables.py checks it).

Windowed rows (results/gpt_oss/<gpu>/*.csv, last changed by the same commit: GPT-OSS attention, 128 query and
128 K/V heads, head dim 64, causal top_left with sliding_window_size 128, batch 2, sequence 2k-32k) are kept
the same way with window = sliding_window_size (empty for rows without one): the benchmark counts their FLOPs
as 4·b·h·d·(w·s − w(w−1)/2) forward, the scores a causal window of w keys keeps (graph.mla.window_fraction).

The shipped tables are llama3.1, gpt_oss, qwen35, wan22 and ltx2 of one GPU, in that order (dsv3 and kimiK26
are MLA, head_dim_qk != head_dim_vo, which the filter leaves out); h200-sxm-cudnn-sdpa is
results/h200_919_only_cudnn llama3.1 and gpt_oss (commit df73764, cuDNN 9.19.1), whose rows time both passes in
one record (profile_pass both), each written as a fwd and a bwd row.

    python benchmarks/cudnn_sdpa/sdpa_table.py SOURCE.csv [SOURCE.csv ...] OUT.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from paraplan.cost.kernel_tables import CAUSAL_WORDS  # top_left, bottom_right: causal; no_mask

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
    """The kept rows of one benchmark CSV in the table's columns (module docstring); a row timing both passes
    (profile_pass both: fwd_time_ms / bwd_time_ms, fwd_tflops / bwd_tflops) is written as two rows. source_row
    is the record's physical line (the reader's line_num: failed rows carry multi-line error messages)."""
    out = []
    with source.open(encoding="utf-8") as f:
        reader = csv.DictReader(f)
        for row in reader:
            keep = (
                row["data_type"] == "bfloat16"
                and row["deterministic_bwd"] == "False"
                and row["q_seqlen"] == row["kv_seqlen"]
                and row["head_dim_qk"] == row["head_dim_vo"]
                and row["success"] == "True"
            )
            if not keep:
                continue
            passes = ("fwd", "bwd") if row["profile_pass"] == "both" else (row["profile_pass"],)
            for way in passes:
                both = row["profile_pass"] == "both"
                ms = float(row[f"{way}_time_ms"] if both else row["time_ms"])
                out.append(
                    {
                        "batch": row["batch_size"],
                        "heads": row["num_q_heads"],
                        "seq_len": row["q_seqlen"],
                        "head_dim": row["head_dim_qk"],
                        "causal": "1" if CAUSAL_WORDS[row["attn_mask"]] else "0",
                        "direction": way,
                        "dtype": "bf16",
                        "time_us": f"{ms * 1000:.0f}",
                        "kv_heads": row["num_kv_heads"],
                        "tflops": row[f"{way}_tflops"] if both else row["tflops"],
                        "source_row": f"{name}:{reader.line_num}",
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
