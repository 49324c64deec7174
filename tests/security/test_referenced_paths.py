"""Issue 37: every file path a document names goes through io.referenced — resolved, checked on the
open descriptor (a regular file within the size cap: no device, FIFO or socket, nor a link to one)
and, when it does not load, reported by path and reason, never by content. Covers the paths the
earlier round left out: a validation case's model, system and framework, and a calibration run's
plan_file."""

from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager

import pytest

from paraplan.calibrate import read_steps
from paraplan.catalog import load_framework
from paraplan.io.documents import read_document
from paraplan.io.referenced import MAX_INPUT_BYTES, referenced_path
from paraplan.specs.errors import InputError
from paraplan.validate.case_files import load_cases

SECRET = "AKIASECRET123"


@contextmanager
def _deadline(seconds: int = 10):
    def hung(*_):
        raise TimeoutError("a referenced file blocked the read")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _case(**changes) -> dict:
    case = {
        "name": "c",
        "source": "test",
        "model": "gpt3-1.3b",
        "system": "dgx-a100-80gb",
        "plan": {"gpus": 8, "tp": 8, "global_batch": 8, "seq_length": 2048},
        "measured": {"step_time_s": 1.0},
    }
    return case | changes


def _cases_file(tmp_path, **changes):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [_case(**changes)]}))
    return path


@pytest.mark.parametrize("key", ["model", "system", "framework"])
def test_a_case_names_a_credentials_file(tmp_path, key):
    creds = tmp_path / "creds.yaml"
    creds.write_text(f"password: {SECRET}\ntoken: {SECRET}\n")
    with pytest.raises(InputError) as info:
        load_cases([_cases_file(tmp_path, **{key: str(creds)})])
    message = str(info.value)
    assert SECRET not in message and "password" not in message, message
    assert str(creds) in message and "\n" not in message


@pytest.mark.parametrize("key", ["model", "system", "framework"])
def test_a_case_names_a_fifo_a_device_or_a_link_to_one(tmp_path, key):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    link = tmp_path / "link.yaml"
    link.symlink_to("/dev/zero")
    with _deadline():
        for target in (fifo, "/dev/zero", link):
            with pytest.raises(InputError, match="not a regular file"):
                load_cases([_cases_file(tmp_path, **{key: str(target)})])


def test_a_link_to_a_device_names_its_target(tmp_path):
    link = tmp_path / "model.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match=r"a link to '/dev/zero'.*not a regular file"):
        read_document(link, "model", referenced=True)
    with pytest.raises(InputError, match=r"a link to '/dev/zero'"):
        referenced_path(None, str(link), "model")


def test_a_link_to_a_regular_file_is_read(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("tp_comm_overlap: true\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert read_document(link, "framework", referenced=True) == {"tp_comm_overlap": True}
    assert referenced_path(tmp_path, "link.yaml", "f") == link


def test_the_size_cap_is_checked_before_reading(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)  # sparse: nothing to read if the check comes first
    with pytest.raises(InputError, match="larger than 16 MiB"):
        referenced_path(None, str(big), "model")
    with pytest.raises(InputError, match="larger than 16 MiB"):
        read_document(big, "model", referenced=True)


@pytest.mark.parametrize("ref", ["", "a\nb.yaml", "x\x1b[2J.yaml", 7, None])
def test_a_path_that_cannot_name_a_file_is_refused_by_field(ref):
    with pytest.raises(InputError, match=r"^plan_file: .* is not allowed; give the path of a file"):
        referenced_path(None, ref, "plan_file")


def test_a_referenced_framework_file_is_reported_without_content(tmp_path):
    creds = tmp_path / "fw.yaml"
    creds.write_text(f"password: {SECRET}\n")
    with pytest.raises(InputError) as info:
        load_framework(str(creds), "framework", referenced=True)
    assert SECRET not in str(info.value) and "password" not in str(info.value)
    with pytest.raises(InputError, match="password"):  # named on the command line: shown
        load_framework(str(creds))


def _steps(tmp_path, plan_file: str):
    steps = tmp_path / "steps.yaml"
    steps.write_text(
        "model: gpt3-1.3b\nruns:\n"
        f"  - name: r1\n    plan_file: {json.dumps(plan_file)}\n    step_time_s: 1.0\n"
    )
    return steps


def test_a_calibration_plan_file_with_secrets_is_not_shown(tmp_path):
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"gpus": 8, "tp": SECRET, "password": SECRET}))
    with pytest.raises(InputError) as info:
        read_steps(_steps(tmp_path, "creds.json"))
    message = str(info.value)
    assert SECRET not in message and "password" not in message, message
    assert "creds.json" in message and "runs.0.plan_file" in message.replace("[0]", ".0")


def test_a_calibration_plan_file_that_is_a_fifo_or_missing(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    with _deadline():
        with pytest.raises(InputError, match="not a regular file"):
            read_steps(_steps(tmp_path, "fifo.json"))
    with pytest.raises(InputError, match="cannot read file"):
        read_steps(_steps(tmp_path, "absent.json"))


def test_a_calibration_plan_file_still_loads(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"gpus": 8, "tp": 8, "global_batch": 8, "seq_length": 2048}))
    (run,) = read_steps(_steps(tmp_path, "plan.json"))
    assert run.plan.tp == 8 and run.step_time_s == 1.0
