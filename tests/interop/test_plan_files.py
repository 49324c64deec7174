"""`estimate --plan FILE`: a plan from search --json (FILE#rank), from an export, or written by hand;
`export` from a search result; `import plan` (issue 11, round trips)."""

from __future__ import annotations

import json

import pytest

from paraplan.cli import main

SEARCH = [
    "search",
    "-m",
    "gpt3-125m",
    "-s",
    "dgx-a100-80gb",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--top",
    "3",
    "--no-offload",
    "--json",
]


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


@pytest.fixture(scope="module")
def search_file(tmp_path_factory):
    import contextlib
    import io

    path = tmp_path_factory.mktemp("s") / "search.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main(SEARCH)
    path.write_text(buf.getvalue())
    return path


def test_estimate_takes_a_chosen_search_row(search_file, capsys):
    rows = json.loads(search_file.read_text())["plans"]
    for rank in (1, len(rows)):
        code, out, err = run(
            capsys,
            "estimate",
            "-m",
            "gpt3-125m",
            "-s",
            "dgx-a100-80gb",
            "--plan",
            f"{search_file}#{rank}",
            "--json",
        )
        assert code == 0, err
        est = json.loads(out)
        assert est["plan"] == rows[rank - 1]["plan"]
        assert est["step_time_s"] == pytest.approx(rows[rank - 1]["step_time_s"], rel=1e-9)


def test_search_row_to_megatron_and_back(search_file, tmp_path, capsys):
    out_file = tmp_path / "plan.sh"
    code, _, err = run(
        capsys, "export", f"{search_file}#1", "--to", "megatron", "-o", str(out_file)
    )
    if code == 2:  # the best plan may use a knob Megatron cannot run; then the refusal names it
        assert err.startswith("error: plan.")
        return
    code, out, err = run(
        capsys,
        "estimate",
        "-m",
        "gpt3-125m",
        "-s",
        "dgx-a100-80gb",
        "--plan",
        str(out_file),
        "--json",
    )
    assert code == 0, err
    best = json.loads(search_file.read_text())["plans"][0]
    assert json.loads(out)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)


def test_hand_written_yaml_plan(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "gpus: 8\ntp: 2\nmicro_batch: 2\nglobal_batch: 32\nseq_length: 1024\nrecompute: selective\n"
    )
    code, out, err = run(
        capsys, "estimate", "-m", "gpt3-125m", "-s", "dgx-a100-80gb", "--plan", str(plan), "--json"
    )
    assert code == 0, err
    got = json.loads(out)["plan"]
    assert (got["tp"], got["dp"], got["global_batch"], got["recompute"]) == (2, 4, 32, "selective")


@pytest.mark.parametrize(
    ("suffix", "content", "message"),
    [
        ("#9", None, "rank 9 is not allowed"),
        ("", "gpus: 8\nglobal_batch: 8\nseq_length: 64\ntensor: 2\n", "unknown field"),
    ],
)
def test_plan_file_errors_are_one_line(search_file, tmp_path, capsys, suffix, content, message):
    path = search_file
    if content is not None:
        path = tmp_path / "bad.yaml"
        path.write_text(content)
    code, _, err = run(
        capsys, "estimate", "-m", "gpt3-125m", "-s", "dgx-a100-80gb", "--plan", f"{path}{suffix}"
    )
    assert code == 2 and message in err and err.count("\n") == 1


def test_plan_options_beside_plan_override_the_file(search_file, capsys):
    """--tp / --gpus / --zero beside --plan replace the file's values (dp inferred again); the rest stays."""
    best = json.loads(search_file.read_text())["plans"][0]["plan"]
    tp = 2 if best["tp"] != 2 else 4
    code, out, err = run(
        capsys,
        "estimate",
        "-m",
        "gpt3-125m",
        "-s",
        "dgx-a100-80gb",
        "--plan",
        f"{search_file}#1",
        "--tp",
        str(tp),
        "--gpus",
        "16",
        "--zero",
        "1",
        "--json",
    )
    assert code == 0, err
    got = json.loads(out)["plan"]
    assert (got["tp"], got["gpus"], got["zero"]) == (tp, 16, 1)
    assert got["dp"] == 16 // (tp * best["pp"] * best["cp"])  # not the file's dp
    keep = (
        "micro_batch",
        "global_batch",
        "recompute",
        "pp",
        "cp",
        "vpp",
        "sequence_parallel",
        "placement",
    )
    assert {k: got[k] for k in keep} == {k: best[k] for k in keep}
    # an option left at its default does not override: the file's plan is estimated unchanged
    code, out, err = run(
        capsys,
        "estimate",
        "-m",
        "gpt3-125m",
        "-s",
        "dgx-a100-80gb",
        "--plan",
        f"{search_file}#1",
        "--json",
    )
    assert code == 0 and json.loads(out)["plan"] == best


