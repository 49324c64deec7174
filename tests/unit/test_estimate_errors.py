"""check_plan rejects broken plans with one line naming the field, the value and the rule."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import check_plan, estimate
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec

GPT = load_model("gpt3-1.3b")  # 24 layers, 16 heads, ffn 8192
LLAMA = load_model("llama3-8b")  # 32 layers, 32 heads, 8 kv heads
A100 = load_system("dgx-a100-80gb")


def _no_host(system: SystemSpec) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"]["host_bandwidth"] = None
    data["accelerator"]["host_memory"] = None
    return SystemSpec.model_validate(data)


def raises(model, system, **fields) -> InputError:
    fields.setdefault("seq_length", 2048)
    with pytest.raises(InputError) as info:
        check_plan(model, system, PlanSpec(**fields))
    message = str(info.value)
    assert "\n" not in message and message.strip() == message and message
    return info.value


@pytest.mark.parametrize(
    "model, fields, field, value",
    [
        # 16 heads, tp 3 (also breaks ffn 8192 % 3: reported as "and 1 more")
        (GPT, dict(gpus=3, tp=3, global_batch=8), "plan.tp", 3),
        # 32 heads, tp 12
        (LLAMA, dict(gpus=12, tp=12, global_batch=8), "plan.tp", 12),
        # 24 layers, pp 32: more stages than layers (uneven splits such as pp 5 are allowed)
        (GPT, dict(gpus=32, pp=32, global_batch=64), "plan.pp", 32),
        # interleaving needs a pipeline (24 layers over pp 4 × vpp 4 is valid: a layout of 1- and 2-layer chunks)
        (GPT, dict(gpus=4, pp=1, vpp=4, global_batch=16), "plan.vpp", 4),
        # dp 4 x micro_batch 2 = 8 does not divide 12
        (GPT, dict(gpus=4, micro_batch=2, global_batch=12), "plan.global_batch", 12),
        # explicit dp: 2*1*3*1 = 6 != 8 GPUs; tp divides 8, so dp is blamed
        (GPT, dict(gpus=8, tp=2, dp=3, global_batch=6), "plan.dp", 3),
        # dp inferred: 10 GPUs not divisible by tp 4: tp is blamed (issue 12: --tp 16 --gpus 8 is about tp)
        (GPT, dict(gpus=10, tp=4, global_batch=8), "plan.tp", 4),
        # interleaved, pp 4, 6 micro-batches (global 12 / dp 2)
        (GPT, dict(gpus=8, pp=4, vpp=2, global_batch=12), "plan.global_batch", 12),
    ],
)
def test_plan_rule_violations(model, fields, field, value):
    err = raises(model, A100, **fields)
    message = str(err)
    assert message.startswith(f"{field}: {value!r} ")
    assert err.violations[0].field == field and err.violations[0].value == value


def test_two_violations_are_one_line():
    err = raises(GPT, A100, gpus=3, tp=3, global_batch=8)
    assert len(err.violations) == 2  # heads and ffn_hidden
    assert (
        str(err)
        == "plan.tp: 3 is not allowed; must divide heads=16 and must divide ffn_hidden=8192"
    )


def test_offload_without_host_bandwidth():
    for flag in ("offload_optimizer", "offload_activations", "offload_weights"):
        err = raises(GPT, _no_host(A100), gpus=8, global_batch=8, **{flag: True})
        assert str(err).startswith("plan.offload: ")
        assert "host_bandwidth" in str(err)


def test_offload_needs_host_memory_too():
    """A host link without host memory to hold the state offloads nothing: the estimator refuses it and
    the search offers no offload (both ask specs.rules_offload.offload_rule)."""
    from paraplan.search.space import SearchProblem

    data = A100.model_dump()
    data["accelerator"]["host_memory"] = None
    link_only = SystemSpec.model_validate(data)
    err = raises(GPT, link_only, gpus=8, global_batch=8, offload_optimizer=True)
    assert str(err).endswith(f"system {link_only.name} declares no host_memory")
    problem = SearchProblem(model=GPT, system=link_only, gpus=8, global_batch=32, seq_length=2048)
    assert problem.offload_options == [(False, False, False)]
    with_host = SearchProblem(model=GPT, system=A100, gpus=8, global_batch=32, seq_length=2048)
    assert len(with_host.offload_options) == 8


def test_offload_with_host_bandwidth_is_fine():
    check_plan(GPT, A100, PlanSpec(gpus=8, global_batch=8, seq_length=2048, offload_optimizer=True))


def test_dtype_without_peak():
    # A100 has no fp8 tensor-core rate
    err = raises(GPT, A100, gpus=8, global_batch=8, dtype="fp8")
    assert str(err).startswith("plan.dtype: 'fp8' ")


def test_estimate_checks_the_plan_first():
    with pytest.raises(InputError, match=r"^plan\.pp: 32 "):
        estimate(GPT, A100, PlanSpec(gpus=32, pp=32, global_batch=64, seq_length=2048))


def test_valid_plan_passes():
    check_plan(
        LLAMA,
        A100,
        PlanSpec(
            gpus=64, tp=8, pp=4, vpp=2, global_batch=32, seq_length=8192, sequence_parallel=True
        ),
    )


def test_non_decoder_models_are_refused_by_the_uniform_estimate_and_search():
    """Encoders / encoder-decoders are costed from per-stage plans only, never silently as decoders."""
    from paraplan.search.space import SearchProblem

    t5 = GPT.model_copy(update={"architecture": "encoder_decoder", "encoder_layers": 4})
    err = raises(t5, A100, gpus=8, tp=1, global_batch=8)
    assert err.violations[0].field == "model.architecture"
    with pytest.raises(InputError, match="model.architecture"):
        SearchProblem(model=t5, system=A100, gpus=8, seq_length=512, global_batch=8).check()
