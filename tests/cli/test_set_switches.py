"""``estimate --set`` and ``search --set`` take the system's switches and choices (issue 33): NCCL CollNet / SHARP
(``network.collnet_enabled``), the run-wide runtime mechanisms of ``accelerator.efficiency.runtime`` (gradient-reduce
dtype, fp8 recipe, optimizer-state precision, ...) and the CUDA-graph scope, one value each, checked in one line; and
in a search with a framework profile the --set values win over the profile's, as in estimate."""

from __future__ import annotations

import json
import math

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.specs.errors import InputError
from paraplan.sweep.params import apply_overrides, choice_fields, override_values, parse_set


def test_switches_and_choices_are_settable_for_estimate_and_search_only():
    fields = choice_fields()
    assert fields["network.collnet_enabled"] == (False, True)
    assert fields["accelerator.efficiency.runtime.grad_reduce_dtype"] == ("kept", "compute")
    assert "mxfp8" in fields["accelerator.efficiency.runtime.fp8_recipe"]
    assert "bf16_moments" in fields["accelerator.efficiency.runtime.optimizer_state"]
    assert fields["accelerator.efficiency.compiled_graphs"] == ("none", "model", "layer")
    assert "accelerator.architecture" not in fields
    assert "accelerator.efficiency.attention_kernel" not in fields
    axis = parse_set("network.collnet_enabled=TRUE", choices=True)
    values = override_values([axis], axis.values)
    assert values == {"network.collnet_enabled": True}
    _, system = apply_overrides(load_model("llama3-8b"), load_system("dgx-h100-80gb"), values)
    assert system.network.collnet_enabled is True
    scope = parse_set("accelerator.efficiency.cuda_graph_scope=attn+moe_router", choices=True)
    assert override_values([scope], scope.values) == {
        "accelerator.efficiency.cuda_graph_scope": ("attn", "moe_router")
    }
    with pytest.raises(InputError, match="not a numeric field"):  # a sweep's axes stay numeric
        parse_set("network.collnet_enabled=true,false")


@pytest.mark.parametrize(
    "text, says",
    [
        ("network.collnet_enabled=maybe", "'maybe' is not allowed; allowed: false, true"),
        ("network.collnet_enabled=1", "'1' is not allowed; allowed: false, true"),
        (
            "accelerator.efficiency.runtime.fp8_recipe=mxfp4",
            "'mxfp4' is not allowed; allowed: delayed, current, blockwise, mxfp8, nvfp4",
        ),
        ("accelerator.architecture=ampere", "not settable; the part's generation"),
        ("accelerator.efficiency.attention_kernel=fa3", "not settable; the attention fraction"),
        ("network.collnet_enabled=", "no value given; allowed: false, true"),
        (
            "accelerator.efficiency.cuda_graph_scope=attn+attn",
            "allowed: none, attention, layer, full_iteration, NAME+NAME+... of attn, mlp, moe,",
        ),
    ],
)
def test_a_bad_switch_or_choice_is_one_line(text, says):
    with pytest.raises(InputError) as info:
        parse_set(text, choices=True)
    message = str(info.value)
    assert message.startswith(f"--set {text.partition('=')[0]}: ") and says in message
    assert "\n" not in message


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from paraplan.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code or 0, out, err


def _step(capsys, *argv: str) -> float:
    code, out, err = _cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)["step_time_s"]


ESTIMATE = (
    "estimate -m llama3-70b -s dgx-h100-80gb --gpus 64 --tp 8 --global-batch 64 --seq-length 4096 "
    "--zero 1 --recompute full --sequence-parallel"
).split()


DP_ESTIMATE = (
    "estimate -m llama3-8b -s dgx-h100-80gb --gpus 64 --tp 2 --global-batch 64 --seq-length 4096 "
    "--recompute full --sequence-parallel"
).split()


def test_sharp_and_nvls_set_as_a_profile_sets_them(capsys, tmp_path):
    """--set network.collnet_enabled=true is NCCL_COLLNET_ENABLE=1 (a profile's nccl_collnet_enable), and
    --set node.nvls_efficiency=0 is NCCL_NVLS_ENABLE=0 (a profile's nccl_nvls_enable false): the same step each; SHARP
    over 8 nodes shortens the data-parallel gradient all-reduce (ZeRO 0, dp 32; cost.collnet)."""
    plain = _step(capsys, *DP_ESTIMATE, "--framework", "megatron-core")
    sharp = _step(
        capsys,
        *DP_ESTIMATE,
        "--framework",
        "megatron-core",
        "--set",
        "network.collnet_enabled=true",
    )
    profile = tmp_path / "sharp.json"
    profile.write_text(
        json.dumps({"name": "mc-sharp", "base": "megatron-core", "nccl_collnet_enable": True})
    )
    assert sharp < plain
    assert sharp == _step(capsys, *DP_ESTIMATE, "--framework", str(profile))
    no_nvls = _step(
        capsys, *DP_ESTIMATE, "--framework", "megatron-core", "--set", "node.nvls_efficiency=0"
    )
    assert no_nvls > plain  # the NVLink tier of the all-reduce without NVLink SHARP
    profile.write_text(
        json.dumps({"name": "mc-no-nvls", "base": "megatron-core", "nccl_nvls_enable": False})
    )
    assert no_nvls == _step(capsys, *DP_ESTIMATE, "--framework", str(profile))


