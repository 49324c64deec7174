"""A calibrated system against its catalog base on the project's validation cases (issue 32: a
calibrated system never predicts worse than the catalog one).

Each bundled case (validate/cases) whose system has the calibrated system's accelerator is run
twice: as the case file states it, and with the calibrated accelerator in place of the catalog one
(node and network kept: a kernel calibration says nothing about them), the case's framework profile
applied to either as ``paraplan validate`` applies it (cost.frameworks). Step-time MAPE per case file.

``python -m paraplan.calibrate.compare [--system FILE | --base SYSTEM --table TABLE] [--by-kind]``
prints the table docs/calibration.md quotes; without ``--system`` it calibrates ``--base``
(dgx-h100-80gb) on the GEMM, cuDNN attention and copy files of the shipped table ``--table``
(h100-sxm5-80gb) as docs/calibration.md does (``shipped_calibrated``). ``--by-kind`` adds, per table
kind the calibrated system attached, the calibrated MAPE with that kind alone attached (``by_kind``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from paraplan.catalog import load_system
from paraplan.cost.table_refs import FIELD, split_ref, with_kinds
from paraplan.specs.errors import InputError
from paraplan.specs.fields import with_fields
from paraplan.specs.system import SystemSpec
from paraplan.validate.case_files import Case, _case_from_raw, _read_case_file, bundled_case_files
from paraplan.validate.run import mape, run_case

H100_TABLE = "h100-sxm5-80gb"
H100_FILES = {"gemm": "gemm.csv", "attention": "attention_cudnn.csv", "memory": "memory.csv"}


@dataclass
class FileErrors:
    """Step-time errors (%) of one case file's cases: catalog system, calibrated accelerator."""

    catalog: list[float] = field(default_factory=list)
    calibrated: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def shipped_calibrated(base: str, table: str) -> SystemSpec:
    """System ``base`` calibrated on the GEMM, cuDNN attention and copy files of the shipped kernel
    table ``table`` (docs/calibration.md's command), those of them the table has (a published GEMM
    table, b200-simumax, has only its GEMM file)."""
    from paraplan.calibrate import calibrate

    folder = Path(str(resources.files("paraplan.catalog") / "kernels" / table))
    if not (folder / "table.yaml").is_file():
        raise InputError(
            f"--table: {table!r} is not a shipped kernel table (paraplan systems --tables)"
        )
    files = {k: folder / v for k, v in H100_FILES.items() if (folder / v).is_file()}
    return calibrate(load_system(base), **files).system


def shipped_h100() -> SystemSpec:
    """dgx-h100-80gb calibrated on the shipped H100 SXM tables (docs/calibration.md's command)."""
    return shipped_calibrated("dgx-h100-80gb", H100_TABLE)


def _step_error(case: Case) -> float | None:
    entry = run_case(case)
    if entry["status"] != "ok":
        return None
    return entry["error_pct"].get("step_time_s")


def compare(calibrated: SystemSpec, paths: list[Path] | None = None) -> dict[str, FileErrors]:
    """Per case file, the step-time errors of its cases on the calibrated system's accelerator,
    with the catalog system as stated and with the calibrated accelerator (module docstring)."""
    acc = calibrated.accelerator.model_dump()
    out: dict[str, FileErrors] = {}
    for path in paths or bundled_case_files():
        stem, raws = _read_case_file(path)
        for i, raw in enumerate(raws):
            try:  # the accelerator first: most cases run on others, and building a Case costs more
                base = load_system(raw.get("system"), "system", True)
            except InputError:
                continue  # _case_from_raw refuses it too
            if base.accelerator.name != calibrated.accelerator.name:
                continue
            case = _case_from_raw(raw, stem, i)
            if not isinstance(case, Case) or "step_time_s" not in case.measured:
                continue
            system = with_fields(base, {"accelerator": acc}).model_dump()
            swapped = _case_from_raw({**raw, "system": system}, stem, i)
            before = _step_error(case)
            after = _step_error(swapped) if isinstance(swapped, Case) else None
            if before is None or after is None:
                continue
            errs = out.setdefault(stem, FileErrors())
            errs.catalog.append(before)
            errs.calibrated.append(after)
            errs.names.append(case.name)
    return out


def by_kind(
    calibrated: SystemSpec, paths: list[Path] | None = None
) -> dict[str, dict[str, FileErrors]]:
    """Per table kind the calibrated system attached (``accelerator.kernel_tables``' ``[kind,...]``), the
    comparison with that kind alone attached and the rest of the calibrated accelerator kept (its
    shares and caps): which table moves a case file. Empty where no kind list is attached."""
    ref = calibrated.accelerator.kernel_tables
    table, kinds = split_ref(ref) if ref else (None, None)
    out: dict[str, dict[str, FileErrors]] = {}
    for kind in kinds or ():
        alone = with_fields(calibrated, {FIELD: with_kinds(table, [kind])})
        out[kind] = compare(alone, paths)
    return out


def markdown(
    results: dict[str, FileErrors], kinds: dict[str, dict[str, FileErrors]] | None = None
) -> str:
    """The comparison as a markdown table; with ``kinds`` (``by_kind``) a column per table kind."""
    kinds = kinds or {}
    extra = "".join(f" {k} alone % |" for k in kinds)
    lines = [
        "| case file | step-time cases | catalog MAPE % | calibrated MAPE % |" + extra,
        "|---|---:|---:|---:|" + "---:|" * len(kinds),
    ]
    for stem, e in results.items():
        mapes = mape(e.catalog), mape(e.calibrated)
        alone = "".join(f" {mape(k[stem].calibrated):.2f} |" for k in kinds.values())
        lines.append(f"| {stem} | {len(e.catalog)} | {mapes[0]:.2f} | {mapes[1]:.2f} |" + alone)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m paraplan.calibrate.compare")
    parser.add_argument("--system", help="a calibrated system file (default: --base on --table)")
    parser.add_argument("--base", default="dgx-h100-80gb", help="catalog system to calibrate")
    parser.add_argument("--table", default=H100_TABLE, help="shipped kernel table to calibrate on")
    parser.add_argument(
        "--by-kind", action="store_true", help="also each attached table kind alone (by_kind)"
    )
    args = parser.parse_args(argv)
    try:
        system = (
            load_system(args.system) if args.system else shipped_calibrated(args.base, args.table)
        )
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(markdown(compare(system), by_kind(system) if args.by_kind else None))


if __name__ == "__main__":
    main()
