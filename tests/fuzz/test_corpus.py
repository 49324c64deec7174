"""The reproducers of issue 13, one per class: each ends with one line on stderr and exit 2 (or
succeeds where the input is valid), promptly, with no traceback. Runs the CLI in this process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paraplan.io.documents import MAX_INPUT_BYTES

TINY = {"layers": 2, "hidden": 64, "heads": 8, "ffn_hidden": 256, "vocab": 1000}
SEARCH = [
    "search",
    "--model",
    "gpt3-125m",
    "--system",
    "dgx-a100-80gb",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--tp",
    "1,2",
    "--pp",
    "1,2",
    "--no-offload",
    "--default-overlap",
    "--default-placement",
]
ESTIMATE = ["estimate", "--gpus", "8", "--global-batch", "8"]
A100 = ["--system", "dgx-a100-80gb"]
SWEEP = [
    "sweep",
    "--model",
    "gpt3-125m",
    "--system",
    "dgx-a100-80gb",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--tp",
    "1,2",
    "--pp",
    "1",
    "--no-offload",
    "--default-overlap",
    "--default-placement",
    "--no-plot",
]


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


# ---- files that are not what they claim ----------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bin.yaml", bytes(range(256)) * 4, "is not UTF-8 text"),
        ("latin1.yaml", "name: caf\xe9\nlayers: 2\n".encode("latin-1"), "is not UTF-8 text"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nests deeper than"),
        ("deep.yaml", "a: " + "[" * 100_000, "nests deeper than"),
        (
            "deep_block.yaml",
            "".join(" " * i + f"k{i}:\n" for i in range(700)) + " " * 700 + "v: 1\n",
            "nests",
        ),
        ("list.yaml", "- 1\n- 2\n", "must hold a mapping"),
        ("nan.json", '{"layers": NaN}', "NaN is not a number paraplan accepts"),
        ("dup.yaml", "layers: 2\nlayers: 3\n", "duplicate key 'layers'"),
        ("dup.json", '{"layers": 2, "layers": 3}', "duplicate key 'layers'"),
        (
            "layers.yaml",
            "layers: 1.0e30\nhidden: 64\nheads: 8\nffn_hidden: 256\nvocab: 1000\n",
            "model.layers",
        ),
        (
            "bool.yaml",
            "layers: true\nhidden: 64\nheads: 8\nffn_hidden: 256\nvocab: 1000\n",
            "model.layers",
        ),
        (
            "escape.yaml",
            'name: "\\e[31mred"\nlayers: 2\nhidden: 64\nheads: 8\nffn_hidden: 256\nvocab: 1000\n',
            "control characters",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and v.endswith((".yaml", ".json")) else "",
)
def test_bad_model_files(cli, tmp_path, name, content, message):
    code, _, err = cli(*ESTIMATE, *A100, "--model", write(tmp_path, name, content))
    assert code == 2 and message in err
    assert "\x1b" not in err


def test_dev_zero_is_refused_at_once(cli):
    code, _, err = cli(*ESTIMATE, "--model", "gpt3-125m", "--system", "/dev/zero")
    assert code == 2 and f"larger than {MAX_INPUT_BYTES // 2**20} MiB" in err


def test_a_directory_is_not_a_file(cli, tmp_path):
    code, _, err = cli(*ESTIMATE, "--model", "gpt3-125m", "--system", str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_json_with_a_byte_order_mark_is_read(cli, tmp_path):
    path = write(tmp_path, "bom.json", b"\xef\xbb\xbf" + json.dumps(TINY).encode())
    code, out, err = cli(*ESTIMATE, *A100, "--model", path, codes=(0,))
    assert "bom" in out


# ---- values outside what the model can represent ---------------------------------------------
SYSTEM_A100 = "dgx-a100-80gb"


def system_file(tmp_path: Path, **changes) -> str:
    from paraplan.catalog import load_system

    data = json.loads(load_system(SYSTEM_A100).model_dump_json())
    for path, value in changes.items():
        keys = path.split("__")
        target = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    import yaml

    return write(tmp_path, "system.yaml", yaml.safe_dump(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"accelerator__hbm_capacity": float("inf")}, "hbm_capacity"),
        ({"accelerator__hbm_bandwidth": 1e-300}, "outside the meaningful range"),
        ({"node__nvlink_bandwidth": "1e-300 GB/s"}, "outside the meaningful range"),
        ({"accelerator__matrix_flops__bf16": float("nan")}, "finite"),
        ({"price_per_gpu_hour": float("inf")}, "price_per_gpu_hour"),
        ({"price_per_gpu_hour": 0}, "price_per_gpu_hour"),
        ({"accelerator__reserved_memory": "100 GiB"}, "reserved_memory"),
        ({"accelerator__sm_count": "108"}, "sm_count"),
    ],
)
def test_degenerate_system_values(cli, tmp_path, change, message):
    code, _, err = cli(
        *ESTIMATE, "--model", "gpt3-125m", "--system", system_file(tmp_path, **change)
    )
    assert code == 2 and message in err


@pytest.mark.parametrize(
    "argv",
    [
        [*SEARCH[:6], "--gpus", "99999999999999999999999", "--global-batch", "16"],
        [*SEARCH[:6], "--gpus", "1099511627776", "--global-batch", "16"],
        [*SEARCH[:6], "--gpus", "1024", "--global-batch", "100000000000000000000000"],
        [*SEARCH[:6], "--gpus", "8", "--global-batch", "1e23"],
        [*SEARCH, "--top", "1000000"],
        [*SEARCH, "--dtype", "fp8"],
        [*SWEEP, "--dtype", "fp8"],
        [*SWEEP, "--top", "1000000"],
        [*SWEEP, "--set", "accelerator.hbm_bandwidth=1e-300"],
        [*SWEEP, "--gpus", "99999999999999999999999"],
        [*SWEEP, "--tokens", "inf"],
        [*ESTIMATE, *A100, "--model", "gpt3-125m", "--tokens", "inf"],
        [*ESTIMATE, *A100, "--model", "gpt3-125m", "--tokens", "nan"],
        [*ESTIMATE, *A100, "--model", "gpt3-125m", "--gpus", "16"],  # a repeated option
        ["sweep", *SWEEP[1:], "--dask", "tcp://localhost:99999"],
    ],
)
def test_out_of_range_options(cli, tmp_path, argv):
    code, _, _ = cli(*argv, *(["--out", str(tmp_path / "out")] if argv[0] == "sweep" else []))
    assert code == 2


def test_vocab_smaller_than_tp_searches(cli, tmp_path):
    path = write(tmp_path, "tiny.json", json.dumps(dict(TINY, vocab=4)))
    cli(
        "search",
        "--model",
        path,
        "--system",
        SYSTEM_A100,
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--top",
        "2",
        codes=(0,),
    )
    cli(*SWEEP[:1], "--model", path, *SWEEP[3:], "--out", str(tmp_path / "s"), codes=(0,))


# ---- Hugging Face configs -------------------------------------------------------------------------
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-5,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": 5, "model_type": None}, "architectures"),
        ({"hidden_size": "256"}, "hidden_size"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
        ({"num_hidden_layers": True}, "num_hidden_layers"),
        ({"num_local_experts": 8, "model_type": "mistral"}, "mixture-of-experts"),
        (
            {"architectures": ["MixtralForCausalLM"], "model_type": None},
            "num_local_experts: missing",
        ),  # read by hf_moe
        ({"architectures": ["Qwen2MoeForCausalLM"], "model_type": None}, "num_experts: missing"),
        ({"architectures": ["DbrxForCausalLM"], "model_type": None}, "mixture-of-experts"),
        (
            {"architectures": ["BertModel"], "model_type": None, "type_vocab_size": 2},
            "architectures",
        ),
        ({"architectures": ["OlmoForCausalLM"], "model_type": None}, "architectures"),
    ],
)
def test_bad_hf_configs(cli, tmp_path, change, message):
    data = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    code, _, err = cli(
        *ESTIMATE, *A100, "--model", write(tmp_path, "config.json", json.dumps(data))
    )
    assert code == 2 and message in err


# ---- outputs: full disk, the user's files --------------------------------------------------------
def test_csv_to_a_full_disk(cli):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    code, _, err = cli(*SEARCH, "--csv", "/dev/full")
    assert code == 2 and "No space left" in err


def test_failed_search_keeps_the_old_csv(cli, tmp_path):
    old = tmp_path / "plans.csv"
    old.write_text("my old results\n")
    code, _, _ = cli(
        *SEARCH[:6], "--gpus", "8", "--global-batch", "3", "--csv", str(old)
    )  # 3 is no multiple of dp
    assert code == 2 and old.read_text() == "my old results\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plans.csv"]  # no temporary file left
    cli(*SEARCH, "--csv", str(old), codes=(0,))
    assert old.read_text().startswith("rank,plan_label")


def test_sweep_into_a_non_empty_directory(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = cli(*SWEEP, "--out", str(out))
    assert code == 2 and "is not empty" in err and "--resume" in err and "--force" in err
    cli(*SWEEP, "--out", str(out), "--force", codes=(0,))
    assert (out / "notes.txt").read_text() == "mine" and (out / "sweep.json").exists()


def test_malformed_journal_lines_are_searched_again(cli, tmp_path):
    out = tmp_path / "out"
    cli(*SWEEP, "--out", str(out), codes=(0,))
    before = (out / "sweep.json").read_bytes()
    lines = (out / "points.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    broken = [
        dict(first, memory=None),
        {k: v for k, v in first.items() if k != "breakdown"},
        dict(first, key="other"),
        [1, 2],
        "text",
        dict(first, step_time_s="fast"),
    ]
    (out / "points.jsonl").write_text("".join(json.dumps(b) + "\n" for b in broken) + "{torn")
    code, out_text, _ = cli(*SWEEP, "--out", str(out), "--resume", codes=(0,))
    assert "1 points searched" in out_text and "resumed" not in out_text  # the one point, again
    assert (out / "sweep.json").read_bytes() == before


def test_validate_gate_cannot_pass_on_nothing(cli, tmp_path):
    empty = write(tmp_path, "empty.json", '{"cases": []}')
    code, _, err = cli("validate", "--cases", empty, "--max-mape", "100", codes=(1,))
    assert "nothing to pass" in err
    nan = write(
        tmp_path,
        "nan.yaml",
        "cases:\n- name: x\n  source: s\n  model: gpt3-125m\n  system: dgx-a100-80gb\n"
        "  plan: {gpus: 8, tp: 1, pp: 1, dp: 8, micro_batch: 1, global_batch: 8, seq_length: 2048}\n"
        "  measured: {step_time_s: .nan}\n",
    )
    code, _, err = cli("validate", "--cases", nan, "--max-mape", "100", codes=(2,))
    assert "step_time_s" in err


def test_plot_refuses_nan_and_negative_times(cli, tmp_path):
    bad = write(tmp_path, "sweep.json", '{"sweep": {}, "points": [{"step_time_s": NaN}]}')
    assert cli("plot", bad)[0] == 2
    bad = write(tmp_path, "sweep2.json", '{"sweep": {}, "points": [{"step_time_s": -1.0}]}')
    code, _, err = cli("plot", bad)
    assert code == 2 and "must be >= 0" in err


def test_brackets_inside_strings_do_not_count_as_nesting():
    """The cheap nesting pre-check skips double-quoted strings: a note that quotes 100 unclosed "[" (AMP's records
    quote "[b_i, b_{i+1})" once per record) is not deep; real nesting past the limit still is."""
    from paraplan.io.documents import MAX_NESTING, parse_document
    from paraplan.specs.errors import InputError

    text = json.dumps({"notes": "[" * 100 + '\\" {', "cases": [[1]]})
    assert parse_document(text, "x.json", "cases", True)["cases"] == [[1]]
    with pytest.raises(InputError, match="nests deeper"):
        parse_document("[" * (MAX_NESTING + 2) + "]" * (MAX_NESTING + 2), "x.json", "cases", True)
