"""Attach the measured kernel tables to the calibrated system, and say how well it reproduces them.

``paraplan calibrate`` fits the analytical forms' constants (cost.compute) to the GEMM, attention
and memory tables, and then attaches the tables themselves (``accelerator.kernel_tables``): the
calibrated system prices every kernel a table covers from the table (cost.kernel_tables), and uses
the fitted analytical constants only where no table reaches (other dtypes, attention kernels,
unmeasured kinds). When the given files are a shipped table's files, the shipped name is attached;
otherwise the tables are written, with provenance, to a folder next to the system file.

Residuals per table: the analytical fallback's (fit.py), the attached table's (each row priced by
the calibrated system through the cost functions) and the table's leave-one-out interpolation
error (each row priced from the other rows: how well the table predicts a shape it has not seen).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from paraplan.calibrate.fit import FitPart, Residual
from paraplan.calibrate.readers import AttentionSample, GemmSample
from paraplan.cost import kernel_tables as kt
from paraplan.cost.table_refs import with_kinds
from paraplan.io.documents import atomic_write_text
from paraplan.specs.fields import with_fields
from paraplan.specs.system import SystemSpec
from paraplan.validate import tables as validate_tables


@dataclass
class Measured:
    """The kernel tables given to calibrate: paths and parsed rows."""

    gemm: tuple[Path, list[GemmSample]] | None = None
    attention: tuple[Path, list[AttentionSample]] | None = None
    memory: tuple[Path, list[tuple[float, float]]] | None = None

    def any(self) -> bool:
        return bool(self.gemm or self.attention or self.memory)


def attention_kernel_of(path: Path, default: str) -> str:
    """The attention kernel a table measured, from its file name (flash / fa2, fa3, cudnn), else ``default``."""
    name = path.name.lower()
    for key, kernel in (("fa3", "fa3"), ("cudnn", "cudnn"), ("flash", "fa2"), ("fa2", "fa2")):
        if key in name:
            return kernel
    return default


def _kinds(measured: Measured, kernel: str) -> dict[str, Path]:
    kinds = {}
    if measured.gemm:
        kinds["gemm"] = measured.gemm[0]
    if measured.attention:
        kinds[f"attention_{kernel}"] = measured.attention[0]
    if measured.memory:
        kinds["memory"] = measured.memory[0]
    return kinds


def shipped_match(kinds: dict[str, Path]) -> str | None:
    """The shipped table whose files of these kinds hold exactly the given files' bytes, if any: its
    name, restricted to the given kinds (cost.table_refs.with_kinds) where it holds others too."""
    for name in kt.shipped_tables():
        folder = resources.files("paraplan.catalog") / "kernels" / name
        files = (yaml.safe_load((folder / "table.yaml").read_text(encoding="utf-8")) or {}).get(
            "files", {}
        )
        if all(
            kind in files and (folder / files[kind]).read_bytes() == path.read_bytes()
            for kind, path in kinds.items()
        ):
            return name if set(files) == set(kinds) else with_kinds(name, list(kinds))
    return None


def _csv(header: str, rows: list[str]) -> str:
    return header + "\n" + "\n".join(rows) + "\n"


def write_table(folder: Path, measured: Measured, kernel: str, base: SystemSpec) -> None:
    """The given tables as a kernel-table folder (CSV in time_us, table.yaml with provenance)."""
    files, texts = {}, {}
    if measured.gemm:
        files["gemm"] = "gemm.csv"
        texts["gemm.csv"] = _csv(
            "m,n,k,dtype,time_us",
            [
                f"{s.batch * s.m},{s.n},{s.k},{s.dtype},{s.time_s * 1e6:.6g}"
                for s in measured.gemm[1]
            ],
        )
    if measured.attention:
        files[f"attention_{kernel}"] = f"attention_{kernel}.csv"
        texts[f"attention_{kernel}.csv"] = _csv(
            "batch,heads,seq_len,head_dim,causal,direction,dtype,time_us",
            [
                f"{s.batch},{s.heads},{s.seq_len},{s.head_dim},{int(s.causal)},{s.direction},"
                f"{s.dtype},{s.time_s * 1e6:.6g}"
                for s in measured.attention[1]
            ],
        )
    if measured.memory:
        files["memory"] = "memory.csv"
        texts["memory.csv"] = _csv(
            "bytes,time_us", [f"{b:.0f},{t * 1e6:.6g}" for b, t in measured.memory[1]]
        )
    sources = [str(p[0]) for p in (measured.gemm, measured.attention, measured.memory) if p]
    meta = {
        "device": f"the accelerator of system {base.name} ({base.accelerator.name}) as measured",
        "software": "as measured (not recorded by paraplan calibrate)",
        "date": _dt.date.today().isoformat(),
        "source": "paraplan calibrate, copied from: " + ", ".join(sources),
        "accelerators": [base.accelerator.name],
        "files": files,
    }
    for name, text in texts.items():
        atomic_write_text(folder / name, text, make_parents=True)
    atomic_write_text(folder / "table.yaml", yaml.safe_dump(meta, sort_keys=False), True)


def with_attention_kernel(system: SystemSpec, kernel: str) -> SystemSpec:
    """The system with ``efficiency.attention_kernel`` set (the kernel an attention table measured)."""
    return with_fields(system, {"accelerator.efficiency.attention_kernel": kernel})


def attach(
    system: SystemSpec, base: SystemSpec, measured: Measured, folder: Path | None
) -> tuple[SystemSpec, FitPart, bool]:
    """The system with the tables attached (shipped name, or a folder written at ``folder``), the
    notes, and whether they were attached."""
    part = FitPart()
    kernel = base.accelerator.efficiency.attention_kernel
    if measured.attention:
        kernel = attention_kernel_of(measured.attention[0], kernel)
    kinds = _kinds(measured, kernel)
    ref = shipped_match(kinds)  # only the kinds given: the table's other files stay out
    if ref is None and folder is None:
        part.notes["accelerator.kernel_tables"] = (
            "tables not attached: they are not a shipped table's files and no --out was given "
            "to write them next to"
        )
        return system, part, False
    if ref is None:
        write_table(folder, measured, kernel, base)
        ref = str(folder.resolve())
    kt.clear_caches()
    part.notes["accelerator.kernel_tables"] = f"measured tables attached: {ref}"
    return with_fields(system, {"accelerator.kernel_tables": ref}), part, True


def table_residuals(system: SystemSpec) -> list[Residual]:
    """The attached table's residuals per file (validate.tables: each row priced by the calibrated
    system, and the table's leave-one-out interpolation error)."""
    return [
        Residual(r.file, r.what, r.points, r.rms_rel, r.max_rel)
        for r in validate_tables.table_residuals(system)
    ]
