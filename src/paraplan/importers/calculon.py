"""Calculon's application (model), system and execution JSON files -> paraplan model, system, plan.

Calculon (Isaev et al., SC'23; its public input files in reference/calculon-data/) describes a
model by its block shape, a system by compute/memory efficiency curves and a list of network tiers,
and an execution by parallel degrees and switches. Units, from its readers: network ``bandwidth``
and memory ``GBps`` in GB/s (1e9), memory ``GiB`` in 2^30 bytes, efficiency thresholds in GFLOP
and MB (1e6). What has no faithful paraplan form is refused (more than two network tiers,
inference executions, unknown keys) or stated in the notes returned beside the specs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from paraplan.io.fields import Doc, as_integer, as_number, refuse, show
from paraplan.io.documents import read_document
from paraplan.specs.errors import InputError

GB, GiB = 1e9, 2**30
GFLOP, MB = 1e9, 1e6
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float8": "fp8", "float32": "fp32"}
RECOMPUTE = {"none": "none", "attn_only": "selective", "full": "full"}
# SM counts by fp16 dense peak (TFLOP/s): Calculon's systems do not name the GPU.
SM_COUNT_BY_PEAK = {
    312: (108, "A100 whitepaper: 108 SMs"),
    989: (132, "H100 SXM5 whitepaper: 132 SMs"),
    1000: (132, "H100 SXM5 whitepaper: 132 SMs (Calculon rounds the peak to 1000 TFLOP/s)"),
}
MODEL_KEYS = {"hidden", "feedforward", "seq_size", "attn_heads", "attn_size", "num_blocks"}
EXECUTION_KEYS = {
    "num_procs",
    "tensor_par",
    "pipeline_par",
    "data_par",
    "tensor_par_net",
    "pipeline_par_net",
    "data_par_net",
    "batch_size",
    "microbatch_size",
    "datatype",
    "fused_activation",
    "attention_type",
    "activation_recompute",
    "pipeline_interleaving",
    "optimizer_sharding",
    "tensor_par_comm_type",
    "tensor_par_overlap",
    "seq_par_ag_redo",
    "data_par_overlap",
    "weight_offload",
    "activations_offload",
    "optimizer_offload",
    "training",
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
    """A Calculon file through the bounded reader (size, UTF-8, nesting, duplicate keys, NaN)."""
    data = read_document(path, f"calculon {what}")
    if not isinstance(data, dict):
        raise InputError(f"calculon {what}: {str(path)!r} must hold a JSON object")
    return data


def _keys(doc: Doc, allowed: set[str], what: str) -> None:
    unknown = sorted(str(k) for k in set(doc.keys()) - allowed)
    if unknown:
        raise InputError(
            f"calculon {what}: unknown key {unknown[0]!r}; paraplan reads {', '.join(sorted(allowed))}"
        )
    missing = sorted(allowed - set(doc.keys()))
    if missing and what == "model":
        raise InputError(
            f"calculon model.{missing[0]}: missing; paraplan reads {', '.join(sorted(allowed))}"
        )


def convert_model(data: dict, name: str, vocab: int, notes: list[str]) -> dict:
    """Calculon application -> ModelSpec fields (GPT-style block: GELU MLP, LayerNorm, biases)."""
    doc = Doc(data, "calculon model")
    _keys(doc, MODEL_KEYS, "model")
    shape = {key: doc.integer(key, minimum=1) for key in sorted(MODEL_KEYS)}
    notes.append(
        f"model: Calculon has no vocabulary or embedding; vocab={vocab} assumed (--vocab), so paraplan also "
        "costs the embedding and LM head that Calculon leaves out"
    )
    notes.append(
        "model: Calculon's block is GPT-style; paraplan takes gelu MLP, LayerNorm, biases, learned positions"
    )
    model = {
        "name": name,
        "source": f"Calculon application file {name}.json (reference/calculon-data/models)",
        "layers": shape["num_blocks"],
        "hidden": shape["hidden"],
        "heads": shape["attn_heads"],
        "head_dim": shape["attn_size"],
        "ffn_hidden": shape["feedforward"],
        "vocab": vocab,
        "mlp": "gelu",
        "norm": "layernorm",
        "max_position": shape["seq_size"],
    }
    if shape["attn_heads"] * shape["attn_size"] != shape["hidden"]:
        notes.append(
            f"model: attn_heads·attn_size = {shape['attn_heads'] * shape['attn_size']} differs from hidden="
            f"{shape['hidden']}; kept as given (head_dim={shape['attn_size']})"
        )
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
    doc = Doc(data, "calculon system")
    allowed = {"matrix", "vector", "mem1", "mem2", "processing_mode", "networks"}
    unknown = sorted(str(k) for k in set(doc.keys()) - allowed)
    if unknown:
        raise InputError(
            f"calculon system: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )
    nets = doc.docs("networks", [])
    if len(nets) != 2:
        raise InputError(
            f"calculon system: networks has {len(nets)} tiers; not allowed, paraplan models exactly two "
            "(NVLink domain, scale-out)"
        )
    matrix, vector = doc.doc("matrix"), doc.doc("vector", {})
    half_key = "float16" if "float16" in matrix else "bfloat16"
    if half_key not in matrix:
        raise InputError("calculon system.matrix: needs float16 or bfloat16")
    mflops, vflops = _peak_flops(matrix, vector)
    efficiency, tflops = _efficiency(doc, matrix, half_key, notes)
    if sm_count is None:
        sm_count = _sm_count(tflops, half_key, notes)
    inner, outer = nets
    _note_ring_factors(inner, outer, notes)
    mode = doc.get("processing_mode", None)
    if mode not in (None, "no_overlap"):
        notes.append(
            f"system: processing_mode {show(mode)} not mapped (paraplan's overlap follows the plan)"
        )
    if inner.get("must_be_filled", False):
        notes.append(
            "system: the NVLink tier's must_be_filled has no paraplan counterpart (placement follows the plan)"
        )
    mem1 = doc.doc("mem1")
    mem2 = doc.doc("mem2") if "mem2" in doc and doc.get("mem2", None) is not None else None
    system = {
        "name": name,
        "source": f"Calculon system file {name}.json (reference/calculon-data/systems)",
        "accelerator": {
            "name": name,
            "matrix_flops": mflops,
            "vector_flops": vflops,
            "hbm_capacity": mem1.number("GiB", positive=True) * GiB,
            "hbm_bandwidth": mem1.number("GBps", positive=True) * GB,
            "sm_count": sm_count,
            "efficiency": efficiency,
            "reserved_memory": 1.0,
            **(
                {
                    "host_memory": mem2.number("GiB", positive=True) * GiB,
                    "host_bandwidth": mem2.number("GBps", positive=True) * GB,
                }
                if mem2
                else {}
            ),
        },
        "node": {
            "gpus_per_domain": inner.integer("size", minimum=1),
            "nvlink_bandwidth": inner.number("bandwidth", positive=True) * GB,
            "nvlink_latency": inner.number("latency", minimum=0),
            "nvlink_efficiency": inner.number("efficiency", positive=True),
            "nvlink_overlap_cost": inner.number("processor_usage", minimum=0),
        },
        "network": {
            "nic_bandwidth": outer.number("bandwidth", positive=True) * GB,
            "latency": outer.number("latency", minimum=0),
            "efficiency": outer.number("efficiency", positive=True),
            "overlap_cost": outer.number("processor_usage", minimum=0),
        },
    }
    return system


def _peak_flops(matrix: Doc, vector: Doc) -> tuple[dict[str, float], dict[str, float]]:
    """(matrix, vector) peak FLOP/s by paraplan datatype; bf16 takes fp16's when only fp16 is given.
    An unknown matrix datatype is refused, an unknown vector one skipped."""
    mflops, vflops = {}, {}
    for table, out in ((matrix, mflops), (vector, vflops)):
        for key in table.keys():
            dt = DTYPES.get(key) if isinstance(key, str) else None
            if dt is None:
                if table is vector:
                    continue
                raise InputError(
                    f"calculon system.matrix: datatype {show(key)} is not allowed; allowed: {', '.join(DTYPES)}"
                )
            out[dt] = table.doc(key).number("tflops", positive=True) * 1e12
    if "fp16" in mflops:
        mflops.setdefault("bf16", mflops["fp16"])
        if "fp16" in vflops:
            vflops.setdefault("bf16", vflops["fp16"])
    return mflops, vflops


def _efficiency(doc: Doc, matrix: Doc, half_key: str, notes: list[str]) -> tuple[dict, float]:
    """(the accelerator's efficiency fields, the 16-bit matrix peak in TFLOP/s): the cap of Calculon's
    GEMM efficiency curve with a fixed ramp fitted to it (_ramp_s), attention at that cap, the top of
    the memory efficiency curve, no kernel overhead."""
    half = matrix.doc(half_key)
    curve = half.pairs("gflops_efficiency")
    cap = max(e for _, e in curve)
    if not 0 < cap <= 1:
        raise refuse(half.at("gflops_efficiency"), cap, "the largest efficiency must be in (0, 1]")
    tflops = half.number("tflops", positive=True)
    ramp = _ramp_s(curve, tflops * 1e12, cap)
    mem1 = doc.doc("mem1")
    efficiency = {
        "gemm": cap,
        "gemm_ramp_s": ramp,
        "attention": cap,
        "hbm": max(e for _, e in mem1.pairs("MB_efficiency")),
        "kernel_overhead_s": 0.0,
    }
    if "float8" in matrix:
        efficiency["gemm_fp8"] = max(e for _, e in matrix.doc("float8").pairs("gflops_efficiency"))
    notes.append(
        f"system: GEMM efficiency curve {half.get('gflops_efficiency')} -> cap {cap} and a fixed ramp "
        f"{ramp * 1e6:.1f} us (least squares over the curve); paraplan also applies tile/wave quantisation"
    )
    notes.append(
        "system: attention runs at the matrix efficiency cap (Calculon costs attention as matrix ops); "
        "memory efficiency = top of the MB_efficiency curve; no per-kernel overhead and no reserved HBM "
        "(Calculon has neither)"
    )
    return efficiency, tflops


def _sm_count(tflops: float, half_key: str, notes: list[str]) -> int:
    """The SM count of the GPU whose 16-bit matrix peak is ``tflops`` (SM_COUNT_BY_PEAK)."""
    known = SM_COUNT_BY_PEAK.get(round(tflops))
    if known is None:
        raise InputError(
            f"calculon system.matrix.{half_key}.tflops: cannot tell the GPU's SM count from "
            f"{tflops:g} TFLOP/s; give --sm-count"
        )
    notes.append(f"system: sm_count={known[0]} ({known[1]}), inferred from the fp16 peak")
    return known[0]


def _note_ring_factors(inner: Doc, outer: Doc, notes: list[str]) -> None:
    """Note each tier's collective volume factor that differs from paraplan's ring volume (RING_FACTOR);
    refuse one that is not [scalar, offset]."""
    for tier, net in (("NVLink", inner), ("scale-out", outer)):
        ops = net.doc("ops", {})
        for op in ops.keys():
            ring = RING_FACTOR.get(op)
            if ring is None:
                continue
            pair = ops.get(op)
            if not (isinstance(pair, list) and len(pair) == 2):
                raise refuse(
                    ops.at(op),
                    pair,
                    "must be [scalar, offset] (Calculon's volume factor scalar·(n+offset)/n)",
                )
            scalar, offset = (
                as_number(pair[0], ops.at(op) + "[0]"),
                as_integer(pair[1], ops.at(op) + "[1]"),
            )
            if (scalar, offset) != ring:
                notes.append(
                    f"system: {tier} {op} factor {scalar}·(n{offset:+d})/n differs from paraplan's ring volume "
                    f"{ring[0]}·(n{ring[1]:+d})/n; not representable per op, paraplan's ring formula is used"
                )


def convert_execution(data: dict, notes: list[str]) -> tuple[dict, str]:
    """Calculon execution -> PlanSpec fields, and the attention type (a model property in paraplan)."""
    doc = Doc(data, "calculon execution")
    _keys(doc, EXECUTION_KEYS, "execution")
    if not doc.boolean("training", True):
        raise InputError(
            "calculon execution.training: false (inference) is not allowed; paraplan models training steps"
        )
    comm = doc.choice("tensor_par_comm_type", ("ar", "rs_ag", "p2p_rs_ag"), "ar")
    if comm == "p2p_rs_ag":
        notes.append(
            "plan: tensor_par_comm_type p2p_rs_ag costed as paraplan's reduce-scatter/all-gather (sequence parallel)"
        )
    if doc.boolean("seq_par_ag_redo", False):
        notes.append(
            "plan: seq_par_ag_redo (re-gather in backward instead of storing) is paraplan's selective-recompute "
            "behaviour for sequence parallelism; not a separate knob"
        )
    if doc.boolean("fused_activation", False):
        notes.append(
            "plan: fused_activation has no paraplan knob (elementwise ops are costed as memory-bound kernels)"
        )
    nets = {g: doc.get(f"{g}_par_net", None) for g in ("tensor", "pipeline", "data")}
    notes.append(
        f"plan: Calculon assigns networks per group {nets}; paraplan derives each group's tiers from the rank "
        "order tp-cp-dp-pp (innermost first) and the domain size"
    )
    overlap = doc.text("tensor_par_overlap", "none")
    vpp = doc.integer("pipeline_interleaving", 1, minimum=1)
    plan = {
        "gpus": doc.integer("num_procs", minimum=1),
        "tp": doc.integer("tensor_par", minimum=1),
        "pp": doc.integer("pipeline_par", minimum=1),
        "dp": doc.integer("data_par", minimum=1),
        "micro_batch": doc.integer("microbatch_size", minimum=1),
        "global_batch": doc.integer("batch_size", minimum=1),
        "vpp": vpp,
        "schedule": "interleaved" if vpp > 1 else "1f1b",
        "sequence_parallel": comm in ("rs_ag", "p2p_rs_ag"),
        "recompute": doc.choice("activation_recompute", RECOMPUTE, "none"),
        "zero": 1 if doc.boolean("optimizer_sharding", False) else 0,
        "dtype": doc.choice("datatype", DTYPES, "float16"),
        "attention": "unfused",
        "overlap_tp_comm": overlap != "none",
        "overlap_dp_grad_reduce": doc.boolean("data_par_overlap", False),
        "offload_weights": doc.boolean("weight_offload", False),
        "offload_activations": doc.boolean("activations_offload", False),
        "offload_optimizer": doc.boolean("optimizer_offload", False),
    }
    notes.append(
        "plan: attention 'unfused' (Calculon costs attention as separate matmuls and softmax)"
    )
    if overlap != "none":
        notes.append(
            f"plan: tensor_par_overlap {overlap!r} mapped to overlap_tp_comm (paraplan has one TP overlap form)"
        )
    return plan, doc.choice("attention_type", ("multihead", "multiquery"), "multihead")


def convert(
    model_path: Path,
    system_path: Path,
    execution_path: Path,
    vocab: int = 51200,
    sm_count: int | None = None,
) -> Converted:
    """Read the three Calculon files; the plan's sequence length is the model's seq_size."""
    notes: list[str] = []
    model_data = _read(model_path, "model")
    model = convert_model(model_data, Path(model_path).stem, vocab, notes)
    system = convert_system(_read(system_path, "system"), Path(system_path).stem, notes, sm_count)
    plan, attention_type = convert_execution(_read(execution_path, "execution"), notes)
    if attention_type == "multiquery":
        model["kv_heads"] = 1
    plan["seq_length"] = model["max_position"]  # Calculon's seq_size
    return Converted(model, system, plan, notes)
