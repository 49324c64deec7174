"""Render a validation report (``paraplan.validate.run.run_cases``) as Markdown for docs/validation.md."""

from __future__ import annotations

from typing import Any

from paraplan.validate.case_files import MEMORY_SCOPE_RULE, METRICS, SCOPE_TRANSFORMER
from paraplan.validate.tables import attached_markdown, tables_markdown

REGENERATE_COMMAND = "paraplan validate --cv --markdown docs/validation.md"

METRIC_LABELS = {
    "step_time_s": "step time (s)",
    "weights_and_optimizer_gib": "weights + grads + optimizer (GiB)",
    "activations_gib": "activations (GiB)",
    "peak_memory_gib": "peak memory (GiB)",
    "peak_allocated_gib": "allocator peak (GiB)",
    "peak_reserved_gib": "allocator reserved peak (GiB)",
}
# whole-stage values shown (not compared) for transformer-layer-scope cases
STAGE_ONLY_LABELS = {
    "stage_weights_and_optimizer_gib": "whole stage: weights + grads + optimizer (GiB), not compared",
    "stage_activations_gib": "whole stage: activations (GiB), not compared",
}


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}"


def _summary_table(summary: dict) -> list[str]:
    lines = ["| metric | cases | MAPE % |", "|---|---:|---:|"]
    for metric in METRICS:
        n = summary.get(f"{metric}_cases", 0)
        if n:
            lines.append(
                f"| {METRIC_LABELS[metric]} | {n} | {_num(summary[f'{metric}_mape_pct'], 2)} |"
            )
    worst = summary.get("max_abs_error_pct")
    lines.append("")
    if worst is not None:
        lines.append(
            f"Largest absolute error: {worst:.2f}% ({summary['max_abs_error_case']}, "
            f"{METRIC_LABELS.get(summary['max_abs_error_metric'], summary['max_abs_error_metric'])})."
        )
    lines += [
        "",
        "| case file | cases | step-time cases | step-time MAPE % | allocator-peak cases | allocator-peak MAPE % "
        "| reserved-peak cases | reserved-peak MAPE % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for file, group in summary.get("by_source", {}).items():
        lines.append(
            f"| {file} | {group['cases']} | {group['step_time_cases']} | {_num(group.get('step_time_s_mape_pct'), 2)} "
            f"| {group.get('peak_allocated_gib_cases', 0)} | {_num(group.get('peak_allocated_gib_mape_pct'), 2)} "
            f"| {group.get('peak_reserved_gib_cases', 0)} | {_num(group.get('peak_reserved_gib_mape_pct'), 2)} |"
        )
    lines += [
        "",
        "The allocator peak is the measured torch.cuda.max_memory_allocated of a single-GPU step against the "
        "predicted peak less the stage's reserve (CUDA context, communication buffers, fragmentation), which "
        "that counter does not see (validate.run.predicted_metrics); the reserved peak is a published "
        "torch.cuda.max_memory_reserved (torchtitan's logged memory) against the predicted peak less the CUDA "
        "context and communication buffers, which the caching allocator never holds "
        "(validate.run.predicted_metrics); fitted on by nothing.",
        "",
        "Calibration cases are those of a set some constant was fitted on (paraplan.validate.fitted); "
        "all others are held out.",
        "",
        "| cases | step-time cases | step-time MAPE % | max abs step-time error % |",
        "|---|---:|---:|---:|",
    ]
    for role in ("calibration", "held_out"):
        part = summary.get(role)
        if part:
            lines.append(
                f"| {role.replace('_', ' ')} | {part['step_time_cases']} | {_num(part.get('step_time_s_mape_pct'), 2)} | "
                f"{_num(part.get('step_time_max_abs_error_pct'), 2)} |"
            )
    lines += ["", "| group | cases | step-time cases | step-time MAPE % |", "|---|---:|---:|---:|"]
    for name, part in summary.get("by_group", {}).items():
        lines.append(
            f"| {name} | {part['cases']} | {part['step_time_cases']} | {_num(part.get('step_time_s_mape_pct'), 2)} |"
        )
    if summary.get("unsupported"):
        lines += ["", f"Unsupported cases (not scored): {summary['unsupported']}.", ""]
        lines += [f"- {u['name']}: {u['reason']}" for u in summary["unsupported_cases"]]
    return lines


def _cv_lines(cv: dict[str, Any]) -> list[str]:
    lines = [
        "## Leave-one-group-out cross-validation",
        "",
        "For each group: the fitted constants that apply to its systems (and to a per-stage case's pipeline "
        "runtime) are refitted on every other group's "
        "step times (paraplan.validate.cv), then the group is predicted. In-sample is the error with the "
        "shipped constants.",
        "",
        "| held-out group | cases | in-sample MAPE % | CV MAPE % | refitted constants |",
        "|---|---:|---:|---:|---|",
    ]
    for group, row in cv["groups"].items():
        refit = ", ".join(f"{k} = {v:.4g}" for k, v in row["refitted"].items())
        if row["prior_only"]:
            refit += f" (prior only: {', '.join(row['prior_only'])})"
        lines.append(
            f"| {group} | {row['cases']} | {row['in_sample_step_time_mape_pct']:.2f} | "
            f"{row['cv_step_time_mape_pct']:.2f} | {refit} |"
        )
    if cv.get("cv_step_time_mape_pct") is not None:
        lines += [
            "",
            f"All groups: cross-validated step-time MAPE {cv['cv_step_time_mape_pct']:.2f} %, "
            f"largest absolute error {cv['cv_step_time_max_abs_error_pct']:.2f} %.",
        ]
    return lines + [""]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def band_coverage_lines(report: dict[str, Any]) -> list[str]:
    """The section on the error bands: the claimed coverage, the coverage reached on held-out groups
    (per stack, per group) and the cases outside their band (validate.coverage)."""
    cov = report["summary"].get("band_coverage")
    if not cov:
        return []
    basis = (
        "this run's leave-one-group-out cross-validation"
        if "cross_validation" in report
        else "the package's cross-validated residuals (validate.residuals)"
    )
    lines = [
        "## Error bands on held-out groups",
        "",
        f"Each case's error band (`error_band` in `paraplan validate --json`, as `estimate --json` gives it) "
        f"is built by validate.band with the case's own group left out, from the cross-validated residuals "
        f"of {basis}; the case is covered when its cross-validated error lies inside. The band claims "
        f"{cov['claimed_pct']} % coverage: {cov['covered']} of {cov['cases']} cases are covered "
        f"({_pct(cov['coverage_pct'])} %; mean over groups {_pct(cov['mean_over_groups_pct'])} %). "
        "How the band is built: the section above.",
        "",
        "| stack | cases | covered | coverage % |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {r['cases']} | {r['covered']} | {_pct(r['coverage_pct'])} |"
        for name, r in cov["by_stack"].items()
    ]
    lines += ["", "| held-out group | cases | covered | coverage % |", "|---|---:|---:|---:|"]
    lines += [
        f"| {name} | {r['cases']} | {r['covered']} | {_pct(r['coverage_pct'])} |"
        for name, r in cov["by_group"].items()
    ]
    misses = [e for e in report["cases"] if e.get("band_check", {}).get("in_band") is False]
    if misses:
        lines += [
            "",
            "Cases outside their held-out band:",
            "",
            "| case | held-out error % | measured vs held-out prediction % | band % | band built from |",
            "|---|---:|---:|---|---|",
        ]
        for e in misses:
            band, check = e["error_band"], e["band_check"]
            lines.append(
                f"| {e['name']} | {check['held_out_error_pct']:+.2f} | "
                f"{check['measured_vs_held_out_pct']:+.2f} | "
                f"{band['low_pct']:+.1f} / {band['high_pct']:+.1f} | {band['basis']} |"
            )
    return lines + [""]


def band_method_lines() -> list[str]:
    """How the error bands are built (validate.band), with the constants the code uses."""
    from paraplan.validate.band import (
        CLAIMED_COVERAGE_PCT,
        PRIOR_ERROR_PCT,
        RUN_TO_RUN_PCT,
        min_groups,
    )

    lo, hi = PRIOR_ERROR_PCT
    return [
        "## How the error bands are built",
        "",
        f"Every band (estimate, search rows, the Python API, and above) claims {CLAIMED_COVERAGE_PCT} % "
        "coverage of the true step time and is built by one function, validate.band.error_band, from the "
        "cross-validated step-time errors of the cases above (each predicted with the fitted constants refitted "
        "without its group), never the in-sample ones.",
        "",
        "- Conditioning: the cases of the plan's software stack (framework profile; the Megatron-LM family and "
        "no profile are one stack) and model kind, never dropped: a dense plan's band from dense cases, a "
        "mixture-of-experts plan's from MoE cases (an MoE step carries error sources a dense one has none of: "
        "token dispatch, routing imbalance, grouped expert GEMMs, host syncs); and, while at least "
        f"{min_groups()} groups share them, its hardware generation and traits (fp8, pipeline, small model, "
        "single GPU), dropped least telling first, then the generation.",
        "- Nearest cases: when the pool had to drop a trait of the plan (too few groups share it), the band is "
        "hulled with the errors of the stack's cases nearest the plan (every trait matched on any generation, the "
        "least telling dropped until one group is left, never the model kind; validate.band.nearest_pool): never "
        "narrower than the runs most like the plan (a dense 2.7B pipeline plan on Hopper: its pool is the dense "
        "bf16 Megatron groups of every generation, its nearest cases the dense bf16 pipeline runs).",
        f"- Quantiles: groups are the exchangeable units (a group's cases share most of their error); each tail "
        f"is cut at {(100 - CLAIMED_COVERAGE_PCT) / 2:g} % of the group-weighted residuals with the "
        "split-conformal finite-sample correction, so the band is asymmetric where the residuals are; at least "
        f"±{RUN_TO_RUN_PCT:g} % (run-to-run spread).",
        "- Wide prior: a stack or generation no case ran, a trait no case of the stack has (a single GPU, say), "
        f"or a stack with fewer than {min_groups()} groups of the plan's model kind, gets "
        f"errors from {lo:+g} % to {hi:+g} % (the true time {1 / (1 + hi / 100):.2f}× to "
        f"{1 / (1 + lo / 100):.2f}× the estimate), not the Megatron envelope: the errors issue 33 measured on "
        "published runs of stacks these cases do not cover (FSDP stacks ~18 % and DeepSpeed's pipeline engine "
        "~25 % too fast, Megatron-Bridge MoE runs on Blackwell 20–55 % too slow), with a margin.",
        "- Unvalidated knobs (features of the plan no case has) are listed as extrapolated and widen the band "
        "to every residual of its stack and model kind on that generation.",
        "",
    ]


def _case_rows(entry: dict) -> list[str]:
    rows = []
    name = entry["name"]
    if entry.get("status", "ok") != "ok":
        return [f"| {name} | unsupported: {entry['reason']} | — | — | — |"]
    for metric in METRICS:
        if metric in entry["measured"]:
            label = METRIC_LABELS[metric]
            if entry["scope"] == SCOPE_TRANSFORMER and metric in (
                "weights_and_optimizer_gib",
                "activations_gib",
            ):
                label += ", transformer layers"
            rows.append(
                f"| {name} | {label} | {_num(entry['predicted'][metric])} | "
                f"{_num(entry['measured'][metric])} | {_signed(entry['error_pct'][metric])} |"
            )
    if entry["scope"] == SCOPE_TRANSFORMER:
        for key, label in STAGE_ONLY_LABELS.items():
            rows.append(f"| {name} | {label} | {_num(entry['predicted'][key])} | — | — |")
    if "peak_memory_gib" not in entry["measured"]:
        fits = "plan fits" if entry["predicted"]["fits"] else "plan **does not fit**"
        rows.append(
            f"| {name} | peak memory (GiB), not measured; {fits} | {_num(entry['predicted']['peak_memory_gib'])} | — | — |"
        )
    return rows


# Issue 8's mechanisms: where each is modelled, the component data it rests on, and what (if anything) is fitted
# to step times (validate/fitted.py); docs/model.md has the formulas
MECHANISMS: tuple[tuple[str, str, str, str], ...] = (
    (
        "shared links",
        "cost/overlap.py (fair sharing of one link tier by concurrent collectives), cost/comm.py group spans",
        "catalog link bandwidths and latencies (datasheets); NCCL's algorithm choice",
        "nothing",
    ),
    (
        "partial overlap",
        "cost/overlap.py: chunked TP comm-GEMM overlap, last DP bucket exposed, ZeRO-3/FSDP prefetch depth",
        "Wang et al. ASPLOS '23 (chunking), Li et al. VLDB 2020 (buckets); SM share of NCCL kernels (catalog overlap costs)",
        "moe.a2a_overlap_cost (moe-visible)",
    ),
    (
        "attention and context parallelism",
        "cost/attention.py kernel curves; ring / all-to-all (Ulysses) CP exposure",
        "FlashAttention-3 paper (arXiv:2407.08608) Fig. 5: FA2, cuDNN, FA3 forward TFLOP/s by length and head dim",
        "h100.attention (nemo-llama31-h100)",
    ),
    (
        "GEMM efficiency",
        "cost/compute.py gemm_time_s, grouped_gemm_time_s, grouped_gemm_share",
        "MAMF GEMM benchmark table (S. Bekman, ml-engineering @744d01e: A100, H100, B200, GB200, B300, MI300X); "
        "torch.mm rate of the RTX 4090 (torch-performance-test-data); "
        "V100: Baidu DeepBench @30c5115 fp16 / fp32 cuBLAS GEMMs (kernel table v100-sxm2-deepbench)",
        "gemm.bf16 in-step share, a100.gemm_ramp_s, h100.gemm_fp8 (nemo-llama31-h100), b200.gemm_fp8 (mbridge-dense), "
        "moe.grouped_gemm_fp8 (moe-visible)",
    ),
    (
        "DP / FSDP / ZeRO-3 at scale",
        "cost/comm.py collective_latency_hops; schedule/zero3_legacy.py (DeepSpeed 2021)",
        "NVIDIA/nccl src/graph/tuning.cc (ring / tree hop counts); DeepSpeed v0.3.14 source; per-call host times measured "
        "in microsoft/DeepSpeed#1069 and pytorch/pytorch#30831",
        "nothing",
    ),
    (
        "memory realism",
        "cost/memory.py; step/compose.py stage_memory_terms; specs/framework.py reserves",
        "Korthikanti et al. 2022 §4 (activations); Transformer Engine docs (fp8 weight and GEMM-input copies); Megatron-LM "
        "--cpu-offloading-num-layers; profile reserves (CUDA context, NCCL buffers)",
        "nothing (memory MAPE above)",
    ),
    (
        "framework profiles",
        "catalog/frameworks/*.yaml, frameworks.py",
        "each profile field cites its framework's source or documentation",
        "nothing",
    ),
    (
        "hardware variants",
        "catalog/systems/*.yaml",
        "datasheets cited per field (H800, H100 PCIe / NVL, GH200 96 GB, A100 40 GB, B300 / GB300, V100 / DGX-2H, T4 nodes); "
        "Ada and RTX Blackwell whitepapers (RTX 4090 / 5090 / PRO 6000, FP32-accumulate rates); V100 HBM rate from "
        "Jia et al. 2018; Megatron-LM 2019 and v1.0 score kernels from their code (megatron_scores)",
        "nothing",
    ),
)


def _mechanism_lines() -> list[str]:
    rows = [f"| {name} | {where} | {data} | {fitted} |" for name, where, data, fitted in MECHANISMS]
    return [
        "## Mechanisms and the component data they rest on",
        "",
        "What each modelled mechanism is built from; the fitted column names the only constants fitted to step "
        "times (validate/fitted.py, with the sets they were fitted on). Formulas: docs/model.md.",
        "",
        "| mechanism | modelled in | component data | fitted to step times |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def validation_markdown(report: dict[str, Any], cases_loaded: list | None = None) -> str:
    """The whole docs/validation.md: summary, memory-scope rule, kernel tables (and, given the
    loaded cases, their step times with the tables attached), one table per case file."""
    summary = report["summary"]
    cases = report["cases"]
    start = 0  # cases are in file order, so each file's entries are the next group["cases"] ones
    lines = [
        "# Validation against published measurements",
        "",
        f"This file is generated; regenerate it with `{REGENERATE_COMMAND}`.",
        "Each row compares paraplan's prediction with a published measurement; "
        "error % = 100 · (predicted / measured − 1), positive when paraplan over-predicts. "
        "Measured runs vary by a few percent from run to run.",
        "",
        "## Summary",
        "",
        *_summary_table(summary),
        "",
        "## Memory scope",
        "",
        MEMORY_SCOPE_RULE,
        "",
    ]
    if "cross_validation" in report:
        lines += _cv_lines(report["cross_validation"])
    if report["summary"].get("band_coverage"):
        lines += band_method_lines() + band_coverage_lines(report)
    lines += _mechanism_lines()
    lines += tables_markdown()
    if cases_loaded is not None:
        lines += attached_markdown(cases_loaded)
    for file, group in summary.get("by_source", {}).items():
        count = group["cases"] + group.get("unsupported", 0)
        entries = cases[start : start + count]
        start += count
        lines += [f"## {file}", ""]
        for source in dict.fromkeys(e["source"] for e in entries):
            lines.append(f"- {source}")
        lines += [
            "",
            "| case | metric | predicted | measured | error % |",
            "|---|---|---:|---:|---:|",
        ]
        for entry in entries:
            lines += _case_rows(entry)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