def test_runtime_choices_reach_the_estimate(capsys):
    """The gradient-reduce dtype of the runtime (compute: bf16 reduce) halves the DP traffic: a faster step."""
    kept = _step(capsys, *ESTIMATE, "--framework", "megatron-core")
    compute = _step(
        capsys,
        *ESTIMATE,
        "--framework",
        "megatron-core",
        "--set",
        "accelerator.efficiency.runtime.grad_reduce_dtype=compute",
    )
    assert compute < kept


SEARCH = (
    "search -m llama3-70b -s dgx-h100-80gb --gpus 64 --global-batch 64 --seq-length 4096 --tp 8 --pp 1,2 "
    "--micro-batch 1 --recompute full --zero 1 --no-offload --default-placement --default-overlap --top 1"
).split()


# a small search whose profiles reserve allocator fragmentation as a share of HBM (llm-foundry, torchtitan,
# hf-transformers, maxtext): the search's memory headroom scales the capacity only (search.setup.search_specs)
SMALL_SEARCH = (
    "search -m llama2-7b -s dgx-h100-80gb --gpus 8 --global-batch 64 --seq-length 2048 --tp 1,2 --pp 1,2 "
    "--top 3"
).split()


@pytest.mark.parametrize(
    "argv, framework, sets",
    [
        (SEARCH, "megatron-core", ["network.collnet_enabled=true"]),
        (SEARCH, "megatron-core", ["accelerator.efficiency.runtime.grad_reduce_dtype=compute"]),
        # the profile turns NVLS off (NCCL_NVLS_ENABLE=0); --set turns it back on, as in estimate
        (SEARCH, "megatron-bridge-25.11", ["node.nvls_efficiency=0.85"]),
        (SMALL_SEARCH, "llm-foundry", []),
        (SMALL_SEARCH, "torchtitan", []),
        (SMALL_SEARCH, "hf-transformers", []),
        (SMALL_SEARCH, "maxtext", []),
        (SMALL_SEARCH, None, []),
        # --set wins over the profile's reserve, and a set capacity is the one the headroom scales
        (SMALL_SEARCH, "llm-foundry", ["accelerator.reserved_memory=6GiB"]),
        (SMALL_SEARCH, "torchtitan", ["accelerator.hbm_capacity=96GiB"]),
    ],
)
def test_search_rows_with_a_profile_and_set_reestimate_identically(
    capsys, tmp_path, argv, framework, sets
):
    """Every row of ``search --json`` re-estimates (``estimate --plan FILE#i --json`` with the same
    --framework and --set) to the row's step time and peak memory (issue 31: one number)."""
    options = [a for s in sets for a in ("--set", s)]
    options += ["--framework", framework] if framework else []
    code, out, err = _cli(capsys, *argv, *options, "--json")
    assert code == 0, err
    rows = json.loads(out)["plans"]
    assert rows
    path = tmp_path / "search.json"
    path.write_text(out)
    for i, row in enumerate(rows, start=1):
        code, again, err = _cli(capsys, "estimate", "--plan", f"{path}#{i}", *options, "--json")
        assert code == 0, err
        again = json.loads(again)
        assert math.isclose(again["step_time_s"], row["step_time_s"], rel_tol=1e-12), i
        assert math.isclose(again["memory"]["peak_gib"], row["peak_memory_gib"], rel_tol=1e-12), i


MOE_ESTIMATE = "estimate -m qwen3-30b-a3b -s dgx-b200 --gpus 8 --ep 8 --global-batch 8".split()


@pytest.mark.parametrize("scope", [["attn", "moe_router"], "full_iteration"])
def test_cuda_graph_scope_set_as_a_profile_sets_it(capsys, tmp_path, scope):
    """--set accelerator.efficiency.cuda_graph_scope=WORD or NAME+NAME is the profile's cuda_graph_scope."""
    profile = tmp_path / "graphs.json"
    profile.write_text(
        json.dumps({"name": "mc-graphs", "base": "megatron-core", "cuda_graph_scope": scope})
    )
    text = "+".join(scope) if isinstance(scope, list) else scope
    by_set = _step(
        capsys,
        *MOE_ESTIMATE,
        "--framework",
        "megatron-core",
        "--set",
        f"accelerator.efficiency.cuda_graph_scope={text}",
    )
    assert by_set == _step(capsys, *MOE_ESTIMATE, "--framework", str(profile))


