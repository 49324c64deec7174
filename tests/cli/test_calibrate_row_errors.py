"""`paraplan calibrate`'s CSV readers: a value a column does not take is one line ``--FLAG: FILE line N: ...``
naming the column, the value and what is allowed, exit 2 (calibrate.readers.each_row writes the row's place for
every reader and for the fits' per-row errors); the causal column takes 1/0, true/false, yes/no and cuDNN's
SDPA-benchmark mask names (cost.kernel_tables.CAUSAL_WORDS), nothing else (it read 'maybe' as non-causal)."""

from __future__ import annotations

import pytest

from paraplan.calibrate.readers import read_attention_table
from paraplan.calibrate.synthetic import write_samples
from paraplan.cost import kernel_tables as kt
from paraplan.specs.errors import InputError


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    folder = tmp_path_factory.mktemp("samples")
    write_samples(folder)
    return folder


def _edited(samples, name: str, line: int, old: str, new: str, out):
    """The sample table ``name`` with ``old`` replaced by ``new`` on its line ``line`` (header: 1)."""
    lines = (samples / name).read_text().splitlines()
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    path = out / f"edited-{name}"
    path.write_text("\n".join(lines) + "\n")
    return path


def _error(cli, *argv) -> str:
    code, _, err = cli("calibrate", "-s", "dgx-h100-80gb", *argv, "-o", "/dev/null")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("word", ["maybe", "2", "causal", "bottom-right"])
def test_a_causal_word_it_does_not_know_is_refused(cli, samples, tmp_path, word):
    path = _edited(samples, "attention.csv", 3, ",1,bwd,", f",{word},bwd,", tmp_path)
    assert _error(cli, "--attention", str(path)) == (
        f"error: --attention: {path.name} line 3: causal {word!r} is not allowed; allowed: 1, true, yes, "
        "top_left, bottom_right, 0, false, no, no_mask (any case)"
    )


@pytest.mark.parametrize(
    ("word", "causal"),
    [("1", True), ("TRUE", True), ("yes", True), ("top_left", True), ("bottom_right", True)]
    + [("0", False), ("False", False), ("no", False), ("no_mask", False), ("", True)],
)
def test_the_causal_words(samples, tmp_path, word, causal):
    path = _edited(samples, "attention.csv", 2, ",1,fwd,", f",{word},fwd,", tmp_path)
    assert read_attention_table(path)[0].causal is causal  # empty: the column's default, causal


def test_the_shipped_tables_read_their_causal_flag_by_the_same_words():
    assert kt.csv_causal("no_mask") is False and kt.csv_causal(" Top_Left ") is True
    with pytest.raises(
        InputError, match=r"^attention_cudnn.csv row 3: causal '0.5' is not allowed"
    ):
        kt.csv_causal("0.5", "attention_cudnn.csv row 3")


def test_a_bad_dtype_names_the_row_in_every_reader(cli, samples, tmp_path):
    allowed = "allowed: fp32, tf32, fp16, bf16, fp8, nvfp4, mxfp4"
    for flag in ("attention", "gemm"):
        path = _edited(samples, f"{flag}.csv", 4, ",bf16,", ",bf17,", tmp_path)
        assert _error(cli, f"--{flag}", str(path)) == (
            f"error: --{flag}: {path.name} line 4: dtype 'bf17' is not allowed; {allowed}"
        )


def test_a_dtype_the_accelerator_has_no_rate_for_names_the_row(cli, samples, tmp_path):
    """The fit's per-row errors (here the GEMM peak of a dtype V100 lacks) carry the row's place too."""
    path = _edited(samples, "gemm.csv", 3, ",bf16,", ",fp8,", tmp_path)
    code, _, err = cli("calibrate", "-s", "dgx-1-v100", "--gemm", str(path), "-o", "/dev/null")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"error: --gemm: {path.name} line 3: dtype: 'fp8' is not supported by accelerator V100"
    )


def test_a_memory_row_names_its_line(cli, samples, tmp_path):
    text = (samples / "memory.csv").read_text().splitlines()
    _, time_us = text[2].split(",")
    path = _edited(samples, "memory.csv", 3, f",{time_us}", ",fast", tmp_path)
    assert _error(cli, "--memory", str(path)) == (
        f"error: --memory: {path.name} line 3: column 'time_us' must be a number, got 'fast'"
    )


def test_a_memory_row_too_fast_is_named_by_its_line_past_cache_resident_rows(
    cli, samples, tmp_path
):
    """The L2-resident rows left out of the HBM fit still count in the line numbers (they did not)."""
    lines = (samples / "memory.csv").read_text().splitlines()
    big = max(range(1, len(lines)), key=lambda i: float(lines[i].split(",")[0]))
    size, time_us = lines[big].split(",")
    path = _edited(
        samples, "memory.csv", big + 1, f",{time_us}", f",{float(time_us) / 100}", tmp_path
    )
    assert _error(cli, "--memory", str(path)).startswith(
        f"error: --memory: {path.name} line {big + 1}: "
    )
    assert kt.l2_resident(float(lines[1].split(",")[0]), 50e6)  # the first rows are cache-resident


def test_one_non_causal_row_calibrates(cli, samples, tmp_path):
    """A group of one row (one non-causal forward row) has no leave-one-out (no other row predicts
    it): calibrate writes the system, not an internal error."""
    path = _edited(samples, "attention.csv", 2, ",1,fwd,", ",no_mask,fwd,", tmp_path)
    code, _, err = cli(
        "calibrate", "-s", "dgx-h100-80gb", "--attention", str(path), "-o", "/dev/null"
    )
    assert code == 0, err
    assert "table leave-one-out: RMS" in err and "over 7 points" in err
