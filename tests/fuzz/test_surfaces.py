"""Seeded structural fuzzing of every document paraplan reads (issue 37): a valid cluster, uniform
plan, stage plan, validation case, calibration steps file, measured-kernel CSV or nccl-tests log,
search JSON, launch line and sweep journal (model and system files: test_fuzz_loaders.py), each
mutated at a random place (seeded per surface and case) with a hostile value — a
wrong type, a huge or negative number, NaN/inf text, control characters, shell syntax, a device
path — or with a key removed or added, then run through the CLI command that reads it.

Every run keeps the failure contract of tests/fuzz/conftest.py (exit 0/1/2, one ``error:`` line,
no traceback or internal error, within 5 s), and also: no number in a JSON output is NaN or
infinite, no MFU exceeds 1, nothing is written outside the folder the command was given (the
working directory stays empty), and no injected command runs (the canary file never appears).
The quick version runs 6 mutations per surface; the slow-marked one 40."""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest
import yaml

CANARY = "PWNED"
INJECTIONS = [
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"x; touch {CANARY}",
    f"x\ntouch {CANARY}\n",
    f"' ; touch {CANARY} ; '",
]
HOSTILE = [
    -1,
    0,
    2**63,
    10**400,
    1e308,
    -1e308,
    3.5,
    True,
    None,
    "nan",
    "inf",
    "-inf",
    "1e999",
    "",
    "x" * 5000,
    "a\nb",
    "\x1b[2J\x1b[31mred",
    "/dev/zero",
    "../../../../etc/passwd",
    [],
    {},
    [1, 2, 3],
    {"a": {"b": {"c": 1}}},
    *INJECTIONS,
]
MODEL = "gpt3-125m"
SYSTEM = "dgx-a100-80gb"
CLUSTER = {
    "name": "mix",
    "pools": [
        {"name": "h100", "system": "dgx-h100-80gb", "nodes": 1},
        {"name": "a100", "system": "dgx-a100-80gb", "nodes": 1},
    ],
}
PLAN = {"gpus": 8, "tp": 2, "pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 16}
PLAN |= {"seq_length": 512, "recompute": "selective", "zero": 1}
CASE = {
    "name": "c",
    "source": "test",
    "model": MODEL,
    "system": SYSTEM,
    "plan": PLAN,
    "measured": {"step_time_s": 0.05, "peak_memory_gib": 10.0},
}
STEPS = {"model": MODEL, "runs": [{"name": "r1", "plan": PLAN, "step_time_s": 0.05}]}
LAUNCH = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
    "--nnodes 1 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 16 "
    "--seq-length 512 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --bf16\n"
)
QUICK, SLOW = 6, 40


