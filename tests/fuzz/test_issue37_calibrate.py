"""Issue 37: ``calibrate`` refuses measured data faster than the system's peak (more than 1.05×
peak FLOP/s or bandwidth: wrong units or another system; it accepted data 8,000× faster), and the
calibrated YAML always reloads, whatever the run names hold (a newline ended a comment)."""

from __future__ import annotations

import re

import pytest
import yaml

from paraplan.calibrate import calibrate, system_yaml
from paraplan.calibrate.synthetic import BASE_SYSTEM, write_samples
from paraplan.catalog import load_system
from paraplan.io.terminal import printable
from paraplan.specs.errors import InputError
from paraplan.specs.system import SystemSpec


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    folder = tmp_path_factory.mktemp("samples")
    write_samples(folder)
    return folder


def _faster(path, column: str, factor: float, out):
    """The CSV at ``path`` with every value of ``column`` divided by ``factor``, written to ``out``."""
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    at = header.index(column)
    rows = [line.split(",") for line in lines[1:]]
    for row in rows:
        row[at] = repr(float(row[at]) / factor)
    out.write_text("\n".join([lines[0], *(",".join(r) for r in rows)]) + "\n")
    return out


@pytest.mark.parametrize("flag", ["gemm", "attention", "memory"])
def test_kernel_data_faster_than_the_peak_are_refused(samples, tmp_path, flag):
    source = samples / f"{flag}.csv"
    column = next(c for c in source.read_text().splitlines()[0].split(",") if c.startswith("time"))
    calibrate(load_system(BASE_SYSTEM), **{flag: source})  # the synthetic data are within the peak
    for factor in (8000.0, 3.0):
        fast = _faster(source, column, factor, tmp_path / f"{flag}.csv")
        with pytest.raises(InputError, match=rf"--{flag}: {flag}.csv line \d+: .*× faster than"):
            calibrate(load_system(BASE_SYSTEM), **{flag: fast})


def test_nccl_data_faster_than_the_links_are_refused(samples, tmp_path):
    source = sorted(samples.glob("*_perf_*.txt"))[0]
    text = source.read_text()
    # nccl-tests rows: size count type redop root time algbw busbw ...; divide every time by 8000
    fast_lines = []
    for line in text.splitlines():
        cols = line.split()
        if cols and cols[0].isdigit() and len(cols) > 6:
            out_of_place = line.index(cols[5], len(" ".join(cols[:5])))
            line = line[:out_of_place] + re.sub(
                r"\d+\.\d+", lambda m: f"{float(m.group()) / 8000:.4f}", line[out_of_place:], 1
            )
        fast_lines.append(line)
    fast = tmp_path / source.name
    fast.write_text("\n".join(fast_lines) + "\n")
    calibrate(load_system(BASE_SYSTEM), nccl=[str(source)])
    with pytest.raises(InputError, match="--nccl: .*faster than the system's peak link bandwidth"):
        calibrate(load_system(BASE_SYSTEM), nccl=[str(fast)])


def test_step_times_faster_than_the_peak_are_refused(samples, tmp_path):
    data = yaml.safe_load((samples / "steps.yaml").read_text())
    data["runs"][1]["step_time_s"] /= 8000.0
    path = tmp_path / "steps.yaml"
    path.write_text(yaml.safe_dump(data))
    name = data["runs"][1]["name"]
    with pytest.raises(InputError, match=rf"--steps: steps.yaml: run {name}: .*MFU above 1.05"):
        calibrate(load_system(BASE_SYSTEM), steps=path)


@pytest.mark.parametrize("name", ["a\nb", "x\n- evil: 1\n# y", "tab\there", "\x1b[31mred", "a\rb"])
def test_any_run_name_gives_a_yaml_that_reloads(samples, tmp_path, name):
    data = yaml.safe_load((samples / "steps.yaml").read_text())
    data["runs"] = data["runs"][:2]
    data["runs"][0]["name"] = name
    path = tmp_path / "steps.yaml"
    path.write_text(yaml.safe_dump(data))
    cal = calibrate(load_system(BASE_SYSTEM), steps=path, name="cal\nname")
    text = system_yaml(cal)  # write, then load
    reloaded = SystemSpec.model_validate(yaml.safe_load(text))
    assert reloaded.name == "cal\nname"
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert any(line.startswith(f"#   {printable(name)}: measured") for line in comments)
    assert "- evil" not in yaml.safe_load(text) and "- evil: 1" not in text.splitlines()
