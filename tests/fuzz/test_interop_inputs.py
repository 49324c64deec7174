"""`export`, `import` and `calibrate` read their files through the bounded reader and check every
value where it is read: a bad file is one line naming the field, the value and what is allowed
(exit 2) — never "internal error" (issue 13). Runs the CLI in this process (fixture ``cli``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).resolve().parents[1] / "data"
CALC = DATA / "calculon"
CALC_MODEL = CALC / "models" / "gpt3-175B.json"
CALC_SYSTEM = CALC / "systems" / "a100_80g.json"
CALC_EXEC = CALC / "validation" / "seqsel" / "tab5" / "gpt3-175B_seqsel.json"
AMPED = DATA / "amped"
PLAN = {
    "gpus": 16,
    "tp": 2,
    "pp": 2,
    "dp": 4,
    "micro_batch": 1,
    "global_batch": 32,
    "seq_length": 2048,
}
DEEPSPEED = {
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 1, "overlap_comm": True},
    "pipeline": {"stages": 2},
    "tensor_parallel": {"autotp_size": 2},
}
NEMO = """recipe.trainer.num_nodes = 2
recipe.trainer.devices = 8
recipe.trainer.strategy.tensor_model_parallel_size = 2
recipe.data.micro_batch_size = 1
recipe.data.global_batch_size = 32
recipe.data.seq_length = 2048
recipe.trainer.plugins.precision = 'bf16-mixed'
"""
TORCHTITAN = """[parallelism]
data_parallel_shard_degree = 4
tensor_parallel_degree = 2

