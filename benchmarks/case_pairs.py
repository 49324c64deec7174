"""One-knob pairs of the validation cases: the model's response to a single change against measurement.

Two bundled validation cases (validate/cases/*.json) that differ in ONE input group form a pair; its
measured step-time ratio t_a / t_b against the predicted ratio tests the one mechanism that group moves,
whatever the model's absolute level on either case. Inputs are canonicalised with paraplan.validate's own
loaders (case_files.bundled_case_files / _read_case_file / load_cases, run.run_case for the prediction):

- model: the loaded ModelSpec (name and source left out: an inline model and its catalog twin are equal);
- system: the catalog system by name, with the case's ``gpus_per_domain_used`` (case_files.job_system);
- stack: the framework profile's name plus the case's ``framework_overrides`` (the container / recipe);
- the plan's fields (specs.plan.PlanSpec with its defaults filled, before the profile is applied), grouped
  (``GROUPS``): a field's group is the knob, e.g. ``precision`` (dtype, grad_dtype, fp8_weight_copies),
  ``layout`` (tp, pp, cp, ep, vpp, ... with dp following at a fixed GPU count), ``scale`` (gpus, dp,
  global_batch: weak or strong scaling), ``micro_batch``, ``seq_length``, ``recompute``, ``moe``, ...

Two cases with equal inputs in every group form a ``same inputs`` pair (predicted ratio 1): run-to-run or
container-to-container drift the model cannot see. ``--max-groups 2`` also lists pairs that differ in two
groups (e.g. a GPU change whose recipe also changes its CUDA-graph scope), labelled ``a+b``.

Per pair: knob, a -> b (the values that differ), measured ratio t_a / t_b, predicted ratio, and the
disagreement ln(pred ratio / measured ratio) in % (= the difference of the two cases' log errors; positive:
the model makes a slower relative to b than measured). Pairs are oriented so a holds the smaller value of the
knob's first differing field. The summary groups pairs by knob and transition (``a -> b`` with the case-
specific values) and gives the median measured and predicted ratios, the median disagreement, how many pairs
agree within 3 % and the largest |disagreement|.

Nothing here is fitted: it reads the shipped predictions.

Run: python benchmarks/case_pairs.py [--knob precision] [--top 40] [--max-groups 1] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from itertools import combinations

from _table import print_table
from paraplan.catalog import load_system
from paraplan.specs.plan import PlanSpec
from paraplan.validate.case_files import (
    Case,
    _read_case_file,
    bundled_case_files,
    job_system,
    load_cases,
)
from paraplan.validate.run import run_case

AGREE_PCT = 3.0  # |disagreement| within which a pair counts as "right"
# plan field -> knob group; a field not listed is its own group
GROUPS = {
    "dtype": "precision",
    "grad_dtype": "precision",
    "fp8_weight_copies": "precision",
    "gpus": "scale",
    "global_batch": "scale",
    "dp": "scale",
    "recompute": "recompute",
    "recompute_num_layers": "recompute",
    "recompute_modules": "recompute",
    "moe_dispatcher": "moe",
    "capacity_factor": "moe",
    "moe_balance": "moe",
    "expert_load_cv": "moe",
    "moe_a2a_overlap": "moe",
    "zero": "zero",
    "zero3_max_live_params": "zero",
    "zero3_prefetch_layers": "zero",
    "zero3_backward_prefetch_layers": "zero",
    "zero3_gather_unit": "zero",
    "zero3_reduce_unit": "zero",
    "zero3_regather_recompute": "zero",
    "offload_weights": "offload",
    "offload_activations": "offload",
    "offload_activation_layers": "offload",
    "offload_optimizer": "offload",
    "overlap_dp_grad_reduce": "overlap",
    "overlap_param_gather": "overlap",
    "overlap_tp_comm": "overlap",
}
LAYOUT = (
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "vpp",
    "sequence_parallel",
    "tp_layout",
    "tp_rows",
    "summa_panels",
    "cp_algorithm",
    "schedule",
    "placement",
    "stage_layers",
    "layers_first_stage",
    "layers_last_stage",
    "embedding_as_layer",
    "loss_as_layer",
)
GROUPS.update({f: "layout" for f in LAYOUT})


def _raw_cases() -> dict[tuple[str, str], dict]:
    """(file stem, case name) -> the raw case mapping, from the bundled files."""
    out = {}
    for path in bundled_case_files():
        stem, raws = _read_case_file(path)
        out.update({(stem, raw["name"]): raw for raw in raws})
    return out


def canonical_inputs(case: Case, raw: dict) -> dict[str, object]:
    """Field -> canonical value of one case: model, system, stack and the plan's fields (docstring)."""
    model = case.model.model_dump(exclude={"name", "source"})
    system = load_system(raw["system"], "system", True)
    system = job_system(system, raw.get("gpus_per_domain_used"))
    plan = PlanSpec.model_validate(raw["plan"]).model_dump()
    fields: dict[str, object] = {
        "model": json.dumps(model, sort_keys=True),
        "system": json.dumps(system.model_dump(exclude={"source", "sources"}), sort_keys=True),
        "stack": json.dumps(
            [raw.get("framework"), raw.get("framework_overrides", {})], sort_keys=True
        ),
    }
    fields.update({f"plan.{k}": json.dumps(v, sort_keys=True) for k, v in plan.items()})
    return fields


