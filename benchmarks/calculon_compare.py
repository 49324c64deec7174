"""Calculon's shipped inputs through paraplan: the table of docs/migrating.md.

For every execution in reference/calculon-data/validation/seqsel/tab5 (Korthikanti et al. 2022,
Table 5 configurations) paraplan estimates the step with (a) the system converted from Calculon's
a100_80g.json and (b) paraplan's own dgx-a100-80gb catalog entry, beside the step time the paper
measured (the bundled validation case korthikanti2022.json). Run: python benchmarks/calculon_compare.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from paraplan.api import plan_from_fields
from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.importers.calculon import convert

CALC = Path(__file__).resolve().parents[1] / "tests" / "data" / "calculon"
PAPER = {
    "gpt3-175B": "gpt3-175b",
    "megatron-1T": "megatron-1t",
    "megatron-22B": "megatron-22b",
    "turing-530B": "mt-nlg-530b",
}
MODE = {"full": "full", "seqsel": "seqsel"}


def measured() -> dict[str, float]:
    from importlib import resources

    text = (resources.files("paraplan.validate") / "cases" / "korthikanti2022.json").read_text()
    cases = json.loads(text)["cases"]
    return {
        c["name"]: c["measured"]["step_time_s"] for c in cases if "step_time_s" in c["measured"]
    }


def rows() -> list[dict]:
    meas = measured()
    out = []
    for execution in sorted((CALC / "validation" / "seqsel" / "tab5").glob("*.json")):
        model_name, mode = execution.stem.rsplit("_", 1)
        conv = convert(
            CALC / "models" / f"{model_name}.json", CALC / "systems" / "a100_80g.json", execution
        )
        model, plan = load_model(conv.model), plan_from_fields(conv.plan)
        ours = estimate(model, load_system(conv.system), plan)
        catalog = estimate(model, load_system("dgx-a100-80gb"), plan)
        key = f"korthikanti2022-tab5-{PAPER[model_name]}-{MODE[mode]}"
        out.append(
            {
                "execution": f"tab5/{execution.name}",
                "plan": f"tp{plan.tp} pp{plan.pp} dp{plan.dp} vpp{plan.vpp} "
                f"mb{plan.micro_batch} gb{plan.global_batch} {plan.recompute}{' sp' if plan.sequence_parallel else ''}",
                "calculon_system_s": ours.step_time_s,
                "catalog_system_s": catalog.step_time_s,
                "measured_s": meas.get(key),
            }
        )
    return out


def markdown(table: list[dict]) -> str:
    lines = [
        "| Calculon execution | plan | paraplan, Calculon's a100_80g (s) | paraplan, dgx-a100-80gb (s) | measured (s) | error (Calculon system / catalog) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in table:
        m = r["measured_s"]
        err = (
            f"{r['calculon_system_s'] / m - 1:+.1%} / {r['catalog_system_s'] / m - 1:+.1%}"
            if m
            else "—"
        )
        lines.append(
            f"| {r['execution']} | {r['plan']} | {r['calculon_system_s']:.2f} | {r['catalog_system_s']:.2f} | "
            f"{m if m else '—'} | {err} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown(rows()) + "\n")
