"""The figures of docs/heterogeneous.md: our model's answer to AMP's and Aceso's headline questions.

1. Mixed clusters: the best heterogeneity-aware plan (search --cluster: uneven layer split by DP and
   the choice of which pool takes which stages) against the best uniform plan (the same tp/dp/pp/micro-
   batch/recompute space with the even layer split a uniform planner uses and the pools in the listed
   order), both evaluated by the same heterogeneous cost model.
2. One GPU type: the best non-uniform per-stage plan (search --non-uniform) against the best uniform plan
   (every stage the same tp, dp and recompute, even layer split).

Run:  python benchmarks/hetero_plots.py docs/heterogeneous
Writes mixed_cluster.png, non_uniform.png and results.json there (atomically) and prints a table.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from paraplan.catalog import load_model  # noqa: E402
from paraplan.step.per_stage import estimate_stage_plan  # noqa: E402
from paraplan.search.staged.hetero import (
    HeteroProblem,
    _degrees,
    _gpu_list,
    _slices,
    search_cluster,
)  # noqa: E402
from paraplan.catalog.clusters import cluster_from_dict  # noqa: E402
from paraplan.search.staged.non_uniform import search_non_uniform  # noqa: E402
from paraplan.specs.errors import InputError  # noqa: E402
from paraplan.specs.model import ModelSpec  # noqa: E402
from paraplan.specs.stage_plan import stage_plan_from_dict  # noqa: E402

AMP_GPT2 = {
    "name": "amp-gpt2-medium",
    "layers": 24,
    "hidden": 1024,
    "heads": 16,
    "ffn_hidden": 4096,
    "vocab": 52256,
    "tie_embeddings": True,
    "max_position": 1024,
}
T5_3B = {
    "name": "t5-3b shape",
    "architecture": "encoder_decoder",
    "layers": 24,
    "encoder_layers": 24,
    "hidden": 1024,
    "heads": 32,
    "head_dim": 128,
    "ffn_hidden": 16384,
    "vocab": 32128,
    "decoder_seq_length": 128,
    "tie_embeddings": True,
    "bias": False,
    "dropout": False,
    "position_embedding": "rope",
    "mlp": "gelu",
}
WIDE_NARROW = {
    "name": "mixed-width stack (24 narrow + 8 wide layers)",
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "ffn_hidden": 16384,
    "vocab": 51200,
    "layer_widths": [{"count": 24, "ffn_hidden": 8192}, {"count": 8, "ffn_hidden": 32768}],
}

MIXED = [
    (
        "AMP cluster: 3x p3.8xlarge + 1x g4dn.12xlarge",
        [("v100", "aws-p3.8xlarge", 3), ("t4", "aws-g4dn.12xlarge", 1)],
        AMP_GPT2,
        32,
        1024,
        "fp16",
        "unfused",
    ),
    (
        "2x DGX-1 (V100) + 2x DGX A100 40GB",
        [("v100", "dgx-1-v100", 2), ("a100", "dgx-a100-40gb", 2)],
        "gpt3-1.3b",
        256,
        2048,
        "fp16",
        "flash",
    ),
    (
        "1x DGX A100 40GB + 4x g4dn.12xlarge",
        [("a100", "dgx-a100-40gb", 1), ("t4", "aws-g4dn.12xlarge", 4)],
        "gpt3-760m",
        128,
        2048,
        "fp16",
        "flash",
    ),
]
UNIFORM = [
    ("gpt3-6.7b, 8x A100 40GB", "gpt3-6.7b", ("a100", "dgx-a100-40gb", 1), 64, 2048),
    ("T5 3B shape, 8x V100 16GB (DGX-1)", T5_3B, ("v100", "dgx-1-v100", 1), 64, 512),
    ("mixed-width stack, 8x A100 40GB", WIDE_NARROW, ("a100", "dgx-a100-40gb", 1), 64, 2048),
]


def _model(ref) -> ModelSpec:
    return load_model(ref) if isinstance(ref, str) else ModelSpec.model_validate(ref)


def even_bounds(model: ModelSpec, pp: int) -> list[int]:
    """Even split of the transformer layers (the extra ones to the middle stages first, the uniform rule of
    PlanSpec.split), embedding on the first stage, head on the last."""
    from paraplan.specs.plan import PlanSpec
    from paraplan.specs.split import stage_layer_counts

    plan = PlanSpec(pp=pp, gpus=pp, global_batch=pp, seq_length=2048)  # the split reads pp alone
    layers = stage_layer_counts(plan.split(model.total_layers))
    bounds = [0]
    for i, n in enumerate(layers):
        bounds.append(bounds[-1] + n + (1 if i == 0 else 0) + (1 if i == pp - 1 else 0))
    return bounds


def best_uniform(problem: HeteroProblem) -> tuple[float, str]:
    """Best over uniform degrees / micro-batch / recompute with even layer splits and the listed pool order."""
    best = (float("inf"), "none fits")
    order = tuple(p.name for p in problem.cluster.pools)
    gpu_list = _gpu_list(problem.cluster, order)
    for dims, mb, m in _degrees(problem):
        tp, dp, pp = dims.tp, dims.dp, dims.pp
        if pp > problem.model.total_layers:
            continue
        bounds = even_bounds(problem.model, pp)
        per = tp * dp
        for rc in problem.recompute:
            stages = []
            for k in range(pp):
                devices = [
                    {"pool": p, "gpus": c} for p, _, c in _slices(gpu_list[k * per : (k + 1) * per])
                ]
                stages.append(
                    {
                        "devices": devices,
                        "blocks": [bounds[k], bounds[k + 1]],
                        "tp": tp,
                        "recompute": rc,
                    }
                )
            plan = stage_plan_from_dict(
                {
                    "global_batch": problem.global_batch,
                    "seq_length": problem.seq_length,
                    "microbatches": m,
                    "dtype": problem.dtype,
                    "attention": problem.attention,
                    "stages": stages,
                }
            )
            try:
                est = estimate_stage_plan(problem.model, problem.cluster, plan)
            except InputError:
                continue
            if est.fits and est.step_time_s < best[0]:
                best = (est.step_time_s, f"tp{tp} dp{dp} pp{pp} mb{mb} rc {rc}, even split")
    return best


def _write(path: Path, writer) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _bars(
    title: str,
    labels: list[str],
    uniform: list[float],
    better: list[float],
    better_name: str,
    path: Path,
) -> None:
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.add_subplot()
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], uniform, width=0.4, label="best uniform plan", color="#9aa5b1")
    ax.bar([i + 0.2 for i in x], better, width=0.4, label=better_name, color="#2a7ab0")
    for i, (u, b) in enumerate(zip(uniform, better)):
        ax.text(i + 0.2, b, f"{u / b:.2f}x", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(
        list(x), [label.replace(", ", ",\n").replace(": ", ":\n") for label in labels], fontsize=8
    )
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results = {"mixed": [], "non_uniform": []}
    for label, pools, model_ref, batch, seq, dtype, attention in MIXED:
        cluster = cluster_from_dict(
            {"name": label, "pools": [{"name": n, "system": s, "nodes": k} for n, s, k in pools]}
        )
        problem = HeteroProblem(_model(model_ref), cluster, batch, seq, dtype, attention)
        uni_t, uni_label = best_uniform(problem)
        aware = search_cluster(problem, top_k=1).plans[0]
        results["mixed"].append(
            {
                "case": label,
                "model": problem.model.name,
                "uniform_s": uni_t,
                "uniform_plan": uni_label,
                "aware_s": aware.step_time_s,
                "aware_plan": aware.label,
                "speedup": uni_t / aware.step_time_s,
            }
        )
    for label, model_ref, (name, system, nodes), batch, seq in UNIFORM:
        cluster = cluster_from_dict(
            {"name": label, "pools": [{"name": name, "system": system, "nodes": nodes}]}
        )
        dtype = "fp16" if system == "dgx-1-v100" else "bf16"
        problem = HeteroProblem(
            _model(model_ref),
            cluster,
            batch,
            seq,
            dtype,
            "flash",
            recompute=("none", "selective", "full"),
        )
        uni_t, uni_label = best_uniform(problem)
        best = search_non_uniform(
            problem, top_k=1, max_stages=4, exact_limit=20000, time_budget_s=20.0
        )
        results["non_uniform"].append(
            {
                "case": label,
                "model": problem.model.name,
                "uniform_s": uni_t,
                "uniform_plan": uni_label,
                "non_uniform_s": best.plans[0].step_time_s,
                "non_uniform_plan": best.plans[0].label,
                "search": best.mode,
                "speedup": uni_t / best.plans[0].step_time_s,
            }
        )
    _bars(
        "Mixed clusters: heterogeneity-aware plan vs best uniform plan",
        [r["case"] for r in results["mixed"]],
        [r["uniform_s"] for r in results["mixed"]],
        [r["aware_s"] for r in results["mixed"]],
        "heterogeneity-aware (search --cluster)",
        out / "mixed_cluster.png",
    )
    _bars(
        "One GPU type: per-stage (non-uniform) plan vs best uniform plan",
        [r["case"] for r in results["non_uniform"]],
        [r["uniform_s"] for r in results["non_uniform"]],
        [r["non_uniform_s"] for r in results["non_uniform"]],
        "non-uniform (search --non-uniform)",
        out / "non_uniform.png",
    )
    _write(
        out / "results.json", lambda tmp: Path(tmp).write_text(json.dumps(results, indent=2) + "\n")
    )
    print("| question | case | best uniform (s) | better plan (s) | speedup | better plan |")
    print("|---|---|---|---|---|---|")
    for r in results["mixed"]:
        print(
            f"| mixed cluster | {r['case']}, {r['model']} | {r['uniform_s']:.3f} | {r['aware_s']:.3f} | {r['speedup']:.2f}x | {r['aware_plan']} |"
        )
    for r in results["non_uniform"]:
        print(
            f"| non-uniform ({r['search']}) | {r['case']} | {r['uniform_s']:.3f} | {r['non_uniform_s']:.3f} | {r['speedup']:.2f}x | {r['non_uniform_plan']} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/heterogeneous"))
