"""Turn AMP's published trial records into heterogeneous validation cases (docs/heterogeneous.md, "Cases").

Input: the raw records of AMP's real trials (Li et al. 2022, arXiv:2210.07297; repository
DachengLi1/AMP, src/results/het_cluster_results.txt and homogeneous_results.txt), as collected in
``reference/published/amp-trials.json``. Output: a case file in the heterogeneous schema, bundled as
``paraplan/validate/cases/hetero/amp2022.json``::

    python -m paraplan.validate.amp_import ../shared/reference/published/amp-trials.json \\
        src/paraplan/validate/cases/hetero/amp2022.json

What each record becomes (facts from the record; assumptions named in the case's ``notes``):
- cluster: pools of catalog nodes in rank order (AMP puts rank r on node r // 4); the 4 GPUs of an
  instance share its one network interface (AWS P3 / G4 pages give one network performance figure
  per instance), ``nic_shared_by: 4``;
- plan: AMP orders ranks (pp, dp, mp) outermost first, so stage k holds ranks
  [k·dp·tp, (k+1)·dp·tp) and its GPUs are the nodes those ranks sit on (a stage may span pools);
  layers per stage count the transformer layers (entries 2..25) of AMP's 30-entry op list inside the
  stage's [b_k, b_{k+1}); the embedding (entry 0) is on the first stage, the LM head (28) on the last;
  micro-batches = the record's gradient-accumulation steps; fp16; unfused attention (Megatron-LM
  v1.1.5 has no fused attention); no activation recomputation and no ZeRO (AMP's
  ds_pretrain_gpt2_pipe.sh passes no --checkpoint-activations; its ds_config.json has no ZeRO
  section and fp32_allreduce true); gradients reduced after the last micro-batch, not overlapped with
  backward (DeepSpeed's pipeline TrainSchedule issues ReduceTiedGrads and ReduceGrads after the final
  backward step, deepspeed/runtime/pipe/schedule.py);
- measured: ``step_time_s`` (AMP's r_cost), or ``fits: false`` for trials that could not run (OOM);
- reference: AMP's own prediction (p_cost) as ``reference.amp_predicted_s``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from paraplan.io.documents import atomic_write_text

GPUS_PER_NODE = 4
FIRST_LAYER_ENTRY, LAST_LAYER_ENTRY = (
    2,
    25,
)  # AMP's op list: 0 embed, 1 noop, 2..25 layers, 26-27 noop, 28 head, 29 noop
INSTANCE_SYSTEMS = {
    "p3.8xlarge": ("v100", "aws-p3.8xlarge"),
    "g4dn.12xlarge": ("t4", "aws-g4dn.12xlarge"),
}

MODEL = {
    "name": "amp-gpt2-medium",
    "source": "AMP (Li et al. 2022) GPT-2 benchmark model: 24 layers, hidden 1024, 16 heads, seq 1024, max positions 1024 "
    "(DachengLi1/AMP DeepSpeed/DeepSpeedExamples/Megatron-LM-v1.1.5-3D_parallelism/examples/ds_pretrain_gpt2_pipe.sh); "
    "vocab 52256 as in the trial records; ffn 4h and tied embeddings per Megatron-LM v1.1.5 GPT-2",
    "layers": 24,
    "hidden": 1024,
    "heads": 16,
    "ffn_hidden": 4096,
    "vocab": 52256,
    "mlp": "gelu",
    "norm": "layernorm",
    "tie_embeddings": True,
    "position_embedding": "learned",
    "max_position": 1024,
}


def node_instances(record: dict) -> list[str]:
    """Instance type of each node in rank order."""
    nodes = record["hardware"]["nodes"]
    if isinstance(nodes, list):
        return [n["instance"] for n in nodes]
    count, instance = nodes.split(",")[0].split("x ")  # "4x g4dn.12xlarge, each ..."
    return [instance.strip()] * int(count)


def cluster_of(instances: list[str]) -> dict:
    """Pools of consecutive nodes of one instance type, in rank order."""
    pools: list[dict] = []
    for inst in instances:
        name, system = INSTANCE_SYSTEMS[inst]
        if pools and pools[-1]["system"] == system:
            pools[-1]["nodes"] += 1
        else:
            pools.append(
                {"name": name, "system": system, "nodes": 1, "nic_shared_by": GPUS_PER_NODE}
            )
    return {"name": "+".join(f"{p['nodes']}x {p['system']}" for p in pools), "pools": pools}


def stage_layers(bounds: list[int]) -> list[int]:
    """Transformer layers in each stage's [b_k, b_{k+1}) of AMP's op list."""
    return [
        sum(1 for e in range(a, b) if FIRST_LAYER_ENTRY <= e <= LAST_LAYER_ENTRY)
        for a, b in zip(bounds, bounds[1:])
    ]


def stage_devices(instances: list[str], stage: int, per_stage: int) -> list[dict]:
    """Pools and GPU counts of stage ``stage``'s ranks [stage·per_stage, (stage+1)·per_stage)."""
    out: list[dict] = []
    for rank in range(stage * per_stage, (stage + 1) * per_stage):
        pool = INSTANCE_SYSTEMS[instances[rank // GPUS_PER_NODE]][0]
        if out and out[-1]["pool"] == pool:
            out[-1]["gpus"] += 1
        else:
            out.append({"pool": pool, "gpus": 1})
    return out


PARAMETERLESS_ENTRIES = {
    1,
    26,
    29,
}  # AMP's op list: lambdas (transposes, the loss wrapper) without weights


def failure_evidence(record: dict) -> str:
    """What the record itself says about a trial that could not run (AMP logs only r_cost = inf)."""
    par, batch = record["parallelism"], record["batch"]
    bounds = par["stage_boundaries"]
    empty = [
        k
        for k, (a, b) in enumerate(zip(bounds, bounds[1:]))
        if set(range(a, b)) <= PARAMETERLESS_ENTRIES
    ]
    if empty:
        return (
            f"stage {empty[0]} holds only op entries {sorted(set(range(bounds[empty[0]], bounds[empty[0] + 1])))} "
            "(no parameters): its optimizer cannot be built (torch.optim: empty parameter list), not an OOM"
        )
    if batch["mbs"] == 1:
        return (
            f"cause not logged; micro-batch 1 (tp {par['tp']}) is the least memory its layout can use, and the same "
            "layout ran at larger micro-batches: not an out-of-memory failure by this evidence"
        )
    return (
        f"cause not logged; micro-batch {batch['mbs']} (tp {par['tp']}): out of memory is the likely cause; "
        "paraplan's peak for it is in the validate report"
    )


def case_of(record: dict) -> dict:
    par, batch = record["parallelism"], record["batch"]
    tp, dp, pp = par["tp"], par["dp"], par["pp"]
    instances = node_instances(record)
    layers = stage_layers(par["stage_boundaries"])
    if "transformer_layers_per_stage" in par and par["transformer_layers_per_stage"] != layers:
        raise ValueError(
            f"{record['id']}: layer count {layers} disagrees with {par['transformer_layers_per_stage']}"
        )
    stages = []
    for k in range(pp):
        devices = stage_devices(instances, k, tp * dp)
        stage: dict = {"layers": layers[k], "tp": tp}
        stage.update(devices[0] if len(devices) == 1 else {"devices": devices})
        stages.append(stage)
    measured = record["measured"]
    src = record["source"]
    mixed = len(set(instances)) > 1
    return {
        "name": record["id"],
        "source": f"{src['title']} ({src['repo']} {src['path']} @ {src['commit']}; {src['paper']})",
        "group": "amp-mixed" if mixed else "amp-t4",
        "model": MODEL,
        "cluster": cluster_of(instances),
        "plan": {
            "global_batch": batch["gbs"],
            "seq_length": batch["seq"],
            "microbatches": batch["ga"],
            "dtype": "fp16",
            "attention": "unfused",
            "overlap_dp_grad_reduce": False,
            "engine": "deepspeed",
            "engine_stack": "amp2022",
            "stages": stages,
        },
        "measured": {"fits": False}
        if measured["failed"]
        else {"step_time_s": measured["step_time_s"]},
        "reference": {"amp_predicted_s": measured["amp_predicted_s"]},
        **({"evidence": failure_evidence(record)} if measured["failed"] else {}),
        "record": {
            "tp": tp,
            "dp": dp,
            "pp": pp,
            "mbs": batch["mbs"],
            "stage_boundaries": par["stage_boundaries"],
        },
        "quote": record.get("quote", ""),
        "confidence": record.get("confidence", ""),
        "notes": "converted by paraplan.validate.amp_import: stage GPUs from AMP's (pp, dp, mp) rank order; "
        "no recompute, no ZeRO, unfused attention (assumptions stated in that module)",
    }


def is_records(data: object) -> bool:
    """True for a document of AMP trial records (a ``records`` list of mappings with ``arch``, ``hardware`` and
    ``parallelism``, the format of reference/published/amp-trials.json) rather than a case file."""
    records = data.get("records") if isinstance(data, dict) and "cases" not in data else None
    return (
        bool(records)
        and isinstance(records, list)
        and all(
            isinstance(r, dict) and {"arch", "hardware", "parallelism"} <= set(r) for r in records
        )
    )


def convert_records(data: dict) -> dict:
    """The case file of a document of AMP trial records (is_records); ValueError naming the record it cannot read."""
    cases = []
    for i, record in enumerate(data["records"]):
        try:
            cases.append(case_of(record))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            name = record.get("id", f"#{i + 1}") if isinstance(record, dict) else f"#{i + 1}"
            raise ValueError(
                f"record {name!r}: {type(exc).__name__} {exc}; not an AMP trial record this converter reads"
            ) from None
    return {
        "about": "AMP (NeurIPS 2022) real trials as heterogeneous validation cases; schema in docs/heterogeneous.md. "
        + str(data.get("about", "")),
        "cases": cases,
    }


def convert(records_path: Path) -> dict:
    return convert_records(json.loads(Path(records_path).read_text()))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(
            "usage: python -m paraplan.validate.amp_import RECORDS.json OUT.json", file=sys.stderr
        )
        return 2
    out = Path(argv[1])
    text = json.dumps(convert(Path(argv[0])), indent=1) + "\n"
    atomic_write_text(out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
