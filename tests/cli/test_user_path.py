"""The user's path through the CLI: --version, shell completion, estimate --set and --plot,
parameter counts, and `paraplan models --model FILE`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from paraplan import __version__
from paraplan.cli import main
from paraplan.graph.params import parameter_counts
from paraplan.catalog import load_model

BASE = [
    "estimate",
    "--model",
    "llama3-8b",
    "--system",
    "dgx-h100-80gb",
    "--gpus",
    "8",
    "--zero",
    "1",
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return (exit_info.value.code or 0), out, err


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"paraplan {__version__}\n"


def test_shell_completion_is_offered_and_completes_commands():
    env = {
        **os.environ,
        "_PARAPLAN_COMPLETE": "complete_bash",
        "COMP_WORDS": "paraplan se",
        "COMP_CWORD": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == {"search", "serve"}
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan", "--help"], capture_output=True, text=True
    )
    assert (
        "--install-completion" in proc.stdout
        and "--version" in proc.stdout
        and "Exit status" in proc.stdout
    )


# ---- estimate --set ------------------------------------------------------------------------------
def test_estimate_set_changes_the_system_and_the_model(capsys):
    _, out, _ = run(capsys, *BASE, "--json")
    base = json.loads(out)
    code, out, err = run(
        capsys,
        *BASE,
        "--set",
        "accelerator.hbm_capacity=141GiB",
        "--set",
        "model.layers=16",
        "--json",
    )
    assert code == 0, err
    changed = json.loads(out)
    assert changed["memory"]["capacity_gib"] == pytest.approx(141)
    assert changed["overrides"] == {"accelerator.hbm_capacity": "141GiB", "model.layers": "16"}
    assert changed["parameters"]["total"] < base["parameters"]["total"]  # 16 of 32 layers
    assert changed["step_time_s"] < base["step_time_s"]
    code, out, _ = run(capsys, *BASE, "--set", "model.layers=16")
    assert code == 0 and out.startswith("plan: llama3-8b (4.54B parameters)")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("accelerator.hbm_capacity=80GiB,141GiB", "estimate takes one"),
        ("accelerator.hbm_capacty=80GiB", "did you mean accelerator.hbm_capacity"),
        ("accelerator.hbm_capacity", "PATH=VALUE"),
        ("accelerator.hbm_capacity=lots", "--set accelerator.hbm_capacity"),
    ],
)
def test_estimate_bad_set_is_one_line_exit_2(capsys, value, expected):
    code, out, err = run(capsys, *BASE, "--set", value)
    assert code == 2 and out == ""
    assert err.startswith("error: --set") and err.count("\n") == 1 and expected in err


# ---- estimate --plot -----------------------------------------------------------------------------
def test_estimate_plot_into_a_missing_directory_is_an_input_error(capsys, tmp_path):
    target = tmp_path / "missing" / "deeper" / "plot.png"
    code, out, err = run(capsys, *BASE, "--plot", str(target))
    assert code == 2 and out == ""
    assert err.startswith("error: --plot:") and "does not exist" in err and err.count("\n") == 1
    assert not (tmp_path / "missing").exists()  # no directory created


# ---- parameter counts ------------------------------------------------------------------------------
def test_parameter_counts_by_hand():
    """GPT-3 175B (Brown et al. 2020, Table 2.1: 175.0B): 96 layers of 12·h² + 13·h, h = 12288,
    V·h token table, 2048·h learned positions, tied head (final norm only)."""
    h, layers, vocab = 12288, 96, 51200
    per_layer = 12 * h * h + 13 * h  # 4h² attention + 8h² MLP, biases 3h+h+4h+h, two layer norms 4h
    expected = layers * per_layer + vocab * h + 2048 * h + 2 * h
    counts = parameter_counts(load_model("gpt3-175b"))
    assert counts.total == expected and counts.active == counts.total
    assert counts.layers + counts.embedding + counts.head == counts.total
    assert 174e9 < counts.total < 176e9


def test_models_lists_total_and_active_parameters(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("name"))
    assert "params (B)" in header and "active (B)" in header
    row = next(line for line in out.splitlines() if line.startswith("llama3-8b "))
    assert row.split()[1:3] == ["8.03", "8.03"]
    _, out, _ = run(capsys, "models", "--json")
    entry = next(r for r in json.loads(out) if r["name"] == "llama3-8b")
    assert entry["parameters"]["total"] == parameter_counts(load_model("llama3-8b")).total


def test_models_model_file_shows_how_it_was_read(capsys, tmp_path):
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    config = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1376,
        "vocab_size": 32000,
    }
    (folder / "config.json").write_text(json.dumps(config))
    code, out, err = run(capsys, "models", "--model", str(folder / "config.json"))
    assert code == 0, err
    assert "Hugging Face config.json (model_type llama)" in out.splitlines()[0]
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert rows["kv_heads"].split()[1] == "2" and "config.json" in rows["kv_heads"]
    assert rows["head_dim"].split()[1] == "64" and "default (= hidden / heads)" in rows["head_dim"]
    expected = parameter_counts(load_model(str(folder / "config.json"))).total
    assert f"({expected:,.0f})" in out
    # our own schema: fields given by the file vs defaults
    own = tmp_path / "mine.yaml"
    own.write_text("layers: 2\nhidden: 256\nheads: 4\nffn_hidden: 1024\nvocab: 1000\n")
    code, out, _ = run(capsys, "models", "--model", str(own))
    assert code == 0 and "paraplan model file" in out.splitlines()[0]
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert (
        rows["layers"].rstrip().endswith("the file") and "default (gelu models: yes" in rows["bias"]
    )
    code, out, _ = run(capsys, "models", "--model", str(own), "--json")
    assert code == 0 and json.loads(out)["given"] == [
        "ffn_hidden",
        "heads",
        "hidden",
        "layers",
        "name",
        "vocab",
    ]


def test_interleaved_without_vpp_is_an_input_error(capsys):
    code, out, err = run(
        capsys,
        "estimate",
        "--model",
        "llama3-8b",
        "--system",
        "dgx-h100-80gb",
        "--gpus",
        "8",
        "--pp",
        "2",
        "--schedule",
        "interleaved",
        "--zero",
        "1",
    )
    assert code == 2 and out == ""
    assert (
        err.startswith("error: plan:")
        and "interleaved" in err
        and "--vpp" in err
        and err.count("\n") == 1
    )
    code, _, err = run(
        capsys,
        "estimate",
        "--model",
        "llama3-8b",
        "--system",
        "dgx-h100-80gb",
        "--gpus",
        "8",
        "--pp",
        "2",
        "--vpp",
        "2",
        "--schedule",
        "interleaved",
        "--zero",
        "1",
        "--json",
    )
    assert code == 0, err


def test_the_command_exits_fast_with_its_output_whole_and_its_exit_code(tmp_path):
    """console_main ends the process with os._exit after flushing: the whole output reaches a pipe, the exit code and
    the one-line error are kept, the atexit handlers run."""
    search = [
        sys.executable,
        "-m",
        "paraplan",
        "search",
        "-m",
        "llama3-8b",
        "-s",
        "dgx-h100-80gb",
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--top",
        "50",
        "--json",
    ]
    proc = subprocess.run(search, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["plans"]) == 50  # ~100 kB through the pipe, parsed whole
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "paraplan",
            "estimate",
            "-m",
            "nope",
            "-s",
            "dgx-h100-80gb",
            "--gpus",
            "8",
        ],
        capture_output=True,
        text=True,
    )
    assert (
        proc.returncode == 2
        and proc.stdout == ""
        and proc.stderr.startswith("error: model: unknown model 'nope'")
    )
    marker = tmp_path / "atexit-ran"
    script = (
        "import atexit, pathlib, sys; atexit.register(pathlib.Path(sys.argv[1]).write_text, 'ran'); "
        "sys.argv[1:] = ['models']; from paraplan.cli import console_main; console_main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(marker)], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "deepseek-v3" in proc.stdout and marker.read_text() == "ran"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            [
                "search",
                "-m",
                "llama3-8b",
                "-s",
                "dgx-h100-80gb",
                "--gpus",
                "8",
                "--global-batch",
                "16",
                "--top",
                "0",
            ],
            "error: --top: 0 is not allowed; must be greater than or equal to 1\n",
        ),
        (
            [
                "search",
                "-m",
                "llama3-8b",
                "-s",
                "dgx-h100-80gb",
                "--gpus",
                "8",
                "--global-batch",
                "16",
                "--workers=0",
            ],
            "error: --workers: 0 is not allowed; must be greater than or equal to 1\n",
        ),
        (
            ["estimate", "-m", "llama3-8b", "-s", "dgx-h100-80gb", "--gpus", "8", "--tp", "x"],
            "error: --tp: x is not allowed; must be a valid integer, unable to parse string as an integer\n",
        ),
    ],
)
def test_an_option_out_of_its_range_names_the_value_given(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err == expected