FP8_ESTIMATE = (
    "estimate -m llama3-8b -s dgx-b200 --gpus 8 --global-batch 16 --seq-length 4096 --zero 1 --dtype fp8"
).split()


@pytest.mark.parametrize(
    "field, value",
    [
        ("optimizer_state", "bf16_moments"),
        ("grad_reduce_dtype", "compute"),
        ("fp8_recipe", "mxfp8"),
        ("fp8_param_gather", True),
    ],
)
def test_runtime_choices_set_as_a_profile_states_them(capsys, tmp_path, field, value):
    """A runtime mechanism given by --set prices as a profile stating it (cost.runtimes.runtime_costs keeps the
    profile's StackRuntimeFields as they are), and changes the step or its memory."""
    profile = tmp_path / "runtime.json"
    profile.write_text(json.dumps({"name": "mc-rt", "base": "megatron-core", field: value}))
    text = str(value).lower() if isinstance(value, bool) else value
    set_args = ("--set", f"accelerator.efficiency.runtime.{field}={text}")
    code, out, err = _cli(
        capsys, *FP8_ESTIMATE, "--framework", "megatron-core", *set_args, "--json"
    )
    assert code in (0, 1), err
    by_set = json.loads(out)
    code, out, err = _cli(capsys, *FP8_ESTIMATE, "--framework", str(profile), "--json")
    by_profile = json.loads(out)
    code, out, err = _cli(capsys, *FP8_ESTIMATE, "--framework", "megatron-core", "--json")
    plain = json.loads(out)
    assert by_set["step_time_s"] == by_profile["step_time_s"]
    assert by_set["memory"] == by_profile["memory"]
    assert (by_set["step_time_s"], by_set["memory"]) != (plain["step_time_s"], plain["memory"])


def test_fused_loss_set_as_a_profile_states_it(capsys, tmp_path):
    """--set accelerator.efficiency.module_impl.loss=NAME changes one role of the profile's module_impl (the fused
    loss or an eager composite, specs.system.MODULE_IMPLS): as a profile stating that role."""
    impl = {"norm": "torchtitan-rmsnorm", "rotary": "torchtitan-complex", "loss": "fp32-logits"}
    profile = tmp_path / "loss.json"
    profile.write_text(json.dumps({"name": "tt-loss", "base": "torchtitan", "module_impl": impl}))
    argv = "estimate -m llama3-8b -s dgx-h100-80gb --gpus 8 --global-batch 8 --zero 3".split()
    code, out, err = _cli(capsys, *argv, "--framework", str(profile), "--json")
    by_profile = json.loads(out)
    code, out, err = _cli(
        capsys,
        *argv,
        "--framework",
        "torchtitan",
        "--set",
        "accelerator.efficiency.module_impl.loss=fp32-logits",
        "--json",
    )
    by_set = json.loads(out)
    assert by_set["step_time_s"] == by_profile["step_time_s"]
    assert by_set["memory"] == by_profile["memory"]
    with pytest.raises(InputError, match="allowed: fused, fp32-logits, dtensor-loss-parallel"):
        parse_set("accelerator.efficiency.module_impl.loss=chunked", choices=True)


STATE_ESTIMATE = "estimate -m llama2-7b -s dgx-h100-80gb --gpus 8 --global-batch 8 --zero 1".split()
STATE_SEARCH = (
    "search -m llama2-7b -s dgx-h100-80gb --gpus 8 --global-batch 8 --tp 1 --pp 1 --cp 1 --micro-batch 1 "
    "--recompute none --zero 1 --no-offload --default-placement --default-overlap --top 1"
).split()


@pytest.mark.parametrize("state", choice_fields()["accelerator.efficiency.runtime.optimizer_state"])
def test_every_optimizer_state_sets_through_estimate_and_search(capsys, state):
    """Each optimizer-state precision by --set runs in estimate and search (one with no step bytes of its own,
    cost.frameworks.state_step_bytes None, keeps the system's: cost.frameworks.put_step_bytes), and the search's
    row re-estimates to the same step."""
    set_args = ("--set", f"accelerator.efficiency.runtime.optimizer_state={state}")
    step = _step(capsys, *STATE_ESTIMATE, *set_args)
    code, out, err = _cli(capsys, *STATE_SEARCH, *set_args, "--json")
    assert code == 0, err
    assert math.isclose(json.loads(out)["plans"][0]["step_time_s"], step, rel_tol=1e-12)