[training]
global_batch_size = 32
seq_len = 2048
"""
GEMM_CSV = "m,n,k,dtype,time_us\n4096,4096,4096,bf16,800\n"


def write(tmp_path: Path, name: str, content) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def changed(path: Path, *keys, value=None, delete: bool = False) -> dict:
    """The JSON document at ``path`` with the field at ``keys`` set to ``value`` (or deleted)."""
    data = json.loads(path.read_text())
    target = data
    for key in keys[:-1]:
        target = target[key]
    if delete:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return data


def steps(run: dict) -> str:
    return yaml.safe_dump(
        {
            "model": "gpt3-125m",
            "runs": [{"name": "a", "plan": {"gpus": 8}, "step_time_s": 1.0, **run}],
        }
    )


# (id, files to write {name: content}, argv with {name} placeholders, text the error line must contain)
CASES = [
    # export: plan files (search results, hand-written plans)
    (
        "export-no-plan-in-rank",
        {"p.json": {"plans": [{"rank": 1}]}},
        ["export", "{p.json}"],
        "PLAN.plans[0].plan: missing",
    ),
    (
        "export-plans-not-a-list",
        {"p.json": {"plans": "x"}},
        ["export", "{p.json}"],
        "PLAN.plans: 'x' is not allowed; must be a list",
    ),
    (
        "export-plan-not-a-mapping",
        {"p.json": {"plan": 3}},
        ["export", "{p.json}"],
        "PLAN.plan: 3 is not allowed; must be a mapping",
    ),
    ("export-binary", {"p.json": bytes(range(256))}, ["export", "{p.json}"], "is not UTF-8 text"),
    (
        "export-duplicate-key",
        {"p.json": '{"plan": {"tp": 1, "tp": 2}}'},
        ["export", "{p.json}"],
        "duplicate key 'tp'",
    ),
    ("export-dev-zero", {}, ["export", "/dev/zero"], "larger than 16 MiB"),
    (
        "export-recompute-modules",
        {"p.json": {"plan": {**PLAN, "recompute_modules": -1}}},
        ["export", "{p.json}"],
        "recompute_modules",
    ),
    # import plan: framework exports
    (
        "deepspeed-batch-text",
        {"ds.json": {**DEEPSPEED, "train_batch_size": "x"}},
        ["import", "plan", "{ds.json}", "--seq-length", "2048"],
        "deepspeed.train_batch_size: 'x' is not allowed; must be an integer",
    ),
    (
        "deepspeed-batch-missing",
        {"ds.json": {k: v for k, v in DEEPSPEED.items() if k != "train_batch_size"}},
        ["import", "plan", "{ds.json}", "--seq-length", "2048"],
        "deepspeed.train_batch_size: missing",
    ),
    (
        "deepspeed-micro-zero",
        {"ds.json": {**DEEPSPEED, "train_micro_batch_size_per_gpu": 0}},
        ["import", "plan", "{ds.json}", "--seq-length", "2048"],
        "train_micro_batch_size_per_gpu: 0 is not allowed; must be an integer >= 1",
    ),
    (
        "deepspeed-bf16-not-mapping",
        {"ds.json": {**DEEPSPEED, "bf16": "yes"}},
        ["import", "plan", "{ds.json}", "--seq-length", "2048"],
        "deepspeed.bf16: 'yes' is not allowed; must be a mapping",
    ),
    (
        "deepspeed-zero-stage-true",
        {"ds.json": {**DEEPSPEED, "zero_optimization": {"stage": True}}},
        ["import", "plan", "{ds.json}", "--seq-length", "2048"],
        "deepspeed.zero_optimization.stage: True is not allowed; allowed: 0, 1, 2, 3",
    ),
    (
        "nemo-precision",
        {"n.py": NEMO.replace("'bf16-mixed'", "'x'")},
        ["import", "plan", "{n.py}"],
        "nemo: recipe.trainer.plugins.precision: 'x' is not allowed; allowed: bf16-mixed, 16-mixed, 32",
    ),
    (
        "nemo-nodes-none",
        {"n.py": NEMO.replace("num_nodes = 2", "num_nodes = 'a'")},
        ["import", "plan", "{n.py}"],
        "nemo: recipe.trainer.num_nodes: 'a' is not allowed; must be an integer",
    ),
    (
        "torchtitan-degree-text",
        {
            "t.toml": TORCHTITAN.replace(
                "tensor_parallel_degree = 2", "tensor_parallel_degree = 'a'"
            )
        },
        ["import", "plan", "{t.toml}"],
        "torchtitan.parallelism.tensor_parallel_degree: 'a' is not allowed; must be an integer",
    ),
    (
        "torchtitan-degree-nan",
        {
            "t.toml": TORCHTITAN.replace(
                "tensor_parallel_degree = 2", "tensor_parallel_degree = nan"
            )
        },
        ["import", "plan", "{t.toml}"],
        "torchtitan.parallelism.tensor_parallel_degree: nan is not allowed",
    ),
    # import calculon
    (
        "calculon-memory-text",
        {
            "s.json": changed(CALC_SYSTEM, "mem1", "GiB", value="x")
        },  # was "x" * 2**30: a 1 GiB string
        ["import", "calculon", str(CALC_MODEL), "{s.json}", str(CALC_EXEC)],
        "calculon system.mem1.GiB: 'x' is not allowed; must be a number",
    ),
    (
        "calculon-network-missing",
        {"s.json": changed(CALC_SYSTEM, "networks", 0, "bandwidth", delete=True)},
        ["import", "calculon", str(CALC_MODEL), "{s.json}", str(CALC_EXEC)],
        "calculon system.networks[0].bandwidth: missing",
    ),
    (
        "calculon-curve-pairs",
        {
            "s.json": changed(
                CALC_SYSTEM, "matrix", "float16", "gflops_efficiency", value=[[1, "a"]]
            )
        },
        ["import", "calculon", str(CALC_MODEL), "{s.json}", str(CALC_EXEC)],
        "calculon system.matrix.float16.gflops_efficiency[0][1]: 'a' is not allowed; must be a number",
    ),
    (
        "calculon-recompute",
        {"e.json": changed(CALC_EXEC, "activation_recompute", value="some")},
        ["import", "calculon", str(CALC_MODEL), str(CALC_SYSTEM), "{e.json}"],
        "calculon execution.activation_recompute: 'some' is not allowed; allowed: none, attn_only, full",
    ),
    (
        "calculon-procs-float",
        {"e.json": changed(CALC_EXEC, "num_procs", value=1.5)},
        ["import", "calculon", str(CALC_MODEL), str(CALC_SYSTEM), "{e.json}"],
        "calculon execution.num_procs: 1.5 is not allowed",
    ),
    (
        "calculon-model-heads-list",
        {"m.json": changed(CALC_MODEL, "attn_heads", value=[])},
        ["import", "calculon", "{m.json}", str(CALC_SYSTEM), str(CALC_EXEC)],
        "calculon model.attn_heads: [] is not allowed; must be an integer",
    ),
    (
        "calculon-latin1",
        {"m.json": '{"hidden": "caf\xe9"}'.encode("latin-1")},
        ["import", "calculon", "{m.json}", str(CALC_SYSTEM), str(CALC_EXEC)],
        "calculon model: ",
    ),
    # import amped
    (
        "amped-config-not-mapping",
        {"c.json": "[1, 2]"},
        ["import", "amped", "{c.json}"],
        "amped config: [1, 2] is not allowed; must be a mapping",
    ),
    (
        "amped-lookup-name-list",
        {
            "c.json": changed(
                AMPED / "config.json",
                "neural_network_training_parameters",
                "lookup_config",
                "lookup_table_name",
                value=[],
            )
        },
        ["import", "amped", "{c.json}", "--lookup-tables", str(AMPED / "lookup_tables.json")],
        "lookup_config.lookup_table_name: [] is not allowed; must be a string",
    ),
    (
        "amped-row-not-mapping",
        {
            "t.json": changed(
                AMPED / "lookup_tables.json", "accelerator_specifications", "A100", value="x"
            )
        },
        ["import", "amped", str(AMPED / "config.json"), "--lookup-tables", "{t.json}"],
        "amped lookup tables.accelerator_specifications.A100",
    ),
    (
        "amped-layers-nan",
        {
            "c.json": changed(
                AMPED / "config.json",
                "mapping_parameters",
                "parameters",
                "microbatch_size",
                value={"value": "nan"},
            )
        },
        ["import", "amped", "{c.json}", "--lookup-tables", str(AMPED / "lookup_tables.json")],
        "amped: parameter microbatch_size: nan is not allowed; must be a finite number",
    ),
    # calibrate
    (
        "steps-time-text",
        {"s.yaml": steps({"step_time_s": "fast"})},
        ["calibrate", "-s", "dgx-a100-80gb", "--steps", "{s.yaml}"],
        "--steps.runs[0].step_time_s: 'fast' is not allowed; must be a number",
    ),
    (
        "steps-time-inf",
        {"s.yaml": steps({"step_time_s": float("inf")})},
        ["calibrate", "-s", "dgx-a100-80gb", "--steps", "{s.yaml}"],
        "--steps.runs[0].step_time_s: inf is not allowed; must be a finite number",
    ),
    (
        "steps-run-not-mapping",
        {"s.yaml": "model: gpt3-125m\nruns: [3]\n"},
        ["calibrate", "-s", "dgx-a100-80gb", "--steps", "{s.yaml}"],
        "--steps.runs[0]: 3 is not allowed; must be a mapping",
    ),
    (
        "steps-duplicate-key",
        {"s.yaml": "model: a\nmodel: b\nruns: []\n"},
        ["calibrate", "-s", "dgx-a100-80gb", "--steps", "{s.yaml}"],
        "duplicate key 'model'",
    ),
    (
        "gemm-nan",
        {"g.csv": GEMM_CSV.replace("800", "nan")},
        ["calibrate", "-s", "dgx-a100-80gb", "--gemm", "{g.csv}"],
        "column 'time_us' must be a finite positive number",
    ),
    (
        "gemm-fraction",
        {"g.csv": GEMM_CSV.replace("4096,4096,4096", "4096.5,4096,4096")},
        ["calibrate", "-s", "dgx-a100-80gb", "--gemm", "{g.csv}"],
        "column 'm' must be a whole number",
    ),
    (
        "nccl-latin1",
        {"all_reduce_perf.txt": "# caf\xe9\n".encode("latin-1")},
        ["calibrate", "-s", "dgx-a100-80gb", "--nccl", "{all_reduce_perf.txt}"],
        "--nccl: ",
    ),
]


@pytest.mark.parametrize(
    ("files", "argv", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_interop_file_is_one_line_naming_the_field(cli, tmp_path, files, argv, message):
    paths = {name: write(tmp_path, name, content) for name, content in files.items()}
    code, _, err = cli(*[paths.get(a[1:-1], a) if a.startswith("{") else a for a in argv])
    assert code == 2 and message in err, err


def _leaves(data, prefix=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*prefix, key))
    elif isinstance(data, list) and data:
        yield prefix
        yield from _leaves(data[0], (*prefix, 0))
    else:
        yield prefix


def _mutants(path: Path):
    """The document with each field in turn (a leaf, a list's first item) replaced by a wrong type or deleted."""
    data = json.loads(path.read_text())
    for keys in _leaves(data):
        for value in ("x", None, [], "DELETE"):
            mutant = copy.deepcopy(data)
            target = mutant
            for key in keys[:-1]:
                target = target[key]
            if value == "DELETE":
                del target[keys[-1]]
            else:
                target[keys[-1]] = value
            yield keys, mutant


@pytest.mark.parametrize("which", ["model", "system", "execution"])
def test_every_calculon_field_mutated_keeps_the_contract(cli, tmp_path, which):
    """Every field of a real Calculon input, made a string, null, a list or missing: exit 0 (a field
    with a default) or one error line; the contract itself is checked by the ``cli`` fixture."""
    files = {"model": CALC_MODEL, "system": CALC_SYSTEM, "execution": CALC_EXEC}
    errors = 0
    for keys, mutant in _mutants(files[which]):
        argv = {
            **{k: str(v) for k, v in files.items()},
            which: write(tmp_path, f"{which}.json", mutant),
        }
        code, _, err = cli("import", "calculon", argv["model"], argv["system"], argv["execution"])
        errors += code == 2
    assert errors > 0
