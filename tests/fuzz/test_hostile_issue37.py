"""Issue 37's hostile inputs, each one line at exit 2 (never an internal error): a ZeRO stage past 3,
a system with no vector rate, a CSV field over csv's 128 KiB limit, an unbalanced quote in an
imported launch line; plus seeded variations of them (the fuzz suite's contract: conftest.cli)."""

from __future__ import annotations

import random

import pytest
import yaml

from paraplan.catalog import load_system
from paraplan.specs.errors import InputError

SEARCH = ["search", "-m", "gpt3-1.3b", "-s", "dgx-h100-80gb", "--gpus", "8", "--global-batch", "64"]


@pytest.mark.parametrize("zero", ["7", "4", "0,1,9", "3,99999999999"])
def test_search_zero_past_three_is_one_line(cli, zero):
    _, _, err = cli(*SEARCH, "--zero", zero, codes=(2,))
    assert "--zero" in err and "allowed: 0 to 3" in err, err


def test_a_system_without_vector_rates_is_one_line(cli, tmp_path):
    data = load_system("dgx-h100-80gb").model_dump(mode="json")
    data["accelerator"]["vector_flops"] = {}
    path = tmp_path / "sys.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="vector_flops"):
        load_system(str(path))
    _, _, err = cli(*SEARCH[:3], "-s", str(path), *SEARCH[5:], codes=(2,))
    assert "vector_flops" in err, err


@pytest.mark.parametrize("flag", ["--gemm", "--memory", "--attention"])
def test_a_csv_field_over_128_kib_is_one_line(cli, tmp_path, flag):
    path = tmp_path / "data.csv"
    path.write_text("m,n,k,dtype,time_us\n" + '"' + "9" * (200 * 1024) + '",1,1,bf16,1\n')
    _, _, err = cli("calibrate", "-s", "dgx-h100-80gb", flag, str(path), codes=(2,))
    assert str(path) in err and "field larger than field limit" in err, err


def test_unbalanced_quotes_in_launch_lines_are_one_line(cli, tmp_path):
    rng = random.Random(37)
    base = "torchrun pretrain_gpt.py --tensor-model-parallel-size 2 --micro-batch-size 1"
    for i in range(20):
        words = base.split()
        at = rng.randrange(1, len(words) + 1)
        words.insert(at, rng.choice(['"x', "'y", '--foo "bar', "\\", "--seq-length '4096"]))
        path = tmp_path / f"launch{i}.sh"
        path.write_text(" ".join(words) + "\n")
        code, _, err = cli("import", "plan", str(path))
        assert code == 2, (words, err)


def _alias_bomb(levels: int, width: int) -> str:
    """``levels`` YAML anchors, each a list of ``width`` aliases of the one before: ~width**levels values."""
    lines = ["l0: &l0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("levels", "width"), [(9, 9), (12, 5), (30, 2), (4, 200)])
def test_yaml_alias_bombs_are_refused_quickly(cli, tmp_path, levels, width):
    """A 300-byte alias bomb took 20-50 s and 4.8 GB (issue 37); within the suite's 5 s now."""
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(levels, width))
    _, _, err = cli("estimate", "-m", str(path), "-s", "dgx-h100-80gb", "--gpus", "8", codes=(2,))
    assert "aliases" in err and "expand past" in err, err


def test_recursive_and_modest_aliases(tmp_path):
    from paraplan.io.documents import parse_document

    with pytest.raises(InputError, match="expand past"):
        parse_document("a: &a [*a]\n", "'x'", "model", as_json=False)
    shared = parse_document("a: &x {b: 1}\nc: *x\nd: [*x, *x]\n", "'x'", "model", as_json=False)
    assert shared == {"a": {"b": 1}, "c": {"b": 1}, "d": [{"b": 1}, {"b": 1}]}


# ---- YAML parse time (issue 37: ~12 s per MiB within the 16 MiB input cap) -----------------------
def _flow_mappings(size: int) -> str:
    """A YAML text of ``size`` characters or so, all flow mappings (the slowest form to parse)."""
    lines, total, i = [], 0, 0
    while total < size:
        line = f"k{i}: {{a: [1, 2, 3], b: xyz, c: {i}.5}}\n"
        lines.append(line)
        total, i = total + len(line), i + 1
    return "".join(lines)


def test_yaml_over_its_cap_is_refused_at_once_and_names_json(cli, tmp_path):
    from paraplan.io.strict_yaml import MAX_YAML_BYTES

    path = tmp_path / "huge.yaml"
    path.write_text(_flow_mappings(MAX_YAML_BYTES + 1))
    _, _, err = cli("estimate", "-m", str(path), "-s", "dgx-h100-80gb", "--gpus", "8", codes=(2,))
    assert "larger than 256 KiB of YAML" in err and "JSON" in err, err


