"""Issue 37: a file that a document names (a cluster's pool system, a case's model, a plan file's
model, a calibration run's model) is reported by path and reason only when it fails, never by its
keys or values; devices and FIFOs are refused before they are opened."""

from __future__ import annotations

import json
import os
import signal

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.cli import main
from paraplan.specs.errors import InputError

SECRET = "AKIASECRET123"
CREDENTIALS = [
    f"aws_secret_access_key: {SECRET}\npassword: {SECRET}x\n",  # a mapping: unknown fields
    f"hidden: {SECRET}\nlayers: {SECRET}\n",  # known fields, values of the wrong type
    f'password: "{SECRET}\n',  # not valid YAML
    f"{SECRET}: 1\n{SECRET}: 2\n",  # a duplicate key
    f"x: !{SECRET} 1\n",  # an unknown tag
    f"x: *{SECRET}\n",  # an undefined alias
]


@pytest.mark.parametrize("text", CREDENTIALS)
def test_a_pool_system_file_is_reported_without_its_content(tmp_path, text):
    creds = tmp_path / "creds.yaml"
    creds.write_text(text)
    with pytest.raises(InputError) as info:
        cluster_from_dict({"name": "c", "pools": [{"system": str(creds), "nodes": 2}]})
    message = str(info.value)
    assert SECRET not in message and "password" not in message, message
    assert str(creds) in message and "\n" not in message


@pytest.mark.parametrize("text", CREDENTIALS)
def test_a_referenced_model_file_is_reported_without_its_content(tmp_path, text):
    creds = tmp_path / "creds.yaml"
    creds.write_text(text)
    for load in (load_model, load_system):
        with pytest.raises(InputError) as info:
            load(str(creds), "model", referenced=True)
        assert SECRET not in str(info.value) and str(creds) in str(info.value), str(info.value)


def test_the_command_line_still_shows_the_fields(tmp_path):
    """A file the user named is theirs: the error keeps naming each field (and its value)."""
    bad = tmp_path / "m.yaml"
    bad.write_text("hidden: abc\n")
    with pytest.raises(InputError, match="hidden"):
        load_model(str(bad))


def test_a_plan_file_naming_a_credentials_file_as_its_model(tmp_path, capsys):
    creds = tmp_path / "creds.yaml"
    creds.write_text(f"token: {SECRET}\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"model": str(creds), "plan": {"gpus": 8, "tp": 8}}))
    with pytest.raises(SystemExit) as info:
        main(["export", str(plan)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and SECRET not in err and "token" not in err, err


def test_a_fifo_or_a_device_named_by_a_document_is_refused_unopened(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes

    def hung(*_):
        raise TimeoutError("opened the FIFO and blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        for target in (str(fifo), "/dev/zero"):
            with pytest.raises(InputError, match="not a regular file"):
                cluster_from_dict({"name": "c", "pools": [{"system": target, "nodes": 2}]})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
