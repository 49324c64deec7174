"""Wall-clock seconds of whole CLI commands, start to exit, as a user sees them (imports, catalog, the work, the
report with its error bands, and the process exit).

Run: python benchmarks/cli_wall.py [--runs N] [--markdown]
Prints per command the median and best of N runs of ``python -m paraplan ...`` in fresh processes, and the
"search seconds" the search itself reports (its summary line) for the searches.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from _table import print_table

COMMANDS = [
    (
        "estimate llama3-70b, 64 H100",
        [
            "estimate",
            "-m",
            "llama3-70b",
            "-s",
            "dgx-h100-80gb",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--pp",
            "2",
            "--global-batch",
            "128",
            "--seq-length",
            "8192",
            "--sequence-parallel",
        ],
    ),
    (
        "search gpt3-175b, 1,024 A100 (README quick start)",
        [
            "search",
            "--model",
            "gpt3-175b",
            "--system",
            "dgx-a100-80gb",
            "--gpus",
            "1024",
            "--max-global-batch",
            "1024",
            "--seq-length",
            "2048",
            "--top",
            "5",
        ],
    ),
    (
        "search deepseek-v3, 2,048 H800, every axis",
        [
            "search",
            "-m",
            "deepseek-v3",
            "-s",
            "dgx-h800",
            "--gpus",
            "2048",
            "--seq-length",
            "4096",
            "--global-batch",
            "15360",
            "--top",
            "3",
        ],
    ),
]
SEARCH_SECONDS = re.compile(r"; ([0-9.]+) s\s*$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = []
    for label, argv in COMMANDS:
        walls, searched = [], []
        for _ in range(args.runs):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "paraplan", *argv],
                capture_output=True,
                text=True,
                env={**os.environ, "COLUMNS": "200"},
            )
            walls.append(time.perf_counter() - start)
            found = SEARCH_SECONDS.search(done.stdout.strip())
            if found:
                searched.append(float(found.group(1)))
        rows.append(
            (
                label,
                f"{statistics.median(walls):.2f}",
                f"{min(walls):.2f}",
                f"{statistics.median(searched):.2f}" if searched else "-",
            )
        )
    print_table(
        ("command", "wall s (median)", "wall s (best)", "search s (median)"), rows, args.markdown
    )


if __name__ == "__main__":
    main()
