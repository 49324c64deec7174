"""Issue 37: a 5 MB layout string made ``import plan`` run past 60 s (shlex reads a token in time
quadratic in its length) and 't*99999999' wrote out a layer per repeat; both are refused by size."""

from __future__ import annotations

import pytest

from paraplan.cli import main
from paraplan.export.common import ExportRefused
from paraplan.export.megatron import MAX_LAUNCH_CHARS, parse
from paraplan.export.megatron_core import (
    LAYOUT_FLAG,
    MAX_LAYOUT_CHARS,
    stage_layers_from_layout,
)

LAUNCH = (
    "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --global-batch-size 8 --seq-length 64 "
    "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout '{}'\n"
)


def test_a_5mb_layout_is_refused_in_one_line_with_exit_2(tmp_path, capsys):
    layout = "E" + "|".join(["t*2"] * 1_250_000) + "L"
    path = tmp_path / "launch.sh"
    path.write_text(LAUNCH.format(layout))
    with pytest.raises(SystemExit) as exit_info:
        main(["import", "plan", str(path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("error: megatron: the launch line is ") and err.count("\n") == 1
    assert str(MAX_LAUNCH_CHARS) in err


def test_a_layout_over_its_cap_is_refused_naming_the_flag():
    layout = "E" + "|".join(["t"] * (MAX_LAYOUT_CHARS // 2 + 1)) + "L"
    assert len(LAUNCH.format(layout)) < MAX_LAUNCH_CHARS  # the line passes, the layout does not
    with pytest.raises(ExportRefused, match=f"^megatron: {LAYOUT_FLAG} is .* at most"):
        stage_layers_from_layout(layout, 2)


@pytest.mark.parametrize("layout", ["Et*99999999|t*99999999L", "E(t*1000)*1000000|tL"])
def test_a_layout_that_expands_past_a_million_layers_is_refused_before_expanding(layout):
    with pytest.raises(ExportRefused, match=f"^megatron: {LAYOUT_FLAG} expands to more than"):
        stage_layers_from_layout(layout, 2)


def test_layouts_within_the_caps_still_read():
    assert stage_layers_from_layout("Et*4|t*6|t*6|t*4L", 2) == ((10, 10), 2)
    assert stage_layers_from_layout("E(t*2|)*3t*2L", 2) == ((4, 4), 2)
    flags = parse(LAUNCH.format("Et*2|t*2L"))
    assert flags[LAYOUT_FLAG] == "Et*2|t*2L"
