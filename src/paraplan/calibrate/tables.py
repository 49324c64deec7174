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

import numpy as np
import yaml

from paraplan.calibrate.fit import EFF, FitPart, Residual, attention_flops, cache_resident
from paraplan.calibrate.readers import AttentionSample, GemmSample
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import attention_time_s, gemm_time_s, memory_time_s
from paraplan.io.documents import atomic_write_text
from paraplan.specs.system import SystemSpec

FILE_NAMES = {"gemm": "gemm.csv", "memory": "memory.csv"}


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
    """The shipped table whose files of these kinds hold exactly the given files' bytes, if any."""
    for name in kt.shipped_tables():
        folder = resources.files("paraplan.catalog") / "kernels" / name
        files = (yaml.safe_load((folder / "table.yaml").read_text(encoding="utf-8")) or {}).get(
            "files", {}
        )
        if all(
            kind in files and (folder / files[kind]).read_bytes() == path.read_bytes()
            for kind, path in kinds.items()
        ):
            return name
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


def attach(
    system: SystemSpec, base: SystemSpec, measured: Measured, folder: Path | None
) -> tuple[SystemSpec, FitPart]:
    """The system with the tables attached (shipped name, or a folder written at ``folder``)."""
    part = FitPart()
    kernel = base.accelerator.efficiency.attention_kernel
    if measured.attention:
        kernel = attention_kernel_of(measured.attention[0], kernel)
    kinds = _kinds(measured, kernel)
    ref = shipped_match(kinds)
    if ref is None and folder is None:
        part.notes["accelerator.kernel_tables"] = (
            "tables not attached: they are not a shipped table's files and no --out was given "
            "to write them next to"
        )
        return system, part
    if ref is None:
        write_table(folder, measured, kernel, base)
        ref = str(folder.resolve())
    kt.clear_caches()
    acc = system.accelerator
    eff = acc.efficiency.model_copy(update={"attention_kernel": kernel})
    acc = acc.model_copy(update={"kernel_tables": ref, "efficiency": eff})
    part.notes["accelerator.kernel_tables"] = f"measured tables attached: {ref}"
    if kernel != base.accelerator.efficiency.attention_kernel:
        part.notes[f"{EFF}.attention_kernel"] = f"{kernel}: the kernel the attention table measured"
    return SystemSpec.model_validate({**system.model_dump(), "accelerator": acc.model_dump()}), part


def _rel(source: str, what: str, pred, meas) -> Residual:
    rel = np.asarray(pred) / np.asarray(meas) - 1.0
    return Residual(
        source, what, len(rel), float(np.sqrt(np.mean(rel**2))), float(np.max(np.abs(rel)))
    )


def _loo(points, works, times, floor_s: float | None = None) -> list[float]:
    """Each row's time predicted by the interpolant of the other rows (cost.kernel_tables rule);
    ``floor_s`` replaces the other rows' smallest time as the floor where given."""
    out = []
    for i in range(len(points)):
        keep = [j for j in range(len(points)) if j != i]
        s = kt.scatter(
            [points[j] for j in keep], [works[j] for j in keep], [times[j] for j in keep]
        )
        out.append(max(works[i] / s.rate(points[i]), s.floor_s if floor_s is None else floor_s))
    return out


def _groups(rows, key):
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def table_residuals(system: SystemSpec, measured: Measured) -> list[Residual]:
    """Attached-table and leave-one-out residuals of each given table (module docstring)."""
    acc, out = system.accelerator, []
    if not acc.kernel_tables:
        return out
    if measured.gemm:
        src, rows = measured.gemm[0].name, measured.gemm[1]
        pred = [
            gemm_time_s(2.0 * s.batch * s.m * s.n * s.k, (s.batch, s.m, s.n, s.k), acc, s.dtype)
            for s in rows
        ]
        out.append(_rel(src, "GEMMs, attached table", pred, [s.time_s for s in rows]))
        loo, meas = [], []
        for group in _groups(rows, lambda s: "bf16" if s.dtype == "fp16" else s.dtype).values():
            pts = [(s.batch * s.m, s.n, s.k) for s in group]
            loo += _loo(pts, [2.0 * p[0] * p[1] * p[2] for p in pts], [s.time_s for s in group])
            meas += [s.time_s for s in group]
        out.append(_rel(src, "GEMMs, table leave-one-out", loo, meas))
    if measured.attention:
        src, rows = measured.attention[0].name, measured.attention[1]
        pred = [
            attention_time_s(
                *attention_flops(s),
                acc,
                s.dtype,
                (s.seq_len, s.seq_len, s.head_dim, s.causal),
                s.direction,
            )
            for s in rows
        ]
        out.append(_rel(src, "fused attention, attached table", pred, [s.time_s for s in rows]))
        loo, meas = [], []
        for group in _groups(rows, lambda s: (s.head_dim, s.causal, s.direction)).values():
            works = [
                kt.attention_work(s.batch, s.heads, s.seq_len, s.head_dim, s.causal, s.direction)
                for s in group
            ]
            loo += _loo([(s.seq_len,) for s in group], works, [s.time_s for s in group], 0.0)
            meas += [s.time_s for s in group]
        out.append(_rel(src, "fused attention, table leave-one-out", loo, meas))
    if measured.memory:
        src, rows = measured.memory[0].name, measured.memory[1]
        cached = cache_resident(rows, system)
        hbm = [r for r, c in zip(rows, cached) if not c]
        pred = [memory_time_s(b, acc) for b, _ in hbm]
        out.append(
            _rel(src, "memory copies (HBM-resident), attached table", pred, [t for _, t in hbm])
        )
        floor = min(t for _, t in rows)  # the copies' launch floor: every row, cache-resident too
        loo = _loo([(b,) for b, _ in hbm], [b for b, _ in hbm], [t for _, t in hbm], floor)
        out.append(
            _rel(src, "memory copies (HBM-resident), table leave-one-out", loo, [t for _, t in hbm])
        )
        if any(cached):
            cache = [r for r, c in zip(rows, cached) if c]
            pred = [memory_time_s(b, acc) for b, _ in cache]
            out.append(
                _rel(
                    src,
                    "memory copies (L2-resident, priced as HBM by rule)",
                    pred,
                    [t for _, t in cache],
                )
            )
    return out