def group_of(field: str) -> str:
    """The knob group of a canonical field (GROUPS; model, system and stack are their own)."""
    if not field.startswith("plan."):
        return field
    name = field.removeprefix("plan.")
    return GROUPS.get(name, name)


def _label(case: Case, raw: dict, field: str) -> str:
    """A short readable value of one differing field of a case."""
    if field == "model":
        return case.model.name or raw["name"].split("-")[1]
    if field == "system":
        used = raw.get("gpus_per_domain_used")
        return case.system.name + (f"/{used}" if used else "")
    if field == "stack":
        over = raw.get("framework_overrides", {})
        extra = ",".join(f"{k}={v}" for k, v in sorted(over.items()))
        return f"{raw.get('framework')}" + (f"[{extra}]" if extra else "")
    return json.loads(json.dumps(getattr(case.plan, field.removeprefix("plan."))))


def _sort_key(value: object) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def find_pairs(max_groups: int = 1) -> list[dict]:
    """Every pair of scored cases with a measured step time that differ in at most ``max_groups`` knob
    groups (none: a ``same inputs`` pair), with measured and predicted ratios and the disagreement."""
    raws = _raw_cases()
    rows = []
    for case in load_cases():
        if not isinstance(case, Case) or "step_time_s" not in case.measured:
            continue
        entry = run_case(case)
        if entry["status"] != "ok":
            continue
        raw = raws[(case.file, case.name)]
        rows.append((case, raw, canonical_inputs(case, raw), entry))
    pairs = []
    for a, b in combinations(rows, 2):
        diff = sorted(k for k in a[2] if a[2][k] != b[2][k])
        groups = sorted({group_of(k) for k in diff})
        if len(groups) > max_groups:
            continue
        lab_a = [_label(a[0], a[1], k) for k in diff]
        lab_b = [_label(b[0], b[1], k) for k in diff]
        if diff and _sort_key(lab_a[0]) > _sort_key(lab_b[0]):
            a, b, lab_a, lab_b = b, a, lab_b, lab_a
        meas = a[0].measured["step_time_s"] / b[0].measured["step_time_s"]
        pred = a[3]["predicted"]["step_time_s"] / b[3]["predicted"]["step_time_s"]
        pairs.append(
            {
                "knob": "+".join(groups) or "same inputs",
                "fields": [k.removeprefix("plan.") for k in diff],
                "a": a[0].name,
                "b": b[0].name,
                "value_a": lab_a,
                "value_b": lab_b,
                "measured_ratio": meas,
                "predicted_ratio": pred,
                "disagreement_pct": 100.0 * math.log(pred / meas),
            }
        )
    return pairs


def _fmt_values(values: list) -> str:
    return "/".join(str(v) for v in values) if values else "-"


def transition(pair: dict) -> str:
    """The knob's change with the compared values, e.g. ``dtype: bf16 -> fp8``."""
    if not pair["fields"]:
        return "-"
    return f"{','.join(pair['fields'])}: {_fmt_values(pair['value_a'])} -> {_fmt_values(pair['value_b'])}"