def test_plan_overrides_that_break_a_rule_name_the_field(search_file, capsys):
    code, _, err = run(
        capsys,
        "estimate",
        "-m",
        "gpt3-125m",
        "-s",
        "dgx-a100-80gb",
        "--plan",
        f"{search_file}#1",
        "--tp",
        "5",
    )
    assert code == 2 and err.startswith("error: plan.tp") and err.count("\n") == 1


def test_plan_options_refused_beside_a_non_uniform_plan(tmp_path, capsys):
    plan = tmp_path / "stages.yaml"
    plan.write_text(
        json.dumps(
            {
                "global_batch": 8,
                "seq_length": 512,
                "microbatches": 2,
                "stages": [
                    {"pool": "p", "gpus": 4, "layers": 6},
                    {"pool": "p", "gpus": 4, "layers": 6},
                ],
            }
        )
    )
    code, _, err = run(
        capsys,
        "estimate",
        "-m",
        "gpt3-125m",
        "-s",
        "dgx-a100-80gb",
        "--plan",
        str(plan),
        "--tp",
        "2",
        "--zero",
        "1",
    )
    assert code == 2 and err.count("\n") == 1 and "non-uniform" in err and "--tp, --zero" in err


def test_estimate_help_says_options_override_the_plan_file(capsys):
    code, out, _ = run(capsys, "estimate", "--help")
    assert code == 0 and "override the file's values" in " ".join(out.split())


def test_export_refusal_exits_2_naming_the_knob(tmp_path, capsys):
    plan = tmp_path / "p.json"
    plan.write_text(
        json.dumps({"plan": {"gpus": 8, "cp": 2, "global_batch": 4, "seq_length": 1024}})
    )
    code, _, err = run(capsys, "export", str(plan), "--to", "deepspeed")
    assert code == 2 and err.startswith("error: plan.cp=2 cannot be expressed in DeepSpeed")


def test_import_plan_reads_a_torchtitan_export(tmp_path, capsys):
    plan = tmp_path / "p.json"
    plan.write_text(
        json.dumps(
            {
                "gpus": 16,
                "tp": 2,
                "sequence_parallel": True,
                "zero": 3,
                "global_batch": 16,
                "seq_length": 1024,
            }
        )
    )
    toml = tmp_path / "job.toml"
    code, _, err = run(capsys, "export", str(plan), "--to", "torchtitan", "-o", str(toml))
    assert code == 0, err
    code, out, err = run(capsys, "import", "plan", str(toml))
    assert code == 0, err
    got = json.loads(out)["plan"]
    assert (got["gpus"], got["tp"], got["dp"], got["zero"], got["sequence_parallel"]) == (
        16,
        2,
        8,
        3,
        True,
    )


def test_export_all_from_an_estimate_json_writes_each_framework(tmp_path, capsys):
    code, out, err = run(
        capsys,
        "estimate",
        "-m",
        "gpt3-125m",
        "-s",
        "dgx-a100-80gb",
        "--gpus",
        "16",
        "--tp",
        "2",
        "--sequence-parallel",
        "--zero",
        "3",
        "--json",
    )
    assert code == 0, err
    est = tmp_path / "est.json"
    est.write_text(out)
    code, _, err = run(capsys, "export", str(est), "--to", "all", "-o", str(tmp_path / "out"))
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "plan-megatron.sh" in written and "plan-torchtitan.toml" in written
    assert (
        code == 0 and "refused: deepspeed: plan.sequence_parallel=True" in err
    )  # the one framework that refuses: listed, and the others written (exit 0)
    assert (
        "--num-layers 12" in (tmp_path / "out" / "plan-megatron.sh").read_text()
    )  # model taken from the estimate
