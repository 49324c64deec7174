"""Issue 37: nothing from a file name or a value reaches an exported script as code.

Exports are built from hostile plan file names (newlines, shell metacharacters, escape codes); each
generated launch script must parse with ``bash -n`` and, run by bash in an empty folder, must not run
the command injected through the name (it would create a marker file)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from paraplan.cli import main

HOSTILE = [
    "p\ntouch MARKER\n.json",
    "p\rtouch MARKER\n.json",
    "p$(touch MARKER).json",
    "p`touch MARKER`.json",
    "p;touch MARKER;.json",
    "p\x1b]0;x\x07\ntouch MARKER #.json",
    "p\u2028touch MARKER\u2029.json",
    "p\x0btouch MARKER\x0c.json",
]
PLAN = (
    dict(  # a plan Megatron-LM, NeMo and torchtitan all start (torchtitan's DDP is 1D only: zero 3)
        gpus=8,
        tp=2,
        micro_batch=1,
        global_batch=16,
        seq_length=2048,
        sequence_parallel=True,
        zero=3,
    )
)


def _export(tmp_path: Path, name: str, to: str, capsys) -> str:
    plan = tmp_path / name
    plan.write_text(json.dumps({"plan": PLAN}))
    with pytest.raises(SystemExit) as info:
        main(["export", str(plan), "--to", to, "--model", "gpt3-1.3b"])
    out, err = capsys.readouterr()
    assert (info.value.code or 0) == 0, err
    return out


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_plan_name_runs_nothing_in_the_megatron_script(tmp_path, capsys, name):
    script = _export(tmp_path, name, "megatron", capsys)
    run = tmp_path / "run"
    run.mkdir()
    (run / "launch.sh").write_text(script)
    assert subprocess.run(["bash", "-n", "launch.sh"], cwd=run).returncode == 0, script
    env = {"PATH": "/usr/bin:/bin"}  # no torchrun: the launch line fails, nothing else may run
    subprocess.run(["bash", "launch.sh"], cwd=run, env=env, capture_output=True, timeout=30)
    assert not (run / "MARKER").exists(), script
    assert sorted(p.name for p in run.iterdir()) == ["launch.sh"], script


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_plan_name_stays_a_comment_in_every_export(tmp_path, capsys, name):
    """The header of the NeMo override (Python), torchtitan (TOML) and Megatron exports stays one
    comment line: no line of the export starts with the injected command, and the TOML still parses."""
    for to in ("megatron", "nemo", "torchtitan"):
        text = _export(tmp_path, name, to, capsys)
        lines = text.splitlines()
        assert not any("touch MARKER" in line and not line.startswith("#") for line in lines), text
        assert all(ch.isprintable() or ch == "\n" for ch in text), repr(text)
        if to == "torchtitan":
            tomllib.loads(text)
        if to == "nemo":
            compile(text.replace("recipe.", "r."), "<export>", "exec")