def _places(value, path=()):
    """Every (path) inside a JSON-like value, the root included."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _places(v, (*path, i))


def mutate(doc, rng: random.Random):
    """``doc`` with one seeded mutation: a hostile value somewhere, a key dropped or added."""
    doc = copy.deepcopy(doc)
    places = [p for p in _places(doc) if p]
    path = rng.choice(places)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    op = rng.random()
    if op < 0.7:
        parent[path[-1]] = rng.choice(HOSTILE)
    elif op < 0.85 and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[rng.choice(["unknown", "x\ny", CANARY])] = rng.choice(HOSTILE)
    else:
        parent.append(rng.choice(HOSTILE))
    return doc


def mutate_line(line: str, rng: random.Random) -> str:
    """A launch line with one token replaced by, or joined with, a hostile string."""
    tokens = line.split()
    i = rng.randrange(len(tokens))
    bad = str(rng.choice(HOSTILE))
    tokens[i] = bad if rng.random() < 0.6 else tokens[i] + bad
    return " ".join(tokens) + "\n"


def _finite(value, where="output"):
    if isinstance(value, float):
        assert math.isfinite(value), where
    elif isinstance(value, dict):
        for k, v in value.items():
            _finite(v, f"{where}.{k}")
            if k == "mfu" and isinstance(v, (int, float)):
                assert 0 <= v <= 1, (where, v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]")


def _no_constant(name):
    raise ValueError(f"{name} in a JSON output")


@pytest.fixture
def sandbox(tmp_path, monkeypatch, cli):
    """(run, inputs): ``run(*argv)`` runs the CLI from an empty working directory and checks that it
    stays empty, that no canary appeared anywhere under tmp_path, and that a JSON stdout holds
    finite numbers only."""
    inputs, work = tmp_path / "in", tmp_path / "work"
    inputs.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)

    def run(*argv, as_json=False):
        code, out, err = cli(*argv)
        assert not any(work.iterdir()), (argv, list(work.iterdir()))
        assert not list(tmp_path.rglob(f"*{CANARY}*")) or all(
            CANARY not in p.name or p.parent == inputs for p in tmp_path.rglob(f"*{CANARY}*")
        ), argv
        if code == 0 and as_json:
            _finite(json.loads(out, parse_constant=_no_constant))
        return code, out, err

    return run, inputs


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc) if path.suffix == ".json" else yaml.safe_dump(doc))
    return path


def _rng(surface: str, i: int) -> random.Random:
    return random.Random(f"{surface}:{i}")


def _cluster(inputs: Path) -> Path:
    return _write(inputs / "cluster.yaml", CLUSTER)


def run_surface(surface: str, i: int, sandbox) -> None:
    """Mutation ``i`` of ``surface`` through its command."""
    run, inputs = sandbox
    rng = _rng(surface, i)
    if surface == "cluster":
        f = _write(inputs / "c.yaml", mutate(CLUSTER, rng))
        run("search", "-m", MODEL, "--cluster", f, "--global-batch", "16", "--seq-length", "512",
            "--top", "1", "--time-budget", "1", "--json", as_json=True)  # fmt: skip
    elif surface == "plan":
        f = _write(inputs / "plan.json", mutate(PLAN, rng))
        run("estimate", "-m", MODEL, "-s", SYSTEM, "--plan", f, "--json", as_json=True)
    elif surface == "stage plan":
        run_stage_plan(run, inputs, rng)
    elif surface == "case":
        f = _write(inputs / "cases.json", {"cases": [mutate(CASE, rng)]})
        run("validate", "--cases", f, "--json", as_json=True)
    elif surface == "steps":
        f = _write(inputs / "steps.yaml", mutate(STEPS, rng))
        run("calibrate", "-s", SYSTEM, "--steps", f)
    elif surface == "search json":
        run_search_json(run, inputs, rng)
    elif surface == "launch line":
        f = inputs / "launch.sh"
        f.write_text(mutate_line(LAUNCH, rng))
        run("import", "plan", f)
    elif surface == "sweep journal":
        run_journal(run, inputs, rng)
    elif surface == "calibration data":
        run_calibration_data(run, inputs, rng)
    else:
        raise ValueError(surface)


_BASE: dict[str, dict] = {}


def _base_output(run, key: str, *argv) -> dict:
    """A valid JSON output to mutate (computed once per process)."""
    if key not in _BASE:
        code, out, _ = run(*argv, as_json=True)
        assert code == 0
        _BASE[key] = json.loads(out)
    return _BASE[key]


def run_stage_plan(run, inputs, rng) -> None:
    cluster = _cluster(inputs)
    found = _base_output(
        run, "stage", "search", "-m", MODEL, "--cluster", cluster, "--global-batch", "16",
        "--seq-length", "512", "--top", "1", "--json",
    )  # fmt: skip
    f = _write(inputs / "stages.json", mutate(found["plans"][0]["plan"], rng))
    run("estimate", "-m", MODEL, "--plan", f, "--cluster", cluster, "--json", as_json=True)


def run_search_json(run, inputs, rng) -> None:
    found = _base_output(
        run, "search", "search", "-m", MODEL, "-s", SYSTEM, "--gpus", "8", "--global-batch", "16",
        "--seq-length", "512", "--top", "2", "--json",
    )  # fmt: skip
    f = _write(inputs / "search.json", mutate(found, rng))
    run("estimate", "-m", MODEL, "-s", SYSTEM, "--plan", f"{f}#1", "--json", as_json=True)
    out = inputs / "export"
    out.mkdir(exist_ok=True)
    run("export", f"{f}#1", "--to", "megatron")


SWEEP = ["sweep", "-m", MODEL, "-s", SYSTEM, "--gpus", "8", "--global-batch", "16", "--tp", "1,2"]
SWEEP += ["--pp", "1", "--no-offload", "--default-overlap", "--default-placement", "--no-plot"]


def run_journal(run, inputs, rng) -> None:
    """A finished sweep's journal with one record mutated (or its bytes cut or garbled), resumed:
    the contract holds, the result is complete and finite, and it equals the fresh sweep's unless
    the mutated line still reads as a record of the same point."""
    out = inputs / "sweep"
    if not (out / "sweep.json").exists():
        run(*SWEEP, "--out", out)
        _BASE["sweep"] = {"json": (out / "sweep.json").read_bytes()}
        _BASE["sweep"]["lines"] = (out / "points.jsonl").read_text().splitlines()
    lines = list(_BASE["sweep"]["lines"])
    i = rng.randrange(len(lines))
    record = json.loads(lines[i])
    op = rng.random()
    if op < 0.7:
        lines[i] = json.dumps(mutate(record, rng))
    elif op < 0.85:
        lines[i] = lines[i][: rng.randrange(len(lines[i]))]
    else:
        lines[i] = rng.choice(["\x00" * 10, "\ufeff{}", "[" * 5000, CANARY, "null"])
    (out / "points.jsonl").write_text("\n".join(lines) + "\n")
    code, _, _ = run(*SWEEP, "--out", out, "--resume")
    assert code == 0
    document = json.loads((out / "sweep.json").read_text(), parse_constant=_no_constant)
    _finite(document)
    try:
        same_point = json.loads(lines[i]).get("key") == record["key"]
    except (ValueError, AttributeError):
        same_point = False
    assert same_point or (out / "sweep.json").read_bytes() == _BASE["sweep"]["json"]


SURFACES = ["cluster", "plan", "stage plan", "case", "steps", "search json", "launch line"]
SURFACES += ["sweep journal", "calibration data"]
CALIBRATION = {  # file of calibrate.synthetic.write_samples -> the option that reads it
    "gemm.csv": "--gemm",
    "attention.csv": "--attention",
    "memory.csv": "--memory",
    "all_reduce_perf_1n8g.txt": "--nccl",
}


def run_calibration_data(run, inputs, rng) -> None:
    """A measured-kernel CSV or an nccl-tests log with one cell replaced or joined with a hostile
    string (or a line dropped or duplicated 1,000 times), through ``calibrate``."""
    from paraplan.calibrate.synthetic import BASE_SYSTEM, write_samples

    samples = inputs / "samples"
    if not samples.exists():
        samples.mkdir()
        write_samples(samples)
    name = rng.choice(sorted(CALIBRATION))
    lines = (samples / name).read_text().splitlines()
    i = rng.randrange(len(lines))
    op = rng.random()
    if op < 0.7:
        cells = lines[i].split("," if name.endswith(".csv") else None)
        j = rng.randrange(len(cells)) if cells else 0
        bad = str(rng.choice(HOSTILE))
        cells[j : j + 1] = [bad if rng.random() < 0.6 else (cells[j] if cells else "") + bad]
        lines[i] = ("," if name.endswith(".csv") else " ").join(cells)
    elif op < 0.85:
        del lines[i]
    else:
        lines[i:i] = [lines[i]] * 1000
    f = inputs / name
    f.write_text("\n".join(lines) + "\n")
    run("calibrate", "-s", BASE_SYSTEM, CALIBRATION[name], f)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("i", range(QUICK))
def test_surface_mutations(sandbox, surface, i):
    run_surface(surface, i, sandbox)


@pytest.mark.slow
@pytest.mark.parametrize("surface", SURFACES)
def test_surface_mutations_many(sandbox, surface):
    for i in range(QUICK, SLOW):
        run_surface(surface, i, sandbox)


def test_mutations_are_seeded_and_differ():
    """The same seed gives the same mutation; the cases of a surface are not all alike."""
    assert mutate(PLAN, _rng("plan", 3)) == mutate(PLAN, _rng("plan", 3))
    assert len({json.dumps(mutate(PLAN, _rng("plan", i)), sort_keys=True) for i in range(20)}) > 10
    assert mutate_line(LAUNCH, _rng("launch", 1)) == mutate_line(LAUNCH, _rng("launch", 1))


def test_the_sandbox_catches_a_stray_file(sandbox, tmp_path):
    """The checks can fail: a file left in the working directory is reported."""
    run, _ = sandbox
    Path("stray.txt").write_text("x")
    with pytest.raises(AssertionError):
        run("estimate", "-m", MODEL, "-s", SYSTEM, "--gpus", "8", "--global-batch", "8")
