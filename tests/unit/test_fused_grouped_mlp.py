"""Transformer Engine's fused grouped MLP (specs.runtime moe_fused_grouped_mlp, graph.moe_mlp.fuses_grouped_mlp)
against hand-computed values: the passes it removes and the bytes it stops keeping."""

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.graph.moe import ExpertShape, moe_model_layer
from paraplan.graph.moe_mlp import moe_mlp_activation_bytes
from paraplan.graph.transformer import LayerShape
from paraplan.step.constants import stack_shape_fields

# one micro-batch of 4096 tokens, no TP / CP: gpt-oss-120b over EP 64, balanced, routes 4096 x top-4 = 16384
# rows to each rank (2 local experts); Qwen3-30B-A3B over EP 8 4096 x top-8 = 32768 rows (16 local experts)
FP8 = LayerShape(1, 1, 1, 4096, False, "flash", "fp8")
FUSED = FP8._replace(fused_grouped_mlp=True)
GPT_OSS = ExpertShape(ep=64, balance="forced")
QWEN = ExpertShape(ep=8, balance="forced")


def _ops(model: str, shape: LayerShape, expert: ExpertShape) -> dict:
    return {
        op.name: op
        for op in moe_model_layer(load_model(model), shape._replace(expert=expert), True).ops
    }


def test_fused_grouped_mlp_drops_the_clamp_the_sync_and_the_activation_by_hand():
    unfused = _ops("gpt-oss-120b", FP8, GPT_OSS)
    fused = _ops("gpt-oss-120b", FUSED, GPT_OSS)
    gone = {"expert_glu_clamp", "activation_host_sync", "expert_activation"}
    assert gone <= set(unfused)
    assert not gone & set(fused)
    # the GEMMs are the same
    assert fused["expert_fc1"] == unfused["expert_fc1"]
    assert fused["expert_fc2"] == unfused["expert_fc2"]
    # bias: 6 bf16 passes over 16384 x 2880 each way unfused; fused, none forward and one read of the fc2
    # output gradient backward (TE's grouped dbias / dscales kernel): 2 B x 16384 x 2880
    assert unfused["expert_output_bias"].fwd_bytes == 6 * 2 * 16384 * 2880
    bias = fused["expert_output_bias"]
    assert (bias.fwd_bytes, bias.bwd_bytes) == (0.0, 2 * 16384 * 2880)


def test_fused_grouped_mlp_needs_a_block_scaled_plan():
    # a bf16 plan under the same stack runs TEGroupedMLP unfused (TE fuses only under an mxfp8 / nvfp4 recipe)
    bf16 = FP8._replace(dtype="bf16")
    assert _ops("qwen3-30b-a3b", bf16._replace(fused_grouped_mlp=True), QWEN) == _ops(
        "qwen3-30b-a3b", bf16, QWEN
    )
    # Qwen3 (SwiGLU, no clamp, no bias): only the activation pass goes, 3 x 2 B x 32768 rows x 768 forward
    unfused = _ops("qwen3-30b-a3b", FP8, QWEN)
    fused = _ops("qwen3-30b-a3b", FUSED, QWEN)
    assert set(unfused) - set(fused) == {"expert_activation"}
    assert unfused["expert_activation"].fwd_bytes == 3 * 2 * 32768 * 768


def test_fused_grouped_mlp_keeps_no_clamped_copy_by_hand():
    # the fused op saves the fc1 output, not a clamped copy beside it: 16384 rows x 5760 x 2 B less
    m = load_model("gpt-oss-120b")
    unfused = moe_mlp_activation_bytes(m, FP8, GPT_OSS, ())
    fused = moe_mlp_activation_bytes(m, FUSED, GPT_OSS, ())
    assert unfused - fused == 16384 * 5760 * 2


def test_the_profile_sets_it_only_under_a_block_scaled_recipe():
    framework = load_framework("megatron-bridge-26.08-mxfp8")
    system = framework_system(framework, load_system("gb300-nvl72"))
    assert stack_shape_fields(system)["fused_grouped_mlp"] is True
    delayed = framework_system(
        framework.model_copy(update={"fp8_recipe": "delayed"}), load_system("gb300-nvl72")
    )
    assert stack_shape_fields(delayed)["fused_grouped_mlp"] is False
    # the profiles before 26.08 leave it off
    older = framework_system(
        load_framework("megatron-bridge-25.11-mxfp8"), load_system("gb300-nvl72")
    )
    assert stack_shape_fields(older)["fused_grouped_mlp"] is False
    assert (
        stack_shape_fields(system)["hybridep_budget"],
        stack_shape_fields(older)["hybridep_budget"],
    ) == (
        True,
        False,
    )


def test_a_hybridep_budget_with_the_fused_mlp_needs_no_host_sync():
    # Megatron-Core's HybridEP dispatch sized to moe_expert_rank_capacity_factor's static budget runs
    # non-blocking, and the op-fuser MLP keeps the per-expert counts on the device: no dispatch_host_sync.
    # Without the budget, without the fused MLP (tokens_per_expert.tolist()) or with another dispatcher the
    # dropless dispatch still synchronises.
    hybridep = QWEN._replace(dispatcher="hybridep")
    budget = FUSED._replace(hybridep_budget=True)
    assert "dispatch_host_sync" not in _ops("qwen3-30b-a3b", budget, hybridep)
    for shape, expert in (
        (FUSED, hybridep),
        (FP8._replace(hybridep_budget=True), hybridep),
        (budget, QWEN),
        (budget._replace(dtype="bf16"), hybridep),
    ):
        assert "dispatch_host_sync" in _ops("qwen3-30b-a3b", shape, expert)
    # the rest of the layer is unchanged
    synced = _ops("qwen3-30b-a3b", FUSED, hybridep)
    del synced["dispatch_host_sync"]
    assert synced == _ops("qwen3-30b-a3b", budget, hybridep)
