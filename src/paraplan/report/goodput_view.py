"""Report lines of a plan's goodput (goodput.plan.PlanGoodput.to_dict()): time-to-train with
failures, checkpoints, restarts, and energy."""

from __future__ import annotations

_BADPUT_LABELS = {
    "startup_s": "start-up",
    "checkpoint_save_s": "checkpoint saves",
    "restart_s": "restarts",
    "lost_progress_s": "lost progress",
    "planned_s": "planned interruptions",
    "degraded_s": "ft-dp pauses and reduced throughput",
}


def _tokens(n: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


def goodput_lines(g: dict) -> list[str]:
    """Report lines of one goodput dict (to_dict of goodput.plan.PlanGoodput)."""
    ckpt = g["checkpoint"]
    if g["expected_days"] is None:  # non-finite: a restart or pause outlasts the failures' spacing
        return [
            f"goodput over {_tokens(g['tokens'])} tokens: the run never finishes in expectation: "
            f"one failure every {_hours(g['mtbf_h'])} against a restart of {g['restart_s']:.0f} s "
            f"(recovery {recovery_text(g['recovery'])}); give spares (restart.spare_servers) or "
            "another recovery policy"
        ]
    badput = ", ".join(
        f"{label} {g['badput_s'][key] / 86400:.2f} d" for key, label in _BADPUT_LABELS.items()
    )
    lines = [
        f"goodput over {_tokens(g['tokens'])} tokens (failures, checkpoints, restarts; docs/goodput.md):",
        f"  expected {g['expected_days']:.1f} days (P10 {g['days_p10']:.1f}, P50 {g['days_p50']:.1f}, "
        f"P90 {g['days_p90']:.1f}) against {g['useful_days']:.1f} failure-free; "
        f"effective training time {g['effective_training_time_ratio']:.1%}",
        f"  failures: {g['expected_failures']:.3g} expected (one every {_hours(g['mtbf_h'])}), "
        f"{g['planned_interruptions']:.3g} planned interruptions; restart {g['restart_s']:.0f} s; "
        f"recovery {recovery_text(g['recovery'])}",
        f"  checkpoint: {ckpt['rank_gib']:.3g} GiB per rank, {ckpt['total_tb']:.3g} TB in all; every "
        f"{g['checkpoint_interval_steps']} steps ({g['checkpoint_interval_s']:.0f} s); "
        f"save stall {ckpt['save_stall_s']:.3g} s ({ckpt['mode']}), reload {ckpt['load_s']:.3g} s",
    ]
    if ckpt["fallback"]:
        lines.append(f"  asynchronous save not possible, saved synchronously: {ckpt['fallback']}")
    lines.append(f"  badput: {badput}")
    cost = "" if g["cost_usd"] is None else f", cost ${g['cost_usd'] / 1e6:.3g} M"
    lines.append(f"  GPU-hours {g['gpu_hours'] / 1e6:.3g} M{cost} (badput included)")
    if g["energy_mwh"] is None:
        lines.append(f"  energy: no datasheet power for {g['accelerator']} (goodput/defaults.yaml)")
    else:
        lines.append(
            f"  energy {g['energy_mwh']:,.0f} MWh (average {g['average_mw']:.3g} MW, peak "
            f"{g['peak_mw']:.3g} MW, PUE included), {g['tokens_per_joule']:.3g} tokens/J; "
            f"{g['emissions_tco2']:,.0f} tCO2 at {g['grid_gco2_per_kwh']:g} gCO2/kWh"
        )
    return lines


def _hours(mtbf_h: float | None) -> str:
    return "never" if mtbf_h is None else f"{mtbf_h:.3g} h"


def recovery_text(rec: dict) -> str:
    """'rollback', 'ft-dp (drops replicas on gpu, server failures)' or why ft-dp rolls back."""
    if rec["policy"] != "ft-dp":
        return "rollback"
    if not rec["absorbed"]:
        why = rec.get("ft_dp_reason") or "a rollback is faster"
        return f"ft-dp, rolls back ({why})"
    hit = ", ".join(f"{k} {rec.get(f'units_hit_by_{k}')}" for k in rec["absorbed"])
    return f"ft-dp: drops what a failure hits (of {rec.get('units')} units: {hit}) and continues"


def goodput_validation_lines(report: dict) -> list[str]:
    """Lines of ``paraplan validate --goodput``: each case's prediction against its published value."""
    lines = ["Goodput: published figures recomputed from their inputs"]
    for row in report["cases"]:
        how = row["comparison"]
        bound = (
            "at least"
            if how == "at_least"
            else f"±{row['tolerance']:.0%}"
            if how == "relative"
            else f"±{row['tolerance']:g}"
        )
        mark = "ok" if row["passed"] else "NOT REPRODUCED"
        lines.append(
            f"  {row['name']}: predicted {row['predicted']:.4g}, published {row['published']:g} "
            f"({bound}) {mark}"
        )
    for item in report["not_reproduced"]:
        lines.append(f"  {item['name']}: not reproduced: {item['reason']}")
    s = report["summary"]
    lines.append(f"{s['passed']} of {s['cases']} cases reproduced")
    return lines
