"""Plan-search speed: issue 31's targets, and the in-process table of earlier sessions.

Run: python benchmarks/search_speed.py [--runs N] [--markdown] [--bytecode] [--against CHECKOUT]
Prints, per problem of issue 31, the process CPU seconds of ``paraplan search ... --top 5`` in fresh processes (the
least of N runs: imports, catalog, search, report; user + system of the process, and of the worker processes a split
block search starts) and the least wall seconds, cold (no bytecode cache: the package's sources compiled, the first
run after an install) and warm (with one: every later run; ``--bytecode``: warm only), and whether process + workers
stay within TARGET_S warm; with ``--against``, the same for another checkout (e.g. ``git archive HEAD~3`` unpacked),
its runs interleaved with this tree's.
Run: python benchmarks/search_speed.py --in-process [--markdown] [--repeat N] [--unrestricted] [--workers N]
Prints the earlier table: problem, candidates in the space, evaluated, feasible among evaluated, seconds of one cold
``search()`` (caches cleared), candidates per second and the best plan. The restricted DeepSeek-V3 problem runs
twice, the second time with every layer split (``--vary-split``); ``--unrestricted`` adds DeepSeek-V3 on 2,048 H800s
over every axis (22 M rows, searched block by block: search.blocks).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _cold import cold_search
from _process_cpu import no_bytecode, process_cpu, residuals_current, use_bytecode
from _table import print_table

from paraplan.catalog import load_model, load_system
from paraplan.specs.plan_label import plan_label
from paraplan.search.space import SearchProblem

PROBLEMS = [
    (
        "gpt3-175b, 1,024 x dgx-a100-80gb, max gbs 1,024",
        "gpt3-175b",
        "dgx-a100-80gb",
        1024,
        2048,
        None,
        1024,
    ),
    (
        "mt-nlg-530b, 5,128 x dgx-a100-80gb, max gbs 2,520",
        "mt-nlg-530b",
        "dgx-a100-80gb",
        5128,
        2048,
        None,
        2520,
    ),
    (
        "llama3-405b, 16,384 x dgx-h100-80gb, seq 8,192, gbs 2,048",
        "llama3-405b",
        "dgx-h100-80gb",
        16384,
        8192,
        2048,
        None,
    ),
    # MoE (issue 9): DeepSeek-V3 with the axes its report's layout spans (tp <= 8, pp 8/16, no CP, ep 8-64,
    # micro-batch 1-2, no offload, default placement); the unrestricted space has ~22 M rows (docs/model.md §8)
    (
        "deepseek-v3, 2,048 x dgx-h800, seq 4,096, gbs 15,360, bf16 (restricted)",
        "deepseek-v3",
        "dgx-h800",
        2048,
        4096,
        15360,
        None,
    ),
    # the same with every layer split of the accounting switches (--vary-split, SearchProblem.split_options)
    (
        "deepseek-v3, the same, --vary-split",
        "deepseek-v3",
        "dgx-h800",
        2048,
        4096,
        15360,
        None,
        dict(vary_split=True),
    ),
]
# the same DeepSeek-V3 problem over every axis (issue 9's acceptance problem); with --unrestricted
UNRESTRICTED = (
    "deepseek-v3, 2,048 x dgx-h800, seq 4,096, gbs 15,360, bf16 (unrestricted)",
    "deepseek-v3",
    "dgx-h800",
    2048,
    4096,
    15360,
    None,
)
# axis restrictions per problem (SearchProblem fields), by model
RESTRICTIONS = {
    "deepseek-v3": dict(
        tp=(1, 2, 4, 8),
        pp=(8, 16),
        cp=(1,),
        ep=(8, 16, 32, 64),
        micro_batch=(1, 2),
        vary_offload=False,
        vary_placement=False,
    ),
}


TARGET_S = 1.0
# issue 31's problems: the README's GPT-3 175B search, Llama 3.1 405B, MT-NLG 530B, the README's DeepSeek-V3 search
# (the axes its report's layout spans) and DeepSeek-V3 over every axis
ISSUE_PROBLEMS = [
    (
        "gpt3-175b, 1,024 x dgx-a100-80gb, max gbs 1,024 (README)",
        "--model gpt3-175b --system dgx-a100-80gb --gpus 1024 --max-global-batch 1024 --seq-length 2048",
    ),
    (
        "llama3-405b, 16,384 x dgx-h100-80gb, seq 8,192, gbs 2,048",
        "-m llama3-405b -s dgx-h100-80gb --gpus 16384 --seq-length 8192 --global-batch 2048",
    ),
    (
        "mt-nlg-530b, 5,128 x dgx-a100-80gb, max gbs 2,520",
        "-m mt-nlg-530b -s dgx-a100-80gb --gpus 5128 --seq-length 2048 --max-global-batch 2520",
    ),
    (
        "deepseek-v3, 2,048 x dgx-h800, fp8, the report's axes (README)",
        "-m deepseek-v3 -s dgx-h800 --gpus 2048 --seq-length 4096 --global-batch 15360 --dtype fp8 --tp 1,2,4,8 "
        "--pp 8,16 --cp 1 --ep 8,16,32,64 --micro-batch 1,2 --no-offload --default-placement",
    ),
    (
        "deepseek-v3, 2,048 x dgx-h800, seq 4,096, gbs 15,360, every axis",
        "-m deepseek-v3 -s dgx-h800 --gpus 2048 --seq-length 4096 --global-batch 15360",
    ),
]
MODES = {"cold": no_bytecode, "warm": use_bytecode}  # first run after an install / every later run


def process_table(
    runs: int, markdown: bool, against: str | None = None, modes=("cold", "warm")
) -> None:
    """Issue 31's table: process CPU seconds of each search command (module doc), per mode (cold: no bytecode cache,
    warm: with one; the target is the warm figure, what a user sees from the second run on); with ``against``, a
    source tree (its ``src``) measured in the same minutes, its runs interleaved with this tree's."""
    trees = [None] if against is None else [str(Path(against) / "src"), None]
    for src in trees:
        if not residuals_current(src):
            print(
                f"note: validate/residuals.json of {src or 'this tree'} is stale: every process recomputes it"
            )
            print(
                "      (~1 s); run python -m paraplan.validate.residuals first (and do not commit it)"
            )
    rows = []
    for label, flags in ISSUE_PROBLEMS:
        args = ["search", *flags.split(), "--top", "5"]
        best = {(m, src): (float("inf"),) * 3 for m in modes for src in trees}
        for _ in range(runs):
            for m in modes:
                MODES[m]()
                for src in trees:
                    best[m, src] = tuple(map(min, best[m, src], process_cpu(args, 1, src)))
        for src in trees:
            figures = []
            for m in modes:
                own, children, wall = best[m, src]
                figures += [f"{own:.2f} + {children:.2f}", f"{wall:.2f}"]
            own, children, _ = best[modes[-1], src]
            ok = "yes" if own + children <= TARGET_S else "no"
            rows.append((label if src is None else f"{label} [{against}]", *figures, ok))
    header = ("problem",)
    for m in modes:
        header += (f"{m}: CPU s, process + workers", f"{m}: wall s")
    header += (f"{modes[-1]} <= {TARGET_S:g} s",)
    print(f"least of {runs} fresh processes each; cold: no bytecode cache, warm: with one")
    print_table(header, rows, markdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per problem")
    parser.add_argument(
        "--in-process", action="store_true", help="the in-process table of cold search() calls"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per problem; the best is reported"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="search(workers=...): processes for a large block-by-block search (default: auto_workers)",
    )
    parser.add_argument(
        "--unrestricted",
        action="store_true",
        help="add DeepSeek-V3 over every axis (~5 s; run once whatever --repeat says)",
    )
    parser.add_argument(
        "--against",
        default=None,
        help="also measure the checkout at this path (e.g. a `git worktree` of the previous commit), "
        "its runs interleaved with this tree's",
    )
    parser.add_argument(
        "--bytecode",
        action="store_true",
        help="warm only: with a bytecode cache (_process_cpu.use_bytecode); default: cold and warm",
    )
    args = parser.parse_args()
    if not args.in_process:
        modes = ("warm",) if args.bytecode else ("cold", "warm")
        process_table(args.runs, args.markdown, args.against, modes)
        return
    rows = []
    for label, model, system, gpus, seq, gbs, max_gbs, *extra in PROBLEMS + (
        [UNRESTRICTED] if args.unrestricted else []
    ):
        restricted = "(unrestricted)" not in label
        problem = SearchProblem(
            model=load_model(model),
            system=load_system(system),
            gpus=gpus,
            seq_length=seq,
            global_batch=gbs,
            max_global_batch=max_gbs,
            **(RESTRICTIONS.get(model, {}) if restricted else {}),
            **(extra[0] if extra else {}),
        )
        best_seconds, result = float("inf"), None
        for _ in range(args.repeat if restricted else 1):
            seconds, result = cold_search(
                problem, top_k=10, workers=args.workers
            )  # every run starts cold
            best_seconds = min(best_seconds, seconds)
        best = result.plans[0] if result.plans else None
        rows.append(
            (
                label,
                f"{result.candidates:,}",
                f"{result.evaluated:,}",
                f"{result.feasible:,}",
                f"{best_seconds:.2f}",
                f"{result.candidates / best_seconds:,.0f}",
                f"{plan_label(best.plan)}: {best.estimate.step_time_s:.2f} s/step, MFU {best.estimate.mfu:.1%}"
                if best
                else "none fits",
            )
        )
    header = (
        "problem",
        "candidates",
        "evaluated",
        "feasible (of evaluated)",
        "seconds",
        "candidates/s",
        "best plan",
    )
    print_table(header, rows, args.markdown)


if __name__ == "__main__":
    main()