def print_pairs(pairs: list[dict], top: int, markdown: bool) -> None:
    """Per knob, its pairs sorted by |disagreement| (at most ``top`` per knob)."""
    by_knob: dict[str, list[dict]] = defaultdict(list)
    for p in pairs:
        by_knob[p["knob"]].append(p)
    for knob in sorted(by_knob, key=lambda k: -len(by_knob[k])):
        rows = sorted(by_knob[knob], key=lambda p: -abs(p["disagreement_pct"]))[:top]
        print(f"\n## {knob} ({len(by_knob[knob])} pairs)\n")
        print_table(
            ("a", "b", "change", "meas a/b", "pred a/b", "disagree %"),
            [
                (
                    p["a"],
                    p["b"],
                    transition(p)[:70],
                    f"{p['measured_ratio']:.3f}",
                    f"{p['predicted_ratio']:.3f}",
                    f"{p['disagreement_pct']:+.1f}",
                )
                for p in rows
            ],
            markdown,
        )


def summary_rows(pairs: list[dict]) -> list[tuple[str, ...]]:
    """Per knob: pairs, median measured and predicted ratios, median and largest disagreement, agreeing
    share; sorted by |median disagreement|."""
    by_knob: dict[str, list[dict]] = defaultdict(list)
    for p in pairs:
        by_knob[p["knob"]].append(p)
    rows = []
    for knob, mine in by_knob.items():
        dis = [p["disagreement_pct"] for p in mine]
        worst = max(mine, key=lambda p: abs(p["disagreement_pct"]))
        rows.append(
            (
                abs(statistics.median(dis)),
                (
                    knob,
                    str(len(mine)),
                    f"{statistics.median(p['measured_ratio'] for p in mine):.3f}",
                    f"{statistics.median(p['predicted_ratio'] for p in mine):.3f}",
                    f"{statistics.median(dis):+.1f}",
                    f"{statistics.median(abs(d) for d in dis):.1f}",
                    f"{sum(abs(d) <= AGREE_PCT for d in dis)}/{len(dis)}",
                    f"{worst['disagreement_pct']:+.1f} {worst['a']} / {worst['b']}",
                ),
            )
        )
    return [r for _, r in sorted(rows, key=lambda r: -r[0])]


def transition_rows(pairs: list[dict], min_pairs: int) -> list[tuple[str, ...]]:
    """Per knob and compared values (at least ``min_pairs`` pairs): medians as in summary_rows."""
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for p in pairs:
        by_key[(p["knob"], transition(p))].append(p)
    rows = []
    for (knob, change), mine in by_key.items():
        if len(mine) < min_pairs:
            continue
        dis = [p["disagreement_pct"] for p in mine]
        med = statistics.median(dis)
        rows.append(
            (
                abs(med),
                (
                    knob,
                    change[:80],
                    str(len(mine)),
                    f"{statistics.median(p['measured_ratio'] for p in mine):.3f}",
                    f"{statistics.median(p['predicted_ratio'] for p in mine):.3f}",
                    f"{med:+.1f}",
                    f"{min(dis):+.1f}..{max(dis):+.1f}",
                    f"{sum(abs(d) <= AGREE_PCT for d in dis)}/{len(dis)}",
                ),
            )
        )
    return [r for _, r in sorted(rows, key=lambda r: -r[0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knob", help="list only this knob's pairs")
    parser.add_argument("--top", type=int, default=15, help="pairs listed per knob")
    parser.add_argument(
        "--max-groups", type=int, default=1, help="knob groups a pair may differ in"
    )
    parser.add_argument("--min-pairs", type=int, default=2, help="pairs a transition row needs")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the pairs as JSON and stop")
    args = parser.parse_args()
    pairs = find_pairs(args.max_groups)
    if args.knob:
        pairs = [p for p in pairs if p["knob"] == args.knob]
    if args.json:
        print(json.dumps(pairs, indent=1))
        return
    print("# Summary by knob (disagreement = ln(pred ratio / measured ratio), %)\n")
    print_table(
        ("knob", "pairs", "meas med", "pred med", "dis med %", "|dis| med", "within 3%", "worst"),
        summary_rows(pairs),
        args.markdown,
    )
    print(f"\n# By transition (>= {args.min_pairs} pairs), sorted by |median disagreement|\n")
    print_table(
        ("knob", "change", "pairs", "meas med", "pred med", "dis med %", "range", "within 3%"),
        transition_rows(pairs, args.min_pairs),
        args.markdown,
    )
    print_pairs(pairs, args.top, args.markdown)


if __name__ == "__main__":
    main()
