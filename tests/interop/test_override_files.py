"""One reading of the Python override files NeMo's and Megatron-Bridge's exporters write
(export.common.read_override_file, issue 31 mends item 3): ``<prefix>.<path> = <literal>`` lines checked
against the kept list, each exporter's own forms (NeMo's callback line, Bridge's config calls) read by
its hook, any other line refused with the same message."""

from __future__ import annotations

import pytest

from paraplan.export import megatron_bridge, nemo
from paraplan.export.common import ExportRefused, read_override_file
from paraplan.specs.plan import PlanSpec

PLAN = PlanSpec(gpus=16, tp=2, dp=8, global_batch=64, seq_length=2048, zero=1)


def test_nemo_reads_its_lines_and_the_callback():
    """Every recipe line the export writes is read back; the callback line sets the TP overlap flag."""
    text = nemo.export(PLAN.model_copy(update={"overlap_tp_comm": True, "sequence_parallel": True}))
    values, callback = nemo._read_overrides(text)
    assert callback
    assert values["trainer.strategy.tensor_model_parallel_size"] == 2
    assert not nemo._read_overrides(nemo.export(PLAN))[1]


def test_bridge_reads_its_config_calls():
    text = megatron_bridge.export(PLAN)
    values, gpus = megatron_bridge.read_overrides(text)
    assert gpus == 16
    assert "mixed_precision" in values
    assert any(key.startswith("comm_overlap.") for key in values)


@pytest.mark.parametrize(("name", "prefix"), [("nemo", "recipe"), ("megatron-bridge", "cfg")])
def test_a_line_of_another_form_is_refused_alike(name, prefix):
    with pytest.raises(ExportRefused) as info:
        read_override_file(f"# comment\nimport os\nprint({prefix})\n", name, prefix)
    assert str(info.value).endswith(
        f"{name}: cannot read line 'print({prefix})'; expected {prefix}.<path> = <value>"
    )
    with pytest.raises(ExportRefused, match=rf"{name}: {prefix}\.no\.such is not a known"):
        read_override_file(f"{prefix}.no.such = 1\n", name, prefix)


def test_the_hook_takes_a_line_before_the_refusal():
    taken = []

    def hook(line, assigned, values):
        taken.append(line)
        values["seen"] = True
        return True

    assert read_override_file("anything at all\n", "nemo", "recipe", hook) == {"seen": True}
    assert taken == ["anything at all"]
