"""Parse quantities written with units ("80 GiB", "3.35 TB/s", "989 TFLOPS", "400 Gb/s").

Everything inside paraplan is SI: bytes, bytes per second, FLOP/s, seconds. Decimal prefixes
(k, M, G, T, P) are powers of 1000, binary prefixes (Ki, Mi, Gi, Ti) powers of 1024; a lower-case
``b`` means bits (divided by 8).
"""

from __future__ import annotations

import math
import re
from typing import Literal

Kind = Literal["bytes", "bandwidth", "flops", "time", "count"]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

_NUMBER = r"(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[^\s]*)\s*$")

ALLOWED_UNITS: dict[str, str] = {
    "bytes": "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (or bits: Gb, Tb)",
    "bandwidth": "B/s, GB/s, TB/s, GiB/s, Gb/s, Gbps, Tb/s",
    "flops": "FLOPS, GFLOPS, TFLOPS, PFLOPS (also FLOP/s, TFLOP/s)",
    "time": "s, ms, us, ns, min, h",
    "count": "a plain number",
}


# Meaningful range of a quantity in SI units (inclusive). Outside it a value is a typo or a probe
# (1e-300 B/s gives infinite times, 1e30 FLOP/s zero ones), refused where it is read. The bounds
# leave several orders of magnitude around every real system (a 2026 GPU: ~1e15-1e16 FLOP/s,
# ~1e11-1e13 B/s, ~1e10-1e11 B of HBM; latencies ~1e-6 s).
RANGES: dict[str, tuple[float, float]] = {
    "bytes": (
        1.0,
        1e21,
    ),  # 1 B .. 1 ZB (Calculon's a100_80e study system has 80e9 GiB = 8.6e19 B: "endless" HBM)
    "bandwidth": (1e6, 1e16),  # 1 MB/s .. 10 PB/s
    "flops": (1e6, 1e20),  # 1 MFLOP/s .. 100 EFLOP/s
    "time": (0.0, 1e6),  # 0 .. ~11.6 days (latencies, fixed overheads)
}
_RANGE_TEXT = {
    "bytes": "1 B to 1 ZB",
    "bandwidth": "1 MB/s to 10 PB/s",
    "flops": "1 MFLOPS to 100 EFLOPS",
    "time": "0 to 1e6 s",
}


class UnitError(ValueError):
    """A quantity string that cannot be read as the requested kind."""


def _prefix_scale(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    return None


def _parse_bytes_unit(unit: str) -> float | None:
    """Scale of a byte/bit unit such as 'GiB', 'GB', 'Gb', 'B'; None if not one."""
    if not unit:
        return None
    if unit.endswith("B"):
        scale = _prefix_scale(unit[:-1])
        return scale
    if unit.endswith("b") and len(unit) >= 1:
        scale = _prefix_scale(unit[:-1])
        return None if scale is None else scale / 8.0
    return None


def _unit_scale(unit: str, kind: Kind) -> float | None:
    if kind == "count":
        return 1.0 if unit == "" else None
    if kind == "time":
        return _TIME.get(unit)
    if kind == "bytes":
        return _parse_bytes_unit(unit)
    if kind == "bandwidth":
        if unit.endswith("ps") and not unit.endswith("/s"):  # Gbps, GBps
            base = unit[:-2]
            if base and base[-1] in "bB":
                return _parse_bytes_unit(base)
            return None
        if unit.endswith("/s"):
            return _parse_bytes_unit(unit[:-2])
        return None
    if kind == "flops":
        for suffix in ("FLOPS", "FLOP/s", "flops", "flop/s", "FLOPs/s"):
            if unit.endswith(suffix):
                return _prefix_scale(unit[: -len(suffix)])
        return None
    return None


def parse_quantity(value: str | int | float, kind: Kind, field: str = "value") -> float:
    """Return ``value`` in SI units of ``kind``; plain numbers are taken as already SI.

    Raises UnitError with a one-line message naming the field, the value and what is allowed.
    """
    if isinstance(value, bool):
        raise UnitError(
            f"{field}: {value!r} is not a quantity; allowed units: {ALLOWED_UNITS[kind]}"
        )
    if isinstance(value, (int, float)):
        return _in_range(_to_float(value, field, kind), value, kind, field)
    if not isinstance(value, str):
        raise UnitError(
            f"{field}: {value!r} is not a quantity; allowed units: {ALLOWED_UNITS[kind]}"
        )
    match = _PATTERN.match(value)
    if not match:
        raise UnitError(
            f"{field}: cannot read {value!r} as a number with a unit; allowed units: {ALLOWED_UNITS[kind]}"
        )
    scale = _unit_scale(match.group("unit"), kind)
    if scale is None:
        raise UnitError(
            f"{field}: unknown unit {match.group('unit')!r} in {value!r}; allowed units: {ALLOWED_UNITS[kind]}"
        )
    return _in_range(float(match.group("num")) * scale, value, kind, field)


def _to_float(value: int | float, field: str, kind: Kind) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond 1.8e308
        raise UnitError(
            f"{field}: {value} is too large; allowed range: {_RANGE_TEXT.get(kind, 'a finite number')}"
        ) from None


def _in_range(number: float, typed: str | int | float, kind: Kind, field: str) -> float:
    """``number`` (SI) if finite and inside RANGES[kind] (positive-only kinds: the schema's own bounds
    decide 0 and negatives, so that their messages stay as they are); UnitError otherwise."""
    if not math.isfinite(number):
        raise UnitError(
            f"{field}: {typed!r} is not a finite quantity; allowed range: {_RANGE_TEXT.get(kind, 'finite')}"
        )
    if kind in RANGES and number > 0:
        low, high = RANGES[kind]
        if not low <= number <= high:
            raise UnitError(
                f"{field}: {typed!r} is outside the meaningful range {_RANGE_TEXT[kind]}"
            )
    return number


GiB = 2.0**30


def si_prefixed(value: float, spec: str = ".3g", giga: str = "G") -> str:
    """A count with an SI suffix for display: 2.19e5 -> '219k'; ``giga`` is 'G' or 'B' (billions)."""
    for scale, suffix in ((1e12, "T"), (1e9, giga), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:{spec}}{suffix}"
    return f"{value:{spec}}"
