"""Calculon's application (model), system and execution JSON files -> paraplan model, system, plan.

Calculon (Isaev et al., SC'23; its public input files in reference/calculon-data/) describes a
model by its block shape, a system by compute/memory efficiency curves and a list of network tiers,
and an execution by parallel degrees and switches. Units, from its readers: network ``bandwidth``
and memory ``GBps`` in GB/s (1e9), memory ``GiB`` in 2^30 bytes, efficiency thresholds in GFLOP
and MB (1e6). What has no faithful paraplan form is refused (more than two network tiers,
inference executions, unknown keys) or stated in the notes returned beside the specs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from paraplan.specs.errors import InputError

GB, GiB = 1e9, 2**30
GFLOP, MB = 1e9, 1e6
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float8": "fp8", "float32": "fp32"}
RECOMPUTE = {"none": "none", "attn_only": "selective", "full": "full"}
# SM counts by fp16 dense peak (TFLOP/s): Calculon's systems do not name the GPU.
SM_COUNT_BY_PEAK = {312: (108, "A100 whitepaper: 108 SMs"), 989: (132, "H100 SXM5 whitepaper: 132 SMs"),
                    1000: (132, "H100 SXM5 whitepaper: 132 SMs (Calculon rounds the peak to 1000 TFLOP/s)")}
MODEL_KEYS = {"hidden", "feedforward", "seq_size", "attn_heads", "attn_size", "num_blocks"}
EXECUTION_KEYS = {
    "num_procs", "tensor_par", "pipeline_par", "data_par", "tensor_par_net", "pipeline_par_net", "data_par_net",
    "batch_size", "microbatch_size", "datatype", "fused_activation", "attention_type", "activation_recompute",
    "pipeline_interleaving", "optimizer_sharding", "tensor_par_comm_type", "tensor_par_overlap", "seq_par_ag_redo",
    "data_par_overlap", "weight_offload", "activations_offload", "optimizer_offload", "training",
}
RING_FACTOR = {"all_reduce": (2.0, -1), "reduce_scatter": (1.0, -1), "all_gather": (1.0, -1)}


@dataclass
class Converted:
    """paraplan inputs (plain dicts, validated by the loaders) and what the conversion could not carry."""

    model: dict
    system: dict
    plan: dict
    notes: list[str] = field(default_factory=list)


def _read(path: Path, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"calculon {what}: cannot read {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"calculon {what}: {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"calculon {what}: {str(path)!r} must hold a JSON object")
    return data


def _keys(data: dict, allowed: set[str], what: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(f"calculon {what}: unknown key {unknown[0]!r}; paraplan reads {', '.join(sorted(allowed))}")
    missing = sorted(allowed - set(data))
    if missing and what == "model":
        raise InputError(f"calculon model: missing key {missing[0]!r}")


def convert_model(data: dict, name: str, vocab: int, notes: list[str]) -> dict:
    """Calculon application -> ModelSpec fields (GPT-style block: GELU MLP, LayerNorm, biases)."""
    _keys(data, MODEL_KEYS, "model")
    notes.append(f"model: Calculon has no vocabulary or embedding; vocab={vocab} assumed (--vocab), so paraplan also "
                 "costs the embedding and LM head that Calculon leaves out")
    notes.append("model: Calculon's block is GPT-style; paraplan takes gelu MLP, LayerNorm, biases, learned positions")
    model = {
        "name": name, "source": f"Calculon application file {name}.json (reference/calculon-data/models)",
        "layers": data["num_blocks"], "hidden": data["hidden"], "heads": data["attn_heads"],
        "head_dim": data["attn_size"], "ffn_hidden": data["feedforward"], "vocab": vocab,
        "mlp": "gelu", "norm": "layernorm", "max_position": data["seq_size"],
    }
    if data["attn_heads"] * data["attn_size"] != data["hidden"]:
        notes.append(f"model: attn_heads·attn_size = {data['attn_heads'] * data['attn_size']} differs from hidden="
                     f"{data['hidden']}; kept as given (head_dim={data['attn_size']})")
    return model


def _ramp_s(curve: list, peak: float, cap: float) -> float:
    """Fixed GEMM time that best reproduces a Calculon efficiency curve under t = F/(R·cap) + t_ramp
    (least squares on relative time over the curve's points with F > 0)."""
    num = den = 0.0
    for gflop, eff in curve:
        if gflop <= 0:
            continue
        a = peak * eff / (gflop * GFLOP)  # 1 / t_calculon
        num += a * (1.0 - eff / cap)
        den += a * a
    return max(0.0, num / den) if den else 0.0


def convert_system(data: dict, name: str, notes: list[str], sm_count: int | None = None) -> dict:
    """Calculon system -> SystemSpec fields; two network tiers (scale-up, scale-out)."""
    allowed = {"matrix", "vector", "mem1", "mem2", "processing_mode", "networks"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(f"calculon system: unknown key {unknown[0]!r}")
    nets = data.get("networks") or []
    if len(nets) != 2:
        raise InputError(f"calculon system: networks has {len(nets)} tiers; paraplan models exactly two (NVLink domain, scale-out)")
    matrix, vector = data["matrix"], data["vector"]
    half = matrix.get("float16") or matrix.get("bfloat16")
    if half is None:
        raise InputError("calculon system: matrix needs float16 or bfloat16")
    mflops, vflops = {}, {}
    for key, entry in matrix.items():
        dt = DTYPES.get(key)
        if dt is None:
            raise InputError(f"calculon system: matrix datatype {key!r} is not allowed; allowed: {', '.join(DTYPES)}")
        mflops[dt] = entry["tflops"] * 1e12
    for key, entry in vector.items():
        if key in DTYPES:
            vflops[DTYPES[key]] = entry["tflops"] * 1e12
    if "fp16" in mflops:
        mflops.setdefault("bf16", mflops["fp16"])
        vflops.setdefault("bf16", vflops.get("fp16", vflops.get("bf16")))
    cap = max(e for _, e in half["gflops_efficiency"])
    peak = half["tflops"] * 1e12
    ramp = _ramp_s(half["gflops_efficiency"], peak, cap)
    efficiency = {"gemm": cap, "gemm_ramp_s": ramp, "attention": cap,
                  "hbm": max(e for _, e in data["mem1"]["MB_efficiency"]), "kernel_overhead_s": 0.0}
    if "float8" in matrix:
        efficiency["gemm_fp8"] = max(e for _, e in matrix["float8"]["gflops_efficiency"])
    notes.append(f"system: GEMM efficiency curve {half['gflops_efficiency']} -> cap {cap} and a fixed ramp "
                 f"{ramp * 1e6:.1f} us (least squares over the curve); paraplan also applies tile/wave quantisation")
    notes.append("system: attention runs at the matrix efficiency cap (Calculon costs attention as matrix ops); "
                 "memory efficiency = top of the MB_efficiency curve; no per-kernel overhead and no reserved HBM "
                 "(Calculon has neither)")
    if sm_count is None:
        known = SM_COUNT_BY_PEAK.get(round(half["tflops"]))
        if known is None:
            raise InputError(f"calculon system: cannot tell the GPU's SM count from {half['tflops']} TFLOP/s; give --sm-count")
        sm_count = known[0]
        notes.append(f"system: sm_count={sm_count} ({known[1]}), inferred from the fp16 peak")
    inner, outer = nets
    for tier, net in (("NVLink", inner), ("scale-out", outer)):
        for op, (scalar, offset) in net["ops"].items():
            ring = RING_FACTOR.get(op)
            if ring is not None and (scalar, offset) != ring:
                notes.append(f"system: {tier} {op} factor {scalar}·(n{offset:+d})/n differs from paraplan's ring volume "
                             f"{ring[0]}·(n{ring[1]:+d})/n; not representable per op, paraplan's ring formula is used")
    if data.get("processing_mode") not in (None, "no_overlap"):
        notes.append(f"system: processing_mode {data['processing_mode']!r} not mapped (paraplan's overlap follows the plan)")
    if inner.get("must_be_filled"):
        notes.append("system: the NVLink tier's must_be_filled has no paraplan counterpart (placement follows the plan)")
    mem2 = data.get("mem2")
    system = {
        "name": name,
        "source": f"Calculon system file {name}.json (reference/calculon-data/systems)",
        "accelerator": {
            "name": name, "matrix_flops": mflops, "vector_flops": vflops,
            "hbm_capacity": data["mem1"]["GiB"] * GiB, "hbm_bandwidth": data["mem1"]["GBps"] * GB,
            "sm_count": sm_count, "efficiency": efficiency, "reserved_memory": 1.0,
            **({"host_memory": mem2["GiB"] * GiB, "host_bandwidth": mem2["GBps"] * GB} if mem2 else {}),
        },
        "node": {
            "gpus_per_domain": inner["size"], "nvlink_bandwidth": inner["bandwidth"] * GB,
            "nvlink_latency": inner["latency"], "nvlink_efficiency": inner["efficiency"],
            "nvlink_overlap_cost": inner["processor_usage"],
        },
        "network": {
            "nic_bandwidth": outer["bandwidth"] * GB, "latency": outer["latency"], "efficiency": outer["efficiency"],
            "overlap_cost": outer["processor_usage"],
        },
    }
    return system


def convert_execution(data: dict, notes: list[str]) -> tuple[dict, str]:
    """Calculon execution -> PlanSpec fields, and the attention type (a model property in paraplan)."""
    _keys(data, EXECUTION_KEYS, "execution")
    if not data.get("training", True):
        raise InputError("calculon execution: training=false (inference) is not allowed; paraplan models training steps")
    comm = data.get("tensor_par_comm_type", "ar")
    if comm not in ("ar", "rs_ag", "p2p_rs_ag"):
        raise InputError(f"calculon execution: tensor_par_comm_type {comm!r} is not allowed; allowed: ar, rs_ag, p2p_rs_ag")
    if comm == "p2p_rs_ag":
        notes.append("plan: tensor_par_comm_type p2p_rs_ag costed as paraplan's reduce-scatter/all-gather (sequence parallel)")
    if data.get("seq_par_ag_redo"):
        notes.append("plan: seq_par_ag_redo (re-gather in backward instead of storing) is paraplan's selective-recompute "
                     "behaviour for sequence parallelism; not a separate knob")
    if data.get("fused_activation"):
        notes.append("plan: fused_activation has no paraplan knob (elementwise ops are costed as memory-bound kernels)")
    nets = {g: data.get(f"{g}_par_net") for g in ("tensor", "pipeline", "data")}
    notes.append(f"plan: Calculon assigns networks per group {nets}; paraplan derives each group's tiers from the rank "
                 "order tp-cp-dp-pp (innermost first) and the domain size")
    overlap = data.get("tensor_par_overlap", "none")
    vpp = int(data.get("pipeline_interleaving", 1))
    plan = {
        "gpus": data["num_procs"], "tp": data["tensor_par"], "pp": data["pipeline_par"], "dp": data["data_par"],
        "micro_batch": data["microbatch_size"], "global_batch": data["batch_size"],
        "vpp": vpp, "schedule": "interleaved" if vpp > 1 else "1f1b",
        "sequence_parallel": comm in ("rs_ag", "p2p_rs_ag"),
        "recompute": RECOMPUTE[data.get("activation_recompute", "none")],
        "zero": 1 if data.get("optimizer_sharding") else 0,
        "dtype": DTYPES[data.get("datatype", "float16")],
        "attention": "unfused",
        "overlap_tp_comm": overlap != "none",
        "overlap_dp_grad_reduce": bool(data.get("data_par_overlap", False)),
        "offload_weights": bool(data.get("weight_offload")), "offload_activations": bool(data.get("activations_offload")),
        "offload_optimizer": bool(data.get("optimizer_offload")),
    }
    notes.append("plan: attention 'unfused' (Calculon costs attention as separate matmuls and softmax)")
    if overlap != "none":
        notes.append(f"plan: tensor_par_overlap {overlap!r} mapped to overlap_tp_comm (paraplan has one TP overlap form)")
    return plan, data.get("attention_type", "multihead")


def convert(model_path: Path, system_path: Path, execution_path: Path, vocab: int = 51200,
            sm_count: int | None = None) -> Converted:
    """Read the three Calculon files; the plan's sequence length is the model's seq_size."""
    notes: list[str] = []
    model_data = _read(model_path, "model")
    model = convert_model(model_data, Path(model_path).stem, vocab, notes)
    system = convert_system(_read(system_path, "system"), Path(system_path).stem, notes, sm_count)
    plan, attention_type = convert_execution(_read(execution_path, "execution"), notes)
    if attention_type == "multiquery":
        model["kv_heads"] = 1
    elif attention_type != "multihead":
        raise InputError(f"calculon execution: attention_type {attention_type!r} is not allowed; allowed: multihead, multiquery")
    plan["seq_length"] = model_data["seq_size"]
    return Converted(model, system, plan, notes)
