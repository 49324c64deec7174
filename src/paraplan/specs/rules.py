"""Every plan rule, each written once (issue 31); those of the expert knobs in specs.rules_moe, the pipeline
schedules' in specs.rules_schedule.

A rule names what a value breaks, as a sentence (``str``), or returns None (or an empty list) when the
value is allowed. The checks of both plan kinds read them: specs.plan.plan_violations (uniform plans),
specs.stage_plan.stage_plan_violations (per-stage plans), and so do the searches that enumerate them
(search.space for uniform plans, search.staged for per-stage plans), so no search proposes a plan its
estimator refuses. Degrees come as a :class:`~paraplan.specs.parallel.ParallelDims`.

Sources: Megatron-LM's argument checks (megatron/training/arguments.py) unless a rule names another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.specs.errors import Violation
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.recompute import POLICIES
from paraplan.specs.rules_schedule import (  # noqa: F401 (the pipeline schedules' rules, named here too)
    dualpipe_rule,
    interleave_batch_rule,
    min_global_batch,
    vpp_rule,
)
from paraplan.specs.split import SplitGroup, chunk_units, model_part_layers
from paraplan.specs.tp_layout import default_rows, grid_shape, panel_count

if TYPE_CHECKING:
    from paraplan.specs.model import ModelSpec

Rule = tuple[str, object, str]  # (field, value, rule) before it becomes a Violation


# ---- degrees -------------------------------------------------------------------------------------
def degree_violation(gpus: int, dims: ParallelDims) -> Violation:
    """For degrees whose product is not ``gpus``: blame the degree that cannot split the GPUs (tp,
    then cp, then pp), else dp (dp = 0: not given, and no dp makes the product)."""
    product = 1
    for name in ("tp", "cp", "pp"):
        value = getattr(dims, name)
        product *= value
        if gpus % product:
            others = "" if product == value else f" (with the degrees before it: product {product})"
            return Violation(f"plan.{name}", value, f"must divide gpus={gpus}{others}")
    if dims.dp:
        return Violation("plan.dp", dims.dp, f"must equal gpus/(tp·pp·cp) = {gpus // product}")
    return Violation("plan.gpus", gpus, f"must equal tp·pp·dp·cp = {dims.tp}·{dims.pp}·?·{dims.cp}")


def degree_rule(gpus: int, dims: ParallelDims) -> Violation | None:
    """tp·cp·dp·pp must be ``gpus`` (dp = 0: not given; degree_violation names the degree at fault): the
    uniform plan checks (specs.plan, specs.uniform_stages) and search.staged.hetero's degrees ask it."""
    return None if dims.dp and dims.world == gpus else degree_violation(gpus, dims)


def stage_degree_rule(gpus: int, tp: int, dp: int, cp: int = 1) -> str | None:
    """A stage of a per-stage plan runs tp·cp·dp GPUs (dp = 0: gpus / (tp·cp), which tp·cp must divide)."""
    names, product = ("tp", f"{tp}") if cp == 1 else ("tp·cp", f"{tp}·{cp}"), tp * cp
    if dp and product * dp != gpus:
        return f"{names[0]}·dp = {names[1]}·{dp} must equal the stage's GPUs = {gpus}"
    if gpus % product:
        return f"{names[0]}={names[1]} must divide the stage's GPUs = {gpus}"
    return None


def stage_cp_rule(model: ModelSpec, cp: int, first_cp: int) -> str | None:
    """Every stage of a per-stage plan runs the first stage's cp: Megatron-Core sets one context-parallel
    size for the whole model (megatron/core/parallel_state.py initialize_model_parallel(context_parallel_size),
    NVIDIA/Megatron-LM d98e8a64 line 607), torchtitan one ParallelDims.cp (torchtitan/distributed/
    parallel_dims.py line 136 at b5bcd76c), and a stage boundary between different cp would need a sequence
    reshard neither implements. An encoder-decoder takes cp 1: its cross-attention
    (graph.encoder.cross_attention_ops) has no context-parallel exchange of the encoder's K/V."""
    if cp != first_cp:
        return f"every stage runs one cp (one context-parallel group size per model); allowed: {first_cp}"
    if cp > 1 and model.architecture == "encoder_decoder":
        return "an encoder-decoder's cross-attention has no context-parallel exchange; allowed: 1"
    return None


