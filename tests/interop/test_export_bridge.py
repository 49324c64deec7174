"""Megatron-Bridge v0.2.0 exports (issue 34): ConfigContainer overrides whose every field is in the kept
list, checked against facts from Megatron-Bridge's and its pinned Megatron-LM's source; refusals by name;
import back as the same plan with the same step time."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cli import main
from paraplan.export import ExportRefused, detect_framework, export_plan, import_plan
from paraplan.export.common import canonical_plan
from paraplan.export.megatron_core import written_plan
from paraplan.export.startup import failed_key_checks
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

BRIDGE = "megatron-bridge"
GPT = load_model("gpt3-1.3b")
DSV3 = load_model("deepseek-v3")


def failed(given: dict, **context) -> list[str]:
    return [c["id"] for c in failed_key_checks(BRIDGE, given, {}, context)]


def fields(text: str) -> dict[str, str]:
    """{path: value text} of the cfg.<path> = <value> lines, read independently of the exporter."""
    return dict(re.findall(r"^cfg\.([\w.]+) = (.+)$", text, flags=re.M))


def round_trip(plan: PlanSpec, model) -> PlanSpec:
    text = export_plan(BRIDGE, plan, model)
    back = PlanSpec(**import_plan(BRIDGE, text))
    assert canonical_plan(back) == canonical_plan(written_plan(plan, model)), text
    return back


def test_the_checks_decide_what_megatron_bridge_validate_does():
    m = "model."
    assert failed({m + "tensor_model_parallel_size": 8}, world_size=12) == [
        "world-size-divides-model-parallel"
    ]
    assert failed({m + "context_parallel_size": 2, m + "seq_length": 4098}, world_size=8) == [
        "seq-length-divides-twice-cp",
        "model-and-dataset-seq-length",
    ]
    fsdp = {"ddp.use_megatron_fsdp": True, "dist.use_tp_pp_dp_mapping": True}
    assert failed(fsdp, world_size=8) == [
        "megatron-fsdp-without-tp-pp-dp-mapping",
        "megatron-fsdp-checkpoint-format",
    ]
    ok = {**fsdp, "dist.use_tp_pp_dp_mapping": False, "checkpoint.ckpt_format": "fsdp_dtensor"}
    assert failed(ok, world_size=8) == []
    flex = {m + "moe_token_dispatcher_type": "flex", m + "moe_pad_expert_input_to_capacity": True}
    assert failed({**flex, m + "moe_expert_capacity_factor": 1.0}, world_size=8) == [
        "deepep-without-capacity-padding"  # the backend's default is deepep
    ]
    hybrid = {
        **flex,
        m + "moe_expert_capacity_factor": 1.0,
        m + "moe_flex_dispatcher_backend": "hybridep",
    }
    assert failed(hybrid, world_size=8) == []


@pytest.mark.parametrize(
    "fields_, message",
    [
        ({"dtype": "fp32"}, r"^plan\.dtype='fp32' cannot be expressed in Megatron-Bridge v0\.2\.0"),
        (
            {"tp": 2, "overlap_tp_comm": True},
            r"^plan\.overlap_tp_comm=True cannot start in Megatron-Bridge .*tp-overlap-needs-tp-and",
        ),
        ({"tp": 2, "pp": 2, "zero": 2}, r"^plan\.zero=2 cannot be expressed in Megatron-Bridge"),
        (
            {"offload_weights": True},
            r"^plan\.offload_weights=True cannot be expressed in Megatron-Bridge",
        ),
    ],
)
def test_a_plan_megatron_bridge_cannot_run_is_refused_by_name(fields_, message):
    plan = PlanSpec(gpus=8, micro_batch=1, global_batch=32, seq_length=2048, **fields_)
    with pytest.raises(ExportRefused, match=message):
        export_plan(BRIDGE, plan, GPT)


def test_a_dense_plan_writes_the_bridge_fields_and_round_trips():
    plan = PlanSpec(
        gpus=16, tp=2, pp=2, vpp=3, cp=2, micro_batch=2, global_batch=64, seq_length=4096,
        sequence_parallel=True, overlap_tp_comm=True, recompute="selective", zero=1,
        grad_dtype="bf16", schedule="interleaved",
    )  # fmt: skip
    text = export_plan(BRIDGE, plan, load_model("llama3-8b"))
    f = fields(text)
    assert f["model.tensor_model_parallel_size"] == "2" and f["model.context_parallel_size"] == "2"
    assert f["model.virtual_pipeline_model_parallel_size"] == "3"
    assert f["train.micro_batch_size"] == "2" and f["train.global_batch_size"] == "64"
    assert f["dataset.sequence_length"] == f["model.seq_length"] == "4096"
    assert f["mixed_precision"] == "get_mixed_precision_config('bf16_mixed')"
    assert f["mixed_precision.grad_reduce_in_fp32"] == "False"
    assert f["comm_overlap"] == "CommOverlapConfig(tp_comm_overlap=True)"
    assert "# launch: torchrun --nnodes=2 --nproc-per-node=8 " in text
    assert re.search(
        r'env_vars\["CUDA_DEVICE_MAX_CONNECTIONS"\] = "1"  # NVIDIA-NeMo/Megatron-Bridge@v0\.2\.0',
        text,
    )
    assert detect_framework(__import__("pathlib").Path("x.py"), text) == BRIDGE
    round_trip(plan, load_model("llama3-8b"))


def test_fp8_and_megatron_fsdp_round_trip():
    fp8 = PlanSpec(gpus=8, tp=2, micro_batch=1, global_batch=32, seq_length=2048, dtype="fp8",
                   fp8_weight_copies=False, zero=1)  # fmt: skip
    f = fields(export_plan(BRIDGE, fp8, GPT))
    assert (
        f["mixed_precision"] == "get_mixed_precision_config('bf16_with_fp8_delayed_scaling_mixed')"
    )
    assert f["mixed_precision.fp8_param_gather"] == "True"
    round_trip(fp8, GPT)
    fsdp = PlanSpec(gpus=8, micro_batch=1, global_batch=32, seq_length=2048, zero=3)
    f = fields(export_plan(BRIDGE, fsdp, GPT))
    assert f["ddp.use_megatron_fsdp"] == "True" and f["checkpoint.ckpt_format"] == "'fsdp_dtensor'"
    assert f["ddp.data_parallel_sharding_strategy"] == "'optim_grads_params'"
    round_trip(fsdp, GPT)


@pytest.mark.parametrize(
    "fp8_recipe, recipe",
    [
        (None, "bf16_with_fp8_delayed_scaling_mixed"),
        ("none", "bf16_with_fp8_delayed_scaling_mixed"),
        ("delayed", "bf16_with_fp8_delayed_scaling_mixed"),
        ("current", "bf16_with_fp8_current_scaling_mixed"),
        ("mxfp8", "bf16_with_mxfp8_mixed"),
        ("blockwise", "bf16_with_fp8_subchannel_scaling_mixed"),
        ("nvfp4", "bf16_with_nvfp4_mixed"),
    ],
)
def test_an_fp8_plan_trains_its_profiles_recipe_and_reads_back_as_fp8(fp8_recipe, recipe):
    copies = fp8_recipe in ("blockwise", "nvfp4")  # recipes without fp8 primary weights
    fp8 = PlanSpec(gpus=8, tp=2, micro_batch=1, global_batch=32, seq_length=2048, dtype="fp8",
                   fp8_weight_copies=copies)  # fmt: skip
    text = export_plan(BRIDGE, fp8, GPT, fp8_recipe=fp8_recipe)
    assert fields(text)["mixed_precision"] == f"get_mixed_precision_config({recipe!r})"
    known = fp8_recipe not in (None, "none")
    assert ("# fp8 recipe: delayed scaling (default" in text) is not known, text
    assert PlanSpec(**import_plan(BRIDGE, text)).dtype == "fp8"
    bf16 = PlanSpec(gpus=8, tp=2, micro_batch=1, global_batch=32, seq_length=2048)
    bf16_text = export_plan(BRIDGE, bf16, GPT, fp8_recipe=fp8_recipe)
    assert fields(bf16_text)["mixed_precision"] == "get_mixed_precision_config('bf16_mixed')"
    assert "# fp8 recipe" not in bf16_text


def test_deepseek_v3_deepep_is_the_flex_dispatcher_with_its_backend():
    """moe_enable_deepep is deprecated at the pinned Megatron-LM (transformer_config.py:917-922): DeepEP is
    moe_token_dispatcher_type flex with moe_flex_dispatcher_backend deepep; the model's experts, MLA and
    MTP are written on cfg.model."""
    plan = PlanSpec(gpus=2048, pp=16, ep=64, micro_batch=1, global_batch=15360, seq_length=4096,
                    dtype="fp8", zero=1, moe_dispatcher="deepep", moe_a2a_overlap=True, vpp=2,
                    recompute="selective", layers_first_stage=4, layers_last_stage=1)  # fmt: skip
    text = export_plan(BRIDGE, plan, DSV3)
    f = fields(text)
    assert f["model.moe_token_dispatcher_type"] == "'flex'"
    assert f["model.moe_flex_dispatcher_backend"] == "'deepep'"
    assert "moe_enable_deepep" not in text
    assert f["model.num_moe_experts"] == "256" and f["model.multi_latent_attention"] == "True"
    assert f["model.mtp_num_layers"] == "1"
    assert (
        f["comm_overlap"]
        == "CommOverlapConfig(overlap_moe_expert_parallel_comm=True, tp_comm_overlap=False)"
    )
    assert 'env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"' in text
    back = round_trip(plan, DSV3)
    assert back.moe_dispatcher == "deepep" and back.moe_a2a_overlap


def test_hybridep_is_the_flex_dispatcher_with_the_hybridep_backend():
    """Megatron-LM 0d8e0714 (the pin): moe_flex_dispatcher_backend takes "deepep" or "hybridep"
    (transformer_config.py line 603); a hybridep plan writes flex + hybridep, may pad to capacity
    (only the deepep backend refuses it), and reads back as hybridep."""
    plan = PlanSpec(gpus=64, ep=8, micro_batch=1, global_batch=64, seq_length=4096, dtype="bf16",
                    moe_dispatcher="hybridep", capacity_factor=1.0)  # fmt: skip
    text = export_plan(BRIDGE, plan, DSV3)
    f = fields(text)
    assert f["model.moe_token_dispatcher_type"] == "'flex'"
    assert f["model.moe_flex_dispatcher_backend"] == "'hybridep'"
    assert "moe_enable_deepep" not in text
    back = round_trip(plan, DSV3)
    assert back.moe_dispatcher == "hybridep" and back.capacity_factor == 1.0


@pytest.mark.parametrize(
    "edit, message",
    [
        (("'deepep'", "'ncclep'"), "moe_flex_dispatcher_backend 'ncclep' has no plan field"),
        (
            ("bf16_with_fp8_delayed_scaling_mixed", "fp16_with_fp8_delayed_scaling_mixed"),
            "mixed_precision 'fp16_with_fp8_delayed_scaling_mixed'",
        ),
        (
            ("cfg.model.seq_length", "cfg.model.seq_len"),
            "cfg.model.seq_len is not a known Megatron-Bridge v0.2.0 field",
        ),
        (("# launch: torchrun", "# torchrun"), "launch: torchrun --nnodes=N"),
        (("CommOverlapConfig(", "dict("), "is not CommOverlapConfig"),
    ],
)
def test_an_import_without_a_plan_field_is_refused_by_name(edit, message):
    plan = PlanSpec(gpus=64, ep=8, micro_batch=1, global_batch=64, seq_length=4096, dtype="fp8",
                    moe_dispatcher="deepep")  # fmt: skip
    text = export_plan(BRIDGE, plan, load_model("mixtral-8x7b")).replace(*edit)
    with pytest.raises(ExportRefused, match=re.escape(message)):
        import_plan(BRIDGE, text)


def _cli(*args: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exc:
        main(list(args))
    assert (exc.value.code or 0) == 0, buf.getvalue()
    return buf.getvalue()


def test_search_export_import_estimate_gives_the_same_step_time(tmp_path):
    search = tmp_path / "best.json"
    search.write_text(_cli("search", "-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "16",
                           "--global-batch", "64", "--seq-length", "2048", "--framework",
                           "megatron-bridge-25.11", "--top", "2", "--json"))  # fmt: skip
    row = json.loads(search.read_text())["plans"][0]
    assert BRIDGE in row["frameworks"]
    _cli("export", f"{search}#1", "--to", "all", "-o", str(tmp_path / "out"))
    written = tmp_path / "out" / "plan-megatron-bridge.py"
    back = json.loads(_cli("import", "plan", str(written)))
    assert back["plan"]["tp"] == row["plan"]["tp"] and back["plan"]["pp"] == row["plan"]["pp"]
    est = json.loads(_cli("estimate", "--plan", str(written), "-m", "gpt3-1.3b", "-s",
                          "dgx-a100-80gb", "--framework", "megatron-bridge-25.11", "--json"))  # fmt: skip
    assert est["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
    system = load_system("dgx-a100-80gb")
    assert estimate(GPT, system, PlanSpec(**back["plan"])).step_time_s > 0


@pytest.mark.parametrize(
    "system, profile, recipe",
    [
        ("dgx-h100-80gb", "megatron-bridge-25.11", "bf16_with_fp8_current_scaling_mixed"),
        ("dgx-b200", "megatron-bridge-25.11-mxfp8", "bf16_with_mxfp8_mixed"),
    ],
)
def test_a_searched_fp8_plan_exports_the_recipe_it_was_priced_with(
    tmp_path, system, profile, recipe
):
    search = tmp_path / "fp8.json"
    search.write_text(_cli("search", "-m", "gpt3-1.3b", "-s", system, "--gpus", "16",
                           "--global-batch", "64", "--seq-length", "2048", "--framework", profile,
                           "--dtype", "fp8", "--top", "1", "--json"))  # fmt: skip
    row = json.loads(search.read_text())["plans"][0]
    assert row["plan"]["dtype"] == "fp8"
    written = tmp_path / "plan.py"
    _cli("export", f"{search}#1", "--to", BRIDGE, "-o", str(written))
    assert (
        fields(written.read_text())["mixed_precision"] == f"get_mixed_precision_config({recipe!r})"
    )
    back = json.loads(_cli("import", "plan", str(written)))["plan"]
    assert back["dtype"] == "fp8" and back["tp"] == row["plan"]["tp"]
    # an explicit --framework overrides the search's profile; delayed scaling for megatron-core
    text = _cli("export", f"{search}#1", "--to", BRIDGE, "--framework", "megatron-core")
    assert "get_mixed_precision_config('bf16_with_fp8_delayed_scaling_mixed')" in text
