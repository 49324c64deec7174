"""References to measured kernel tables (``accelerator.kernel_tables``): a shipped table's name, a folder
holding ``table.yaml``, either optionally followed by the kinds of its files to use, ``NAME[gemm,memory]``.

A kind list restricts a table to some of its files: ``paraplan calibrate`` attaches only the kinds it was
given (docs/calibration.md), so that the other files of a shipped table (its eager kernels, grouped GEMMs,
fp8 quantisation kernels) do not replace prices the user did not measure.
"""

from __future__ import annotations

from pathlib import Path

from paraplan.io.catalog_files import catalog_folder
from paraplan.specs.errors import InputError

TABLE_KINDS = (
    "gemm",
    "grouped_gemm",
    "grouped_gemm_deepgemm",
    "attention_fa2",
    "attention_fa3",
    "attention_cudnn",
    "memory",
    "kernels",
    "fp8_kernels",
)
FIELD = "accelerator.kernel_tables"


def shipped_tables() -> list[str]:
    """Names of the tables shipped in the package (catalog/kernels/<name>/table.yaml)."""
    folder = catalog_folder("kernels")
    return sorted(p.name for p in folder.iterdir() if (p / "table.yaml").is_file())


def split_ref(ref: str) -> tuple[str, tuple[str, ...] | None]:
    """(the table's name or folder, the kinds a trailing ``[kind,kind]`` names, or None: every file);
    InputError naming the field where a listed kind is not one of TABLE_KINDS or the list is empty."""
    if not ref.endswith("]") or "[" not in ref or (Path(ref) / "table.yaml").is_file():
        return ref, None  # (a folder whose own name ends in [...] is that folder)
    table, listed = ref[:-1].rsplit("[", 1)
    kinds = tuple(k.strip() for k in listed.split(",") if k.strip())
    unknown = [k for k in kinds if k not in TABLE_KINDS]
    if unknown or not kinds:
        raise InputError(
            f"{FIELD}: {ref!r}: the kinds in [...] must be some of {', '.join(TABLE_KINDS)}, "
            f"got {listed!r}"
        )
    return table, tuple(dict.fromkeys(kinds))


def with_kinds(table: str, kinds: list[str] | tuple[str, ...]) -> str:
    """The reference to ``table`` (name or folder) restricted to ``kinds`` (``split_ref``'s syntax)."""
    return f"{table}[{','.join(kinds)}]"


def table_folder(ref: str):
    """The folder a reference's table lives in (a shipped name or a folder holding table.yaml)."""
    table = split_ref(ref)[0]
    if table in shipped_tables():
        return catalog_folder("kernels") / table
    path = Path(table)
    if (path / "table.yaml").is_file():
        return path
    raise InputError(
        f"{FIELD}: unknown kernel table {table!r}; allowed: {', '.join(shipped_tables())} "
        "or a folder holding table.yaml (optionally followed by [kind,...])"
    )


def kept_files(ref: str, files: dict[str, str]) -> dict[str, str]:
    """A table's ``files`` (kind -> CSV) restricted to the kinds its reference lists; InputError
    naming the field where a listed kind is not among the table's files."""
    kinds = split_ref(ref)[1]
    if kinds is None:
        return files
    missing = [k for k in kinds if k not in files]
    if missing:
        raise InputError(
            f"{FIELD}: {ref!r}: the table has no {', '.join(missing)} file; it has "
            f"{', '.join(files)}"
        )
    return {k: files[k] for k in kinds}