def stage_spec_rule(stage) -> str | None:
    """One stage of a per-stage plan (specs.stage_plan.StageSpec) gives its layers or its blocks ([start,
    stop] with 0 <= start <= stop), recomputes by one granularity or per op (``recompute_ops`` with
    recompute none; a stack's policy, specs.recompute.POLICIES, alone), and runs tp·cp·dp GPUs (stage_degree_rule)."""
    if (stage.layers is None) == (stage.blocks is None):
        return "give exactly one of layers or blocks"
    if stage.blocks is not None and not 0 <= stage.blocks[0] <= stage.blocks[1]:
        return f"blocks={list(stage.blocks)} must be [start, stop] with 0 <= start <= stop"
    if stage.recompute_ops and stage.recompute != "none":
        return f"recompute={stage.recompute!r} and recompute_ops both given; use one"
    ops = list(stage.recompute_ops)
    if len(ops) > 1 and (policy := next((o for o in ops if o in POLICIES), None)):
        return f"recompute_ops={ops}: {policy} is a stack's recomputation policy, listed alone"
    return stage_degree_rule(stage.gpus, stage.tp, stage.dp, stage.cp)


# ---- tensor parallelism --------------------------------------------------------------------------
def tp_rules(model: ModelSpec, tp: int) -> list[str]:
    """What a 1D tp breaks (empty when nothing): it must divide heads, kv_heads and ffn_hidden
    (Megatron-LM needs whole heads, whole key/value groups and whole MLP columns per rank)."""
    out = []
    if model.heads % tp:
        out.append(f"must divide heads={model.heads}")
    elif model.n_kv_heads % tp:
        out.append(f"must divide kv_heads={model.n_kv_heads}")
    if model.ffn_hidden % tp:
        out.append(f"must divide ffn_hidden={model.ffn_hidden}")
    return out


def tp_rules_text(model: ModelSpec, tps=()) -> str:
    """tp_rules' words for each of ``tps`` they refuse, else as one sentence naming no tp (search.space)."""
    refused = [f"tp={tp} {' and '.join(rules)}" for tp in tps if (rules := tp_rules(model, tp))]
    whole = f"tp must divide heads={model.heads}, kv_heads={model.n_kv_heads} and ffn_hidden={model.ffn_hidden}"
    return "; ".join(refused) or whole


def pool_slice_rule(gpus: int, tp: int, cp: int = 1) -> str | None:
    """A stage's GPUs from one pool hold whole tensor-parallel groups (a TP group stays in one pool), and with
    cp > 1 whole tp·cp blocks (a CP group, cp ranks tp apart, stays in one pool: step.stage_links.cp_span)."""
    if cp > 1 and gpus % (tp * cp):
        return f"must be a multiple of tp·cp={tp * cp} (a TP and a CP group stay in one pool)"
    return f"must be a multiple of tp={tp} (a TP group stays in one pool)" if gpus % tp else None


