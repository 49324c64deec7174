"""Kill tests (issue 13): SIGKILL a ``sweep --workers 2`` and a ``search --csv-all`` at deterministic
moments (observed in their files, not timed; the sweep of four points after 0, 1, 2 and all 4
journaled points, the last before its result file is written): no finished point is lost, no result file is half
written, the user's old file survives, no worker process outlives the sweep, and the temporary file
the killed writer left is removed by the next write to the same target."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paraplan.sweep.params import parse_set
from paraplan.sweep.run import SweepConfig, run_sweep

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="reads /proc to find the sweep's processes"
)

SWEEP_ARGS = [
    "--model",
    "gpt3-125m",
    "--system",
    "dgx-a100-80gb",
    "--gpus",
    "8,16",
    "--set",
    "accelerator.hbm_bandwidth=1TB/s,2TB/s",
    "--global-batch",
    "32",
    "--tp",
    "1,2",
    "--pp",
    "1,2",
    "--no-offload",
    "--default-overlap",
    "--default-placement",
    "--no-plot",
    "--top",
    "2",
]
CONFIG = SweepConfig(
    model="gpt3-125m",
    systems=("dgx-a100-80gb",),
    gpus=(8, 16),
    seq_length=2048,
    sets=(parse_set("accelerator.hbm_bandwidth=1TB/s,2TB/s"),),
    global_batch=32,
    top=2,
    no_offload=True,
    default_overlap=True,
    default_placement=True,
    restrictions={"tp": (1, 2), "pp": (1, 2)},
)
TIMEOUT_S = 60.0


def start(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "paraplan", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )


def wait_for(condition, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"finished before the kill moment: {process.stderr.read().decode()}")
        assert time.monotonic() < deadline, "kill moment never came"
        time.sleep(0.01)


def live_members(group: int) -> list[int]:
    """Processes of a process group that are still running (zombies are dead: they only await reaping)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == group and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 5.0
    while live_members(process.pid):
        assert time.monotonic() < deadline, f"orphan processes: {live_members(process.pid)}"
        time.sleep(0.02)


def complete_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    text = path.read_text()
    return text.split("\n")[:-1]  # the last segment is empty or a torn line


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("baseline")
    run_sweep(CONFIG, out, plots=False)
    return (out / "sweep.json").read_bytes()


@pytest.mark.parametrize(
    ("executor", "finished"),
    [
        (("--workers", "2"), 0),
        (("--workers", "2"), 1),
        (("--workers", "2"), 2),
        (("--workers", "2"), 4),  # every point journaled, the result file not yet written
        (
            ("--dask", "local", "--workers", "2"),
            1,
        ),  # LocalCluster workers are children of the sweep too
    ],
    ids=["workers-0", "workers-1", "workers-2", "workers-4", "dask-local-1"],
)
def test_killed_sweep_loses_nothing_and_leaves_no_worker(tmp_path, baseline, executor, finished):
    if executor[0] == "--dask":
        pytest.importorskip("distributed")
    out = tmp_path / "out"
    journal = out / "points.jsonl"
    process = start("sweep", *SWEEP_ARGS, *executor, "--out", str(out))
    # moment: the journal exists and holds `finished` complete records
    wait_for(lambda: journal.exists() and len(complete_lines(journal)) >= finished, process)
    kill(process)
    kept = complete_lines(journal)
    records = [json.loads(line) for line in kept]  # every complete line is a whole record
    assert not (out / "sweep.json").exists() or json.loads((out / "sweep.json").read_text())
    outcome = run_sweep(CONFIG, out, resume=True, plots=False)
    assert outcome.skipped == len({r["index"] for r in records})  # no finished point lost
    assert outcome.skipped + outcome.ran == 4
    assert (out / "sweep.json").read_bytes() == baseline


@pytest.mark.parametrize("moment", ["started", "writing"])
def test_killed_csv_search_keeps_the_old_file(tmp_path, moment):
    target = tmp_path / "plans.csv"
    target.write_text("my old results\n")
    process = start(
        "search",
        "--model",
        "gpt3-1.3b",
        "--system",
        "dgx-a100-80gb",
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--top",
        "1",
        "--csv-all",
        str(target),
    )

    def temporary() -> list[Path]:
        return [p for p in tmp_path.iterdir() if p.name.startswith(".plans.csv.")]

    if moment == "started":
        wait_for(lambda: bool(temporary()), process)
    else:
        wait_for(lambda: any(p.stat().st_size > 100_000 for p in temporary()), process)
    kill(process)
    assert target.read_text() == "my old results\n"  # never truncated, never half written
    left = temporary()
    assert len(left) == 1 and str(process.pid) in left[0].name  # .plans.csv.PID.XXXXXXXX.tmp
    # the next writer of the same target (a new process) removes the killed writer's leftover
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from paraplan.io.documents import atomic_write_text; "
            "atomic_write_text(sys.argv[1], 'new\\n')",
            str(target),
        ],
        check=True,
        timeout=TIMEOUT_S,
    )
    assert target.read_text() == "new\n" and temporary() == []


def test_stale_temporary_files_are_removed_only_when_ours_old_and_orphaned(tmp_path):
    """Removed: our pattern, modified before this process imported the writer, writer gone (pid
    999999999 exceeds Linux's pid_max) or not recorded (older versions' names). Kept: a live writer's
    file (our parent's pid), a file newer than this writer, other targets' files, other names."""
    from paraplan.io.documents import WRITER_START_S, atomic_write_text

    old, new = WRITER_START_S - 60, WRITER_START_S + 60
    files = {
        ".t.json.999999999.abcd_123.tmp": (old, False),
        ".t.json.abcdefgh.tmp": (old, False),
        f".t.json.{os.getppid()}.abcdefgh.tmp": (old, True),
        ".t.json.999999999.zzzzzzzz.tmp": (new, True),
        ".u.json.999999999.abcdefgh.tmp": (old, True),
        ".t.json.999999999.abcdefgh.tmp.bak": (old, True),
        ".t.json.notes": (old, True),
    }
    for name, (mtime, _) in files.items():
        (tmp_path / name).write_text("partial")
        os.utime(tmp_path / name, (mtime, mtime))
    atomic_write_text(tmp_path / "t.json", "{}\n")
    assert (tmp_path / "t.json").read_text() == "{}\n"
    assert {p.name for p in tmp_path.iterdir()} == {"t.json"} | {
        n for n, (_, kept) in files.items() if kept
    }
