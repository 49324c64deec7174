"""Pipeline runtimes a non-uniform plan can run on (``plan.engine``): what each does between and after
micro-batches, as data (``ENGINES``) read by step.per_stage.

Two runtimes are described, each rule with its source:
- ``megatron``: Megatron-LM's 1F1B schedule (Narayanan et al. 2021);
- ``deepspeed``: DeepSpeed's PipelineEngine, the rules its source states whatever model code it
  drives.

A per-stage plan may also state the training stack it ran on the engine (``plan.engine_stack``,
ENGINE_STACKS), whose rules replace the engine's where that stack's model code, dtype and versions
differ and which carries the constants calibrated on that stack's runs: ``amp2022``, DeepSpeed's
PipelineEngine driving Megatron-LM v1.1.5 in fp16 as AMP ran it (Li et al. 2022, arXiv:2210.07297;
repository DachengLi1/AMP @ 72eeea4, which vendors the DeepSpeed and Megatron-LM sources it ran:
paths below are inside that repository's ``DeepSpeed/`` folder). No other plan takes them: a
per-stage plan under a DeepSpeed profile (specs.uniform_stages.stage_engine,
search.staged.problem.profile_fields) runs the engine's own rules and its profile's stack.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost import runtimes
from paraplan.cost.runtimes import DEEPSPEED_PIPE_BATCH_SYNCS, DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE


@dataclass(frozen=True)
class EngineRules:
    """What the pipeline runtime does between and after micro-batches."""

    # blocking point-to-point transfers with each neighbour per micro-batch; 0: the training stack's
    # (efficiency.runtime.p2p_transfers_per_exchange, as a uniform plan reads it: step.p2p.pipeline_links)
    transfers_per_neighbour: int
    p2p_split_over_tp: bool  # forward: each TP rank sends 1/t of the activation, or all of it
    gradient_bytes: (
        float  # gradient bytes per parameter held at the optimizer step (0: cost.memory's)
    )
    # backward TP collectives run beside the dgrad / wgrad GEMMs where the stack's runtime does too
    # (step.block_sums.tp_backward_hides: efficiency.runtime.tp_backward_async and this)
    async_tp_backward: bool = True
    # bytes per element of the tied-embedding gradient all-reduce; 0: the run's gradient dtype
    # (step.constants.grad_reduce_bytes, as a uniform plan's StepInputs.grad_reduce_bytes)
    tied_grad_bytes: float = 0.0
    grad_split_over_tp: bool = True  # backward: each TP rank sends 1/t of the activation gradient
    # (receiver's, sender's) all-gathers of the whole activation over the stage's TP group per exchange
    # with a neighbour, rebuilding what was split over the TP ranks (step.p2p.pipe_tp_gathers_s)
    tp_gathers: tuple[int, int] = (0, 0)
    sends_attention_mask: bool = (
        False  # the [1, 1, s, s] fp16 causal mask travels with every activation
    )
    host_layer_forward_s: float = (
        0.0  # host (framework) seconds per transformer layer and micro-batch, forward
    )
    host_backward_factor: float = 2.0  # backward host seconds / forward host seconds
    activation_memory_factor: float = (
        1.0  # memory the allocator holds per byte of stored activations
    )
    # how gradients are summed over micro-batches: "fused", the stack's (efficiency.runtime.grad_accumulation_bytes
    # resolved at the plan's ZeRO stage and dtype by step.constants.at_zero_stage, as a uniform plan resolves
    # them), or a cost.runtimes.GRAD_ACCUMULATION_BYTES key a training stack states (ENGINE_STACKS)
    grad_accumulation: str = "fused"
    # the stack's optimizer sets param.grad to None after each step, so autograd takes the step's first
    # micro-batch's gradient without an add (grad_accumulation_first_saving_bytes); read with a stated
    # grad_accumulation only ("fused" keeps the stack's, resolved by step.constants.at_zero_stage)
    grads_none_after_step: bool = False
    # device synchronisations per micro-batch on the stages that load a batch (first and last, pp > 1);
    # 0: the training stack's (efficiency.runtime.batch_syncs, as a uniform plan reads it)
    batch_syncs: float = 0.0


def forward_transfer_bytes(rules: EngineRules, activation_bytes, tp: int, seq_length: int):
    """Bytes one TP rank sends forward per micro-batch at a stage boundary: the activation (whole, or 1/t
    when split over TP ranks; ``activation_bytes`` is the whole b·s·h activation) plus, for DeepSpeed's
    GPT-2 pipe model, the causal mask cast to fp16, 2·s² bytes (``attention_mask_bytes``)."""
    act = activation_bytes / tp if rules.p2p_split_over_tp else activation_bytes
    return act + (attention_mask_bytes(seq_length) if rules.sends_attention_mask else 0.0) * (
        activation_bytes > 0
    )


def backward_transfer_bytes(rules: EngineRules, activation_bytes, tp: int):
    """Bytes one TP rank sends back per micro-batch: the activation gradient, whole or 1/t."""
    return activation_bytes / tp if rules.grad_split_over_tp else activation_bytes


def attention_mask_bytes(seq_length: int) -> float:
    """2·s² bytes: Megatron-LM v1.1.5's GPT-2 pipe model passes (hidden, attention_mask) between stages,
    the mask of shape [1, 1, s, s], and DeepSpeed casts it to half before each send
    (deepspeed/runtime/pipe/engine.py, _exec_send_activations: outputs[-1].half())."""
    return 2.0 * seq_length * seq_length


def grad_accumulation_bytes(rules: EngineRules) -> float:
    """HBM bytes per parameter and micro-batch of the gradient accumulation a training stack states for the
    engine (ENGINE_STACKS: AMP's fp16 param.grad, 6 B), priced by the one rule cost.runtimes.grad_accumulation_s
    through StepInputs.grad_accumulation_bytes; 0 for "fused", where step.per_stage keeps the stack's own,
    resolved at the plan's ZeRO stage by step.constants.at_zero_stage as on a uniform plan."""
    return runtimes.GRAD_ACCUMULATION_BYTES[rules.grad_accumulation]


def grad_accumulation_first_saving_bytes(rules: EngineRules) -> float:
    """HBM bytes per parameter the step's first micro-batch saves of the accumulation a training stack
    states (grad_accumulation_bytes), s in cost.runtimes.accumulation_bytes_per_microbatch's g − s/m: the
    whole pass where the stack's optimizer leaves ``param.grad`` None after each step
    (EngineRules.grads_none_after_step: PyTorch's AccumulateGrad then takes the fresh gradient as
    ``param.grad``, no read and no add), else 0 (every micro-batch adds). AMP's: 6 B (ENGINE_STACKS)."""
    return grad_accumulation_bytes(rules) if rules.grads_none_after_step else 0.0


def host_layer_times_s(rules: EngineRules) -> tuple[float, float]:
    """(forward, backward) host seconds one transformer layer adds per micro-batch: h_f and
    host_backward_factor · h_f (see ENGINE_STACKS["amp2022"] for the value and its calibration)."""
    return rules.host_layer_forward_s, rules.host_layer_forward_s * rules.host_backward_factor


# Host (Python/framework) seconds one transformer layer adds to each micro-batch's forward on AMP's stack
# (PyTorch 1.7 eager, Megatron-LM v1.1.5 as modified in AMP's repository, which prints shapes in every
# attention and column-parallel forward, and DeepSpeed with wall_clock_breakdown on, whose timers call
# torch.cuda.synchronize() at every micro-step so the host cannot run ahead of the GPU across
# micro-batches). The backward adds host_backward_factor = 2 times as much: the backward issues a data-
# and a weight-gradient kernel for each forward GEMM, and AMP's own cost model takes backward = 2 x
# forward (src/cost_het_cluster.py: 3 * profiled forward). Calibration: fitted jointly over AMP's 90
# timed trials (both clusters) with the T4 catalog efficiencies, never per trial; bounded by component
# data: AMP's profiled single-layer forward at micro-batch 1 (src/known_cost/gpt2_{P3,G4}_1.npy: 3.9 ms
# on V100, 4.9-5.8 ms on T4) exceeds our GPU time of that layer by 2.9 ms (V100) and ~1.9 ms (T4).
# Refit 2026-11-30 with the sender's TP gather and the first micro-batch's saving priced
# (python -m paraplan.validate.hetero_refit, the four constants of AMP's trials free): 0.998 ms.
DEEPSPEED_HOST_LAYER_FORWARD_S = 1.0e-3

# Bytes of GPU memory per byte of stored activations (Korthikanti et al. 2022 counting) on AMP's stack:
# PyTorch 1.7's caching allocator keeps freed blocks and splits them (fragmentation), and Megatron-LM
# v1.1.5's unfused attention and GeLU hold transient [b, a, s, s] and [b, s, 4h] tensors beside the
# stored ones. Calibration on outcomes, not times: AMP's trials are the only memory evidence for this
# stack, and every factor in [1.5, 1.6) predicts 11 of its 15 failed trials not to run and all 90
# timed trials to fit (1.0: 4 of 15; 1.6 flags a timed trial); the lowest is kept. The 4 failures left
# are not memory by their own evidence (docs/heterogeneous.md, "Trials that could not run").
DEEPSPEED_ACTIVATION_MEMORY_FACTOR = 1.5

ENGINES = {
    # Megatron-LM: send-and-receive batched into one exchange per neighbour per micro-batch in the 1F1B
    # steady state (send_forward_recv_backward / send_backward_recv_forward), scatter/gather of the
    # activation over TP ranks (Narayanan et al. 2021 §4.1), the gradient reduction overlapped as the plan states.
    # The exchanges per neighbour and the tied all-reduce's bytes are the training stack's (0 below): one
    # batched exchange and fp32 main gradients on Megatron-Core's, as on a uniform plan of the same system.
    "megatron": EngineRules(0, True, 0.0, True),
    # DeepSpeed PipelineEngine (deepspeed/runtime/pipe/, in AMP's vendored copy and from v0.3 to
    # 0050fdad):
    # - the train schedule issues RecvActivation, SendActivation, RecvGrad and SendGrad as separate
    #   blocking instructions (p2p.send/recv are synchronous broadcasts in 2-rank groups), so two
    #   transfers with each neighbour per micro-batch (deepspeed/runtime/pipe/schedule.py TrainSchedule,
    #   deepspeed/runtime/pipe/p2p.py);
    # - with model parallelism each TP rank sends 1/t of the activation and, at 0050fdad (the DeepSpeed
    #   profiles' version: pipeline.pipe_partitioned and grad_partitioned True by default,
    #   runtime/config.py), 1/t of its gradient, as the uniform path prices every stack's exchange
    #   (step.blocks.p2p_bytes): the same rule here (True, grad_split_over_tp True), one definition for
    #   both paths. Each split tensor is rebuilt by PartitionedTensor.full() (runtime/utils.py 699-716:
    #   dist.all_gather_into_tensor over grid.get_slice_parallel_group(), the TP group), blocking on the
    #   compute stream before the compute that reads it: on the receiver once per micro-batch, its input
    #   in _exec_forward_pass (pipe/engine.py 660-667), and on the sender twice, in _exec_backward_pass,
    #   its own output partitioned after the forward (695-700; rebuilt at 752-759) and the received
    #   gradient (767-774): tp_gathers (1, 2), priced on both paths by step.p2p.pipe_tp_gathers_s (the
    #   uniform one through step.p2p.links_of, pipe_tp_gathers). AMP's copy (gradients sent whole, one
    #   gather each side) is ENGINE_STACKS["amp2022"]'s;
    # - ReduceTiedGrads and ReduceGrads run after the last backward (TrainSchedule): no overlap of
    #   the data-parallel reduction with the backward, a plan's switch checked by
    #   specs.rules_stack.engine_dp_overlap_rule (refused with pp > 1, and at zero 0 / the BF16_Optimizer's
    #   zero 1 at any depth where a pool's stack falls back, specs.rules_stack.dp_reduce_fallback, as on a uniform plan);
    # - gradients accumulate across micro-batches by the optimizer DeepSpeed runs for the dtype, ZeRO
    #   stage and gradient dtype (the BF16_Optimizer where specs.rules_stack.runs_bf16_optimizer, 18 B:
    #   cost.runtimes.bf16_optimizer_accumulation_bytes; the others' model-dtype param.grad or fp32
    #   grad_accum at ZeRO 0/1, step.constants.zero_accumulation_bytes): the stack's, resolved by
    #   step.constants.at_zero_stage as on a uniform plan (grad_accumulation "fused" below: one rule
    #   for both paths; docs/model.md, "The PipelineEngine's gradient accumulation on both paths");
    # - LoadMicroBatch before each forward on the first and last stage reads the batch's sizes back to the
    #   host: one device synchronisation per micro-batch there (cost.runtimes.batch_sync_idle_s, priced by
    #   step.constants.batch_sync_s as the uniform path prices the megatron-deepspeed profile's).
    # The gradient bytes held, the tied all-reduce's bytes, the backward TP collectives' overlap,
    # host time and activation memory are the training stack's (0 / True / 1.0 below), as on a
    # uniform plan of the same system.
    "deepspeed": EngineRules(
        int(DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE),
        True,
        0.0,
        True,
        tp_gathers=(1, 2),
        batch_syncs=DEEPSPEED_PIPE_BATCH_SYNCS,
    ),
}


# The EngineRules fields a training stack a per-stage plan states (``plan.engine_stack``, on the
# engine specs.stage_stack.STACK_ENGINES names) sets instead of its engine's: its model code, dtype
# and versions, and the constants calibrated on its runs (validate.fitted.EngineConstant). The dtype
# and parallel kinds each stack ran are specs.stage_stack.STACK_FACTS's, checked on the plan
# (specs.stage_stack.stage_engine_stack_violations): these fp16 constants are priced on fp16 plans over dp, tp, pp only.
ENGINE_STACKS = {
    # AMP's trials (DachengLi1/AMP @ 72eeea4): DeepSpeed's PipelineEngine driving Megatron-LM
    # v1.1.5's GPT-2 pipe model in fp16 on PyTorch 1.7:
    # - ReduceTiedGrads all-reduces weight.grad as it is, fp16 on a model DeepSpeed converted with
    #   module.half() (pipe/module.py allreduce_tied_weight_gradients; runtime/engine.py
    #   _configure_distributed_model): 2 B; the data-parallel buckets are flattened and cast to fp32
    #   ("fp32_allreduce": true in AMP's examples/ds_config.json; engine.py allreduce_bucket), which
    #   tail_terms' fp32 all-reduce prices;
    # - its FP16 optimizer holds fp16 gradients (2 B) and builds fp32 master gradients (4 B) at the
    #   step, beside fp16 weights, fp32 master weights and Adam moments
    #   (runtime/fp16/unfused_optimizer.py, the one DeepSpeed builds for Megatron's apex FusedAdam: see
    #   grads_none_after_step below; fused_optimizer.py holds the same): 2 + 2 + 4 + 4 + 8 = 20 B per
    #   parameter at the step
    #   (gradient_bytes 6);
    # - the forward activation is partitioned over the TP ranks (pipe/engine.py 109-110:
    #   is_pipe_partitioned = is_model_parallel, is_grad_partitioned = False) and gradients are sent
    #   whole; PartitionedTensor.full() (runtime/utils.py 445-473: a blocking dist.all_gather of the
    #   whole tensor over grid.get_slice_parallel_group(), the TP group, pipe/topology.py 346-366)
    #   rebuilds it twice per micro-batch: on the receiver, its input in _exec_forward_pass (510-517,
    #   not on the first stage), and on the sender, its own partitioned output in _exec_recv_grads
    #   (943-951: is_pipe_partitioned and not is_grad_partitioned, before the gradient is received;
    #   the last stage receives none), which _exec_backward_pass then reuses without a gather
    #   (607-612); the received gradient is whole, so no third: tp_gathers (1, 1);
    # - the GPT-2 pipe model passes (hidden, attention_mask) between stages, the [1, 1, s, s] mask
    #   cast to fp16 before each send (pipe/engine.py _exec_send_activations: outputs[-1].half()):
    #   attention_mask_bytes;
    # - Megatron-LM v1.1.5 all-reduces the input gradient of a column-parallel layer synchronously
    #   in backward (mpu/mappings.py, _CopyToModelParallelRegion.backward), inside a timer whose
    #   start and stop call torch.cuda.synchronize() (megatron/global_vars.py _Timer): nothing hides
    #   the backward TP collectives;
    # - its FP16 optimizer keeps fp16 param.grad, into which autograd's AccumulateGrad adds each
    #   micro-batch's gradient (6 B per parameter: cost.runtimes.fp16_param_grad_accumulation_bytes;
    #   AMP's pools run profiles that state none, so the stack states it here), the first micro-batch's
    #   without an add: after each step PipelineEngine._exec_optimizer_step runs _take_model_step
    #   (runtime/engine.py 1069-1087), which under fp16 calls optimizer.zero_grad() with its default
    #   set_grads_to_None=True, ``p.grad = None`` on every fp16 parameter, in the FP16 optimizer DeepSpeed
    #   builds for the Megatron client's apex FusedAdam (not DeepSpeed's FusedAdam, so
    #   _configure_fp16_optimizer 693-733 takes FP16_UnfusedOptimizer: runtime/fp16/unfused_optimizer.py
    #   103-116; megatron/training.py 25 and 300-302 in DeepSpeedExamples/Megatron-LM-v1.1.5-3D_parallelism)
    #   and in FP16_Optimizer alike (fused_optimizer.py 119-131, whose step() drops them too, 243):
    #   grads_none_after_step;
    # - host time per layer: DEEPSPEED_HOST_LAYER_FORWARD_S (fitted on AMP's trials); activation
    #   memory: DEEPSPEED_ACTIVATION_MEMORY_FACTOR (calibrated on AMP's trials' outcomes); notes
    #   there.
    "amp2022": {
        "gradient_bytes": 6.0,
        "grad_accumulation": "fp16_param_grad",
        "grads_none_after_step": True,
        "grad_split_over_tp": False,
        "tp_gathers": (1, 1),
        "async_tp_backward": False,
        "tied_grad_bytes": 2.0,
        "sends_attention_mask": True,
        "host_layer_forward_s": DEEPSPEED_HOST_LAYER_FORWARD_S,
        "activation_memory_factor": DEEPSPEED_ACTIVATION_MEMORY_FACTOR,
    },
}


def pipe_tp_gathers(engine: str) -> tuple[int, int]:
    """(receiver's, sender's) TP all-gathers per exchange of a uniform plan's pipeline runtime
    (efficiency.runtime.pipeline_engine): its ENGINES rules' tp_gathers, as a per-stage plan on that
    engine prices them (none for a runtime ENGINES does not describe)."""
    rules = ENGINES.get(engine)
    return (0, 0) if rules is None else rules.tp_gathers


def engine_rules_of(engine: str, stack: str | None = None) -> EngineRules:
    """The rules a per-stage plan runs between and after micro-batches: its ``engine``'s (ENGINES),
    with those of the training stack it states (``stack``: plan.engine_stack, ENGINE_STACKS) in
    their place; the one reading of both (step.stage_links.Common.rules, validate.fitted,
    validate.cv)."""
    rules = ENGINES[engine]
    return rules if stack is None else replace(rules, **ENGINE_STACKS[stack])