def local_sequence_rule(seq_length: int, cp: int, ways: int, name: str) -> str | None:
    """Each context-parallel rank's s/cp tokens split into ``ways`` equal parts (``name`` the degree that
    splits them: tp under sequence parallelism, a 2D grid's tp_rows)."""
    if (seq_length // cp) % ways:
        return f"seq_length/cp must be divisible by {name}={ways}"
    return None


def sequence_parallel_rule(seq_length: int, cp: int, tp: int) -> str | None:
    """Sequence parallelism splits each rank's s/cp tokens over tp (local_sequence_rule)."""
    if rule := local_sequence_rule(seq_length, cp, tp, "tp"):
        return f"{rule} with sequence_parallel"
    return None


def layout_model_rule(model: ModelSpec, layout: str) -> str | None:
    """The 2D layouts are costed for dense GQA/MHA models only (graph/summa.py builds no MoE or MLA
    layer)."""
    if layout != "1d" and moe_shaped(model):
        return "is costed for dense GQA/MHA models only (use 1d)"
    return None


def grid_rules(
    model: ModelSpec,
    tp: int,
    rows: int | None,
    seq_length: int,
    cp: int,
    summa_panels: int | None = None,
) -> list[Rule]:
    """A 2D (SUMMA) grid of ``rows`` × tp/rows (rows None: specs.tp_layout.default_rows): rows divide tp,
    at least 2 × 2, columns divide heads, kv_heads, hidden and ffn_hidden (whole heads per column), rows
    divide hidden, ffn_hidden, heads·head_dim and seq_length/cp, at most min(hidden, ffn_hidden) panels
    per product (specs.tp_layout)."""
    rows = rows if rows is not None else default_rows(tp)
    if tp % rows:
        return [("plan.tp_rows", rows, f"must divide tp={tp}")]
    cols = tp // rows
    if rows < 2 or cols < 2:
        shape = f"gives a {rows} × {cols} grid; 2d needs at least 2 × 2"
        return [
            ("plan.tp_rows", rows, f"{shape} (a single row or column is 1d tensor parallelism)")
        ]
    h, f, heads, kv = model.hidden, model.ffn_hidden, model.heads, model.n_kv_heads
    out: list[Rule] = [
        ("plan.tp", tp, f"2d grid columns ({cols}) must divide {name}={dim}")
        for dim, name in ((heads, "heads"), (kv, "kv_heads"), (h, "hidden"), (f, "ffn_hidden"))
        if dim % cols
    ]
    out += [
        ("plan.tp_rows", rows, f"must divide {name}={dim}")
        for dim, name in ((h, "hidden"), (f, "ffn_hidden"), (model.q_width, "heads·head_dim"))
        if dim % rows
    ]
    if rule := local_sequence_rule(seq_length, cp, rows, "tp_rows"):
        out.append(("plan.seq_length", seq_length, rule))
    if (panels := panel_count(rows, cols, summa_panels)) > min(h, f):
        out.append(("plan.summa_panels", panels, f"must not exceed hidden={h} and ffn_hidden={f}"))
    return out


def tp_layout_violations(model: ModelSpec, plan) -> list[Violation]:
    """The layout's rules (``plan`` a PlanSpec; specs.tp_layout): knobs of another layout unset; 2d a
    valid grid (grid_rules) without sequence parallelism or TP comm-GEMM overlap (the grid splits the
    activations already; SUMMA pipelines its own broadcasts); 2d-seq needs cp > 1; the 2D layouts are
    costed for dense models only (layout_model_rule)."""
    layout = plan.tp_layout
    out = [
        Violation(f"plan.{name}", getattr(plan, name), "needs tp_layout=2d")
        for name in ("tp_rows", "summa_panels")
        if layout != "2d" and getattr(plan, name) is not None
    ]
    if layout == "1d":
        return out
    if rule := layout_model_rule(model, layout):
        return out + [Violation("plan.tp_layout", layout, rule)]
    if layout == "2d-seq":
        needs = "tp_layout=2d-seq lays the grid over tp × cp: needs cp > 1"
        return out + ([Violation("plan.cp", 1, needs)] if plan.cp == 1 else [])
    rows, cols = grid_shape(plan.tp, plan.tp_rows)
    grid = grid_rules(model, plan.tp, rows, plan.seq_length, plan.cp, plan.summa_panels)
    out += [Violation(*rule) for rule in grid]
    if plan.tp % rows or min(rows, cols) < 2:  # no grid: its other rules say nothing
        return out
    for name, why in (
        ("sequence_parallel", "tp_layout=2d splits the activations over the grid already"),
        ("overlap_tp_comm", "tp_layout=2d pipelines its own broadcasts (summa_panels)"),
    ):
        if getattr(plan, name):
            out.append(Violation(f"plan.{name}", True, why))
    return out


# ---- context parallelism -------------------------------------------------------------------------
def cp_rule(seq_length: int, cp: int) -> str | None:
    """Context parallelism splits each sequence into 2·cp chunks (load-balanced causal attention)."""
    return f"must be divisible by 2·cp = {2 * cp}" if cp > 1 and seq_length % (2 * cp) else None


def ulysses_rule(
    model: ModelSpec, tp: int, cp: int, cp_algorithm: str, tp_layout: str = "1d"
) -> str | None:
    """Ulysses (cp_algorithm 'all-to-all' with cp > 1; nothing to check otherwise) gives each of the cp
    ranks a share of the tp-local heads: tp·cp must divide heads and kv_heads (Jacobs et al. 2023, §3.1:
    the all-to-all partitions the attention heads). The 2D tensor-parallel layouts exchange K/V their
    own way (graph/summa.py), so it needs tp_layout 1d."""
    if cp <= 1 or cp_algorithm != "all-to-all":
        return None
    if tp_layout != "1d":
        return "cp_algorithm='all-to-all' needs tp_layout='1d' (the 2D layouts exchange K/V their own way)"
    if model.heads % (tp * cp) or model.n_kv_heads % (tp * cp):
        return f"cp_algorithm='all-to-all' needs tp·cp = {tp * cp} to divide heads={model.heads} and kv_heads={model.n_kv_heads}"
    return None


# ---- pipeline and batch --------------------------------------------------------------------------
def pp_rule(model: ModelSpec, pp: int) -> str | None:
    """pp may not exceed the transformer layers (every stage needs work; uneven splits are allowed);
    an encoder-decoder's encoder and decoder layers all count (ModelSpec.total_layers)."""
    return f"must not exceed layers={model.total_layers}" if pp > model.total_layers else None


def batch_rule(
    global_batch: int, dp: int, split: int, split_name: str = "micro_batch"
) -> str | None:
    """The global batch splits into whole micro-batches on each of dp replicas: dp·split must divide it,
    ``split`` the samples per micro-batch (uniform plans) or the micro-batch count (``microbatches``, a
    per-stage plan, whose stages differ in dp and so in samples per micro-batch): it must divide the
    samples per replica (``even_share``; the search enumerates the divisors of that)."""
    per_replica = even_share(global_batch, dp)
    if not per_replica or per_replica % split:
        return f"must be a multiple of dp·{split_name} = {dp}·{split}"
    return None


def even_share(total: int, parts: int) -> int:
    """total/parts when ``parts`` divides ``total``, else 0: the samples per data-parallel replica (batch_rule:
    no split at 0), the GPUs of each of pp equal stages (search.staged under search.launch.restricted)."""
    return 0 if total % parts else total // parts


def interleave_model_rule(model: ModelSpec, vpp: int) -> str | None:
    """Megatron-LM interleaves no encoder-decoder (schedules.py, forward_backward_pipelining_with_interleaving:
    "Interleaving is not supported with an encoder and decoder model.")."""
    if vpp > 1 and model.architecture == "encoder_decoder":
        return "no interleaved schedule for encoder-decoder models (vpp must be 1)"
    return None


def interleave_split_rule(
    groups: tuple[SplitGroup, ...], vpp: int, embedding_units: int, loss_units: int
) -> str | None:
    """The search's interleaving rule: every stage's layers (+ the embedding / loss units counted on it) split into vpp
    equal whole chunks, what Megatron-LM builds from --num-virtual-stages-per-pipeline-rank alone. A plan may split
    unevenly (a pipeline layout runs it, specs.split.chunk_layer_counts; the export writes it); the search enumerates
    the equal splits only (search.space.SearchProblem._interleave_options)."""
    units = [int(chunk_units(g, embedding_units, loss_units)) for g in groups if int(g.count) > 0]
    if any(u % vpp for u in units):
        counted = " (embedding / loss counted)" if embedding_units or loss_units else ""
        return f"interleaving needs each stage's layers{counted} {sorted(set(units))} to be a multiple of vpp={vpp}"
    return None


def model_parts_rule(
    stage_layers: list[int], vpp: int, embedding_units: int = 0, loss_units: int = 0
) -> str | None:
    """torchtitan v0.2.2 runs a split as pp·vpp model parts (pipeline_parallel.py:117), the plan's chunks as its export
    writes them (specs.split.model_part_layers); each needs a module: layers, or the first's tok_embeddings / the last's
    norm and output, which torchtitan's generate_llm_fqn_per_model_part writes alone (lines 311, 333)."""
    if 0 in model_part_layers(stage_layers, vpp, embedding_units, loss_units)[1:-1]:
        why = f"a stage with fewer layers than its {vpp} chunks leaves a torchtitan model part"
        return f"{why} without layers (layers per stage {list(stage_layers)})"
    return None


def split_violations(plan, model: ModelSpec) -> list[Violation]:
    """The split's own rules (``plan`` a PlanSpec): stage_layers has pp entries summing to the layers;
    no stage is empty."""
    if plan.stage_layers is not None:
        given = list(plan.stage_layers)
        if len(given) != plan.pp:
            return [Violation("plan.stage_layers", given, f"must list pp={plan.pp} stages")]
        if sum(given) != model.layers or min(given) < 0:
            rule = f"must be >= 0 and sum to layers={model.layers}"
            return [Violation("plan.stage_layers", given, rule)]
    ends_given = plan.layers_first_stage is not None or plan.layers_last_stage is not None
    if plan.pp == 1 and ends_given:
        return [Violation("plan.layers_first_stage", plan.layers_first_stage, "needs pp > 1")]
    groups = plan.split(model.layers, model.mtp_layers)
    live = [g for g in groups if int(g.count) > 0]
    if all(int(g.layers) > 0 or (int(g.layers) == 0 and (g.embedding or g.head)) for g in live):
        return []
    counts = [int(g.layers) for g in live]
    name = "stage_layers" if plan.stage_layers is not None else "layers_first_stage"
    name = name if plan.stage_layers is not None or ends_given else "pp"
    rule = f"leaves a pipeline stage without layers (stage layer counts {counts}, layers={model.layers})"
    return [Violation(f"plan.{name}", getattr(plan, name), rule)]


# ---- recomputation -------------------------------------------------------------------------------
def recompute_modules_rule(model: ModelSpec, recompute: str, modules, cp: int) -> str | None:
    """Why ``recompute_modules`` cannot go with ``recompute`` at context-parallel degree ``cp`` (None when
    they can): modules need recompute=selective; op_sac alone, on a dense swiglu model at cp=1 (the ring
    re-run is not priced: graph.ops.OP_SAC_SOURCE); save_dots alone, dense (graph.ops.SAVE_DOTS)."""
    modules = list(modules or ())
    if modules and recompute != "selective":
        return "needs recompute=selective"
    sac = model.mlp == "swiglu" and cp == 1  # op_sac with cp > 1: ring re-run not priced
    for name, rule, ok in (("op_sac", "dense swiglu, cp=1", sac), ("save_dots", "dense", True)):
        if name in modules and not (ok and len(modules) == 1 and not moe_shaped(model)):
            return f"{name} alone, {rule}"
    return None


def recompute_violations(plan, model: ModelSpec) -> list[Violation]:
    """recompute_modules: recompute=selective (op_sac alone, dense swiglu, cp=1: graph.ops.OP_SAC_SOURCE; save_dots alone, dense: graph.ops.SAVE_DOTS); recompute_num_layers: recompute=full, dense decoder layers (MoE / MLA recompute by module)."""
    modules = list(plan.recompute_modules or ())
    out = []
    if (rule := recompute_modules_rule(model, plan.recompute, modules, plan.cp)) is not None:
        out.append(Violation("plan.recompute_modules", modules, rule))
    if (layers := plan.recompute_num_layers) is not None and plan.recompute != "full":
        out.append(Violation("plan.recompute_num_layers", layers, "needs recompute=full"))
    elif layers is not None and moe_shaped(model):
        rule = "dense decoder layers only; MoE / MLA models recompute by module (recompute_modules)"
        out.append(Violation("plan.recompute_num_layers", layers, rule))
    return out


# ---- per-stage plans -----------------------------------------------------------------------------
def costed_by_stages(model: ModelSpec) -> bool:
    """True for models whose uniform flags `paraplan estimate` / `search` cost stage by stage: encoder-
    decoders, whose two layer kinds on two sequence lengths the uniform builder (step.blocks.BLOCK_KINDS) lacks."""
    return model.architecture == "encoder_decoder"


def uniform_model_violations(model: ModelSpec) -> list[Violation]:
    """The uniform builder (step.blocks.BLOCK_KINDS) composes stacks of identical layers: decoder-only
    models, and encoder-only ones (BERT, ViT: the same layer with bidirectional attention, ViT's patch
    embedding and classifier); encoder-decoders and stacks of differing widths are costed stage by
    stage (step/per_stage.py), never silently as decoder layers: the CLI's estimate and search turn
    an encoder-decoder's uniform flags into a per-stage plan (specs.uniform_stages) before reaching here.
    The uniform estimate (step.estimate.check_plan), search (search.space), sweep and export ask it."""
    if costed_by_stages(model):
        return [
            Violation(
                "model.architecture",
                model.architecture,
                "the uniform plan paths (Python API estimate and search, sweep, export, validate) take "
                "decoder-only and encoder-only models; an encoder-decoder is costed stage by stage: "
                "paraplan estimate / search with the same options, --plan FILE with stages, or in Python "
                "step.per_stage.estimate_stage_plan of specs.uniform_stages.uniform_stage_plan",
            )
        ]
    if model.layer_widths is not None:
        return [
            Violation(
                "model.layer_widths",
                "given",
                "layers of differing widths need a per-stage plan (--plan FILE with stages)",
            )
        ]
    return []


def stage_rules(
    model: ModelSpec,
    index: int,
    dims: ParallelDims,
    slice_gpus: tuple[int, ...],
    global_batch: int,
    microbatches: int,
    seq_length: int,
    sequence_parallel: bool,
    cp_algorithm: str = "ring",
) -> list[Rule]:
    """The rules of stage ``index`` of a per-stage plan: tp_rules, its cp those of a uniform plan's cp
    (cp_rule, ulysses_rule under ``cp_algorithm``), each pool's slice of the stage holds whole TP (and CP)
    groups (pool_slice_rule), the stage's dp splits every micro-batch into whole samples (batch_rule),
    sequence parallelism splits each rank's s/cp tokens over tp (sequence_parallel_rule). The per-stage
    check (specs.stage_plan) and the per-stage searches (search.staged, at their ``--cp`` degrees) both ask it."""
    tp, cp, stage = dims.tp, dims.cp, f"plan.stages.{index}"
    out: list[Rule] = [(f"{stage}.tp", tp, rule) for rule in tp_rules(model, tp)]
    if rule := cp_rule(seq_length, cp):
        out.append(("plan.seq_length", seq_length, f"stage {index}: {rule}"))
    if rule := ulysses_rule(model, tp, cp, cp_algorithm):
        out.append((f"{stage}.cp", cp, rule))
    out += [
        (f"{stage}.devices.{j}.gpus", gpus, rule)
        for j, gpus in enumerate(slice_gpus)
        if (rule := pool_slice_rule(gpus, tp, cp))
    ]
    if rule := batch_rule(global_batch, dims.dp, microbatches, "microbatches"):
        out.append(("plan.global_batch", global_batch, f"stage {index}: {rule}"))
    if sequence_parallel and (rule := sequence_parallel_rule(seq_length, dims.cp, tp)):
        out.append(("plan.seq_length", seq_length, f"stage {index}: {rule}"))
    return out


# ---- what a framework's launcher runs (issue 34): shared by the search (search.launch) and the exporters ----
# Megatron-LM core_v0.14.0 start-up checks, kept with their source lines in export/facts/megatron_checks.yaml.


def megatron_fsdp_rule(zero: int, pp: int) -> str | None:
    """Megatron-Core runs ZeRO 2 and 3 as Megatron FSDP, whose device mesh is (data·context, tensor) over
    the whole world (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py _get_dp_tp_mesh, line 287 at
    core_v0.14.0): no pipeline stages beside it (check 'megatron-fsdp-without-pipeline')."""
    if zero >= 2 and pp > 1:
        return (
            "Megatron FSDP (ZeRO 2/3 in Megatron-Core) runs without pipeline stages only (pp = 1)"
        )
    return None


def megatron_overlap_rule(
    zero: int, overlap_dp_grad_reduce: bool, overlap_param_gather: bool
) -> str | None:
    """Megatron-LM asserts --overlap-param-gather only with --overlap-grad-reduce (arguments.py line 562 at
    core_v0.14.0; check 'param-gather-needs-grad-reduce-overlap'); without sharding nothing is gathered."""
    if zero >= 1 and overlap_param_gather and not overlap_dp_grad_reduce:
        return "--overlap-param-gather needs --overlap-grad-reduce in Megatron-LM"
    return None


def deepspeed_cp_rule(cp: int, cp_algorithm: str = "ring") -> str | None:
    """DeepSpeed has no ring context parallelism: its DeepSpeed-Ulysses (deepspeed/sequence/layer.py;
    Jacobs et al. 2023, arXiv:2309.14509) is an all-to-all over heads: cp > 1 with ``cp_algorithm`` ring
    is refused. The uniform estimate (pipeline_engine deepspeed) and the per-stage check (plan.engine
    deepspeed) pass the plan's; the exporter (export.deepspeed) and the search's launcher
    (search.launch.degrees_allowed) write no Ulysses setting and ask it as ring: cp = 1 there."""
    if cp > 1 and cp_algorithm == "ring":
        return "DeepSpeed has no ring context parallelism (Ulysses is head-parallel all-to-all)"
    return None


def torchtitan_sequence_rule(seq_length: int, tp: int, cp: int) -> str | None:
    """torchtitan needs the sequence divisible by tp·2·cp (ParallelDims.seq_len_divisor, parallel_dims.py
    line 372 at v0.2.2; export/facts/torchtitan_checks.yaml 'sequence-divides')."""
    if seq_length % (tp * 2 * cp):
        return f"torchtitan needs seq_length divisible by tp·2·cp = {tp * 2 * cp}"
    return None