def test_yaml_at_its_cap_parses_within_the_suite_limit_and_the_error_stays_short(cli, tmp_path):
    """Half the cap (~3,000 unknown keys, the slowest form): parsed within conftest.SECONDS on the
    loaded 2-core development machine, the error names 12 fields and counts the rest."""
    from paraplan.io.strict_yaml import MAX_YAML_BYTES

    path = tmp_path / "big.yaml"
    path.write_text(_flow_mappings(MAX_YAML_BYTES // 2))
    _, _, err = cli("estimate", "-m", str(path), "-s", "dgx-h100-80gb", "--gpus", "8", codes=(2,))
    assert "unknown field" in err and " more" in err and len(err) < 2000, err[:300]


@pytest.mark.parametrize("levels", [1200, 5000])
def test_compact_nesting_past_the_c_bound_takes_the_python_parser(tmp_path, levels):
    """``- - - … x`` nests a level per two bytes: beyond C_PARSE_MAX_DEPTH the recursive C composer is
    not used; the pure-Python one refuses it in one line."""
    from paraplan.io.documents import parse_document
    from paraplan.io.strict_yaml import C_PARSE_MAX_DEPTH, _block_depth_bound

    text = "- " * levels + "x\n"
    assert _block_depth_bound(text) > C_PARSE_MAX_DEPTH
    with pytest.raises(InputError, match="nests") as info:
        parse_document(text, "'x'", "model", as_json=False)
    assert "\n" not in str(info.value)


def test_the_python_parser_keeps_its_time_budget(monkeypatch):
    from paraplan.io import strict_yaml
    from paraplan.io.documents import parse_document

    monkeypatch.setattr(strict_yaml, "C_PARSE_MAX_DEPTH", -1)  # the pure-Python parser
    monkeypatch.setattr(strict_yaml, "PYTHON_PARSE_BUDGET_S", 0.0)
    with pytest.raises(InputError, match="takes longer than 0 s to parse"):
        parse_document(_flow_mappings(10_000), "'x'", "model", as_json=False)
    monkeypatch.setattr(strict_yaml, "PYTHON_PARSE_BUDGET_S", 60.0)
    assert parse_document("a: [1, {b: 2}]\n", "'x'", "model", as_json=False) == {"a": [1, {"b": 2}]}


def test_both_parsers_read_the_same_data():
    from paraplan.io import strict_yaml

    text = "a: &x {b: [1, 2.5, true, null, '3']}\nc: *x\n? k\n: v\nd: |\n  text\n"
    c = strict_yaml.load_strict_yaml(text)
    strict_yaml.C_PARSE_MAX_DEPTH, saved = -1, strict_yaml.C_PARSE_MAX_DEPTH
    try:
        assert strict_yaml.load_strict_yaml(text) == c
    finally:
        strict_yaml.C_PARSE_MAX_DEPTH = saved


# ---- --non-uniform ignored --time-budget (issue 37: 512 GPUs, 112 s) ------------------------------
def test_non_uniform_keeps_the_budget_from_its_first_second_and_says_where_it_stopped(cli):
    """The AMP-style start plan was searched without the budget; now the budget covers it, and the
    output says where the budget stopped the search. The uniform seeds (search.staged.uniform_seed) now
    start the alleviation and may let it finish within the second; without them (``seeded`` False) the
    AMP-style start search is cut, and the stop names that search's own space, not the non-uniform one."""
    import time

    from paraplan.catalog import load_model
    from paraplan.search.staged.hetero import HeteroProblem
    from paraplan.search.staged.non_uniform import search_non_uniform
    from paraplan.specs.cluster import uniform_cluster

    t0 = time.perf_counter()
    _, out, _ = cli(
        "search",
        "-m",
        "gpt3-175b",
        "--non-uniform",
        "-s",
        "dgx-a100-80gb",
        "--gpus",
        "512",
        "--global-batch",
        "512",
        "--time-budget",
        "1",
        codes=(0, 1),
    )
    # the budget ends the search in one of its phases (which one depends on the machine's speed): while the
    # AMP-style start plan is found, during the alleviation from the starts, or not at all
    assert (
        "stopped: while finding the AMP-style start plan: time budget" in out
        or "stopped: time budget 1 s reached:" in out
        or "finished: bottleneck alleviation ran to its end within the time budget" in out
    )
    assert time.perf_counter() - t0 < 1.0 + 4.0
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 512)
    problem = HeteroProblem(load_model("gpt3-175b"), cluster, 512, 2048)
    t0 = time.perf_counter()
    result = search_non_uniform(problem, top_k=1, time_budget_s=1.0, seeded=False)
    assert time.perf_counter() - t0 < 1.0 + 4.0
    # the budget ends the search in one of its phases, and the stop names that phase's space: cut while
    # finding the AMP-style start (its budget what is left of the second after the space is counted), the
    # start search's own space; cut during the alleviation (the start search finishes within the second on
    # a quiet machine since its candidates are bounded from their blocks alone), the non-uniform space
    stopped = result.stopped
    if stopped.startswith("while finding the AMP-style start plan"):
        assert stopped.startswith("while finding the AMP-style start plan: time budget 0.")
        assert "; the AMP-style start search's space (equal stages, layer split by DP) holds " in (
            stopped
        )
    else:
        assert stopped.startswith("time budget 1 s reached: ") and "alleviation moves" in stopped
        assert stopped.endswith(f"the non-uniform space holds {result.space} candidates")


def test_non_uniform_exact_enumeration_keeps_the_budget_too():
    from paraplan.catalog import load_model
    from paraplan.search.staged.hetero import HeteroProblem
    from paraplan.search.staged.non_uniform import search_non_uniform
    from paraplan.specs.cluster import uniform_cluster

    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 2)
    problem = HeteroProblem(load_model("gpt3-125m"), cluster, 2, 64)
    result = search_non_uniform(problem, top_k=1, time_budget_s=0.0)
    assert result.mode == "exact" and result.stopped.startswith("time budget 0 s reached: 0 of")
    assert search_non_uniform(problem, top_k=1, time_budget_s=60.0).stopped == ""
