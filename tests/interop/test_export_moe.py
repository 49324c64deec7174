"""MoE plans exported to Megatron-LM (core_v0.14.0 argument names) and read back as the same plan."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.export import megatron
from paraplan.export.common import ExportRefused
from paraplan.export.megatron_core import DISPATCHER_TYPES, dispatcher_of
from paraplan.specs.plan import PlanSpec

MIXTRAL = load_model("mixtral-8x7b")


def plan(**fields) -> PlanSpec:
    base = dict(
        gpus=64,
        tp=2,
        pp=4,
        ep=8,
        micro_batch=1,
        global_batch=256,
        seq_length=4096,
        sequence_parallel=True,
        recompute="full",
        zero=1,
    )
    return PlanSpec(**{**base, **fields})


@pytest.mark.parametrize(
    "fields, flags",
    [
        (
            dict(moe_dispatcher="deepep", moe_a2a_overlap=True, pp=1, recompute="selective"),
            [
                "--expert-model-parallel-size 8",
                "--expert-tensor-parallel-size 1",
                "--moe-token-dispatcher-type flex",
                "--moe-enable-deepep",
                "--overlap-moe-expert-parallel-comm",
            ],
        ),
        (
            dict(etp=2, moe_dispatcher="allgather"),
            ["--expert-tensor-parallel-size 2", "--moe-token-dispatcher-type allgather"],
        ),
        (
            dict(moe_dispatcher="alltoall", capacity_factor=1.25, moe_balance="forced"),
            [
                "--moe-token-dispatcher-type alltoall",
                "--moe-expert-capacity-factor 1.25",
                "--moe-pad-expert-input-to-capacity",
                "--moe-router-force-load-balancing",
            ],
        ),
    ],
)
def test_moe_plan_exports_and_round_trips(fields, flags):
    p = plan(**fields)
    text = megatron.export(p, MIXTRAL)
    for flag in flags:
        assert flag in " ".join(text.split()), flag
    back = PlanSpec(**megatron.import_plan(text))
    for name in (
        "ep",
        "etp",
        "moe_dispatcher",
        "moe_a2a_overlap",
        "capacity_factor",
        "moe_balance",
        "tp",
        "pp",
    ):
        assert getattr(back, name) == getattr(p, name), name


def test_split_backward_schedules_are_refused_by_name():
    with pytest.raises(ExportRefused, match="schedule"):
        megatron.export(plan(pp=4, schedule="dualpipe", global_batch=256), MIXTRAL)


def test_a2a_overlap_megatron_cannot_start_is_refused_by_name():
    """Megatron-Core asserts EP all-to-all overlap without full recomputation and, at pp > 1, with virtual
    stages (transformer_config.py, facts/megatron_checks.yaml): such a plan is refused, never written."""
    with pytest.raises(
        ExportRefused, match=r"^plan\.moe_a2a_overlap=True cannot start in Megatron-LM"
    ):
        megatron.export(plan(moe_dispatcher="deepep", moe_a2a_overlap=True), MIXTRAL)


@pytest.mark.parametrize(
    "kind, moe, deepep, expected",
    [
        (None, True, False, "allgather"),  # Megatron-Core's default for an MoE model
        (None, False, False, "alltoall"),
        ("alltoall", True, False, "alltoall"),
        ("flex", True, True, "deepep"),
    ],
)
def test_both_megatron_front_ends_read_the_dispatcher_with_one_map(kind, moe, deepep, expected):
    """Megatron-LM's and NeMo's importers read the dispatcher through megatron_core.dispatcher_of, the
    inverse of the one DISPATCHER_TYPES map both exporters write."""
    assert dispatcher_of(kind, moe, deepep, "x", "switch") == expected
    assert DISPATCHER_TYPES[expected] == (kind or DISPATCHER_TYPES[expected])


@pytest.mark.parametrize(
    "kind, deepep, message",
    [
        ("flex", False, "x flex without switch"),
        ("ring", True, "x 'ring'"),
        ([1], True, "x"),
    ],
)
def test_a_dispatcher_without_a_plan_field_is_refused_by_name(kind, deepep, message):
    with pytest.raises(ExportRefused, match=message):
        dispatcher_of(kind, True, deepep, "x", "switch")


@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(etp=2, moe_dispatcher="deepep", moe_a2a_overlap=True, pp=1, recompute="selective"),
        dict(ep=1, moe_dispatcher="allgather", capacity_factor=1.25, moe_balance="forced"),
    ],
)
def test_both_front_ends_write_and_read_the_same_expert_knobs(fields):
    """megatron_core.expert_knobs is the one list: Megatron-LM writes its flags, NeMo the fields
    they set (nemo.EXPERT_FIELDS), and both read back the same expert fields."""
    from paraplan.export import nemo
    from paraplan.export.megatron_core import expert_knobs

    p = plan(**fields)
    knobs = expert_knobs(p, moe=True)
    line = " ".join(megatron.expert_arguments(p, "megatron", moe=True))
    o = dict(nemo.overrides(p, model=MIXTRAL))
    for flag, value in knobs:
        assert flag in line
        assert o[nemo.EXPERT_FIELDS[flag]] == value
    names = ("etp", "moe_dispatcher", "moe_a2a_overlap", "capacity_factor", "moe_balance")
    from_megatron = megatron.import_plan(megatron.export(p, model=MIXTRAL))
    from_nemo = nemo.import_plan(nemo.export(p, model=MIXTRAL))
    assert {n: from_megatron[n] for n in names} == {n: from_nemo[n] for n in names}
    assert {n: from_nemo[n] for n in names} == {n: getattr(p, n) for n in names}


def test_hybridep_reads_from_the_flex_backend_and_megatron_lm_v014_refuses_it():
    """flex with moe_flex_dispatcher_backend hybridep is Hybrid-EP (Megatron-LM 0d8e0714); Megatron-LM
    core_v0.14.0 and nemo:24.09 have no such backend: their exporters refuse the plan."""
    from paraplan.export import nemo

    assert dispatcher_of("flex", True, False, "x", "switch", "hybridep") == "hybridep"
    assert DISPATCHER_TYPES["hybridep"] == "flex"
    with pytest.raises(
        ExportRefused, match=r"^plan\.moe_dispatcher='hybridep' cannot be expressed"
    ):
        megatron.export(plan(moe_dispatcher="hybridep"), MIXTRAL)
    with pytest.raises(
        ExportRefused, match=r"^plan\.moe_dispatcher='hybridep' cannot be expressed"
    ):
        nemo.overrides(plan(moe_dispatcher="hybridep"), model=MIXTRAL)
