"""Files a document names (issue 37): resolved, checked before they are read, and read from a
descriptor that is checked again, so that a model, system, plan or framework path written in a
case, cluster, calibration or search file cannot make paraplan block on a FIFO, read a device, or
take in more than MAX_INPUT_BYTES. What such a file holds is never shown
(io.documents.read_document with ``referenced``, catalog.referenced_file_error)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from paraplan.specs.errors import InputError

MAX_INPUT_BYTES = (
    16 * 2**20
)  # 16 MiB: the largest model/system/case file we read (ours are < 100 kB)
MAX_YAML_BYTES = (
    2**18
)  # 256 KiB of YAML (io.strict_yaml; the web page takes pasted files up to that size too)


def _open_regular(path: Path, field: str):
    """``path`` opened for reading, checked on the descriptor itself (no window between a check
    and the open): O_NONBLOCK so a FIFO does not wait for a writer, O_NOCTTY so a terminal is not
    taken over; then a regular file of at most MAX_INPUT_BYTES, or InputError (the descriptor
    closed). A symbolic link is followed and its target is what is checked; the error names the
    target when it differs."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    try:
        check_regular(path, os.fstat(fd), field)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def referenced_path(base: Path | str | None, ref: object, field: str) -> Path:
    """The file a document names (``ref``, relative to the document's folder ``base`` when given),
    resolved and checked before anything reads it: a non-empty string without control characters
    that names an existing regular file of at most MAX_INPUT_BYTES (a link is followed and its
    target checked; devices, FIFOs and sockets are refused without opening them). Returns the
    path to read with ``read_document(..., referenced=True)``, which checks the open file again."""
    if not isinstance(ref, str) or not ref or any(ord(ch) < 32 or ord(ch) == 127 for ch in ref):
        shown = ref if isinstance(ref, str) else type(ref).__name__
        raise InputError(f"{field}: {shown!r} is not allowed; give the path of a file")
    path = Path(ref) if base is None else Path(base) / ref
    try:
        info = path.stat()
    except OSError as exc:
        raise InputError(
            f"{field}: cannot read file {str(path)!r}: {exc.strerror or exc}"
        ) from None
    check_regular(path, info, field)
    return path


def check_regular(path: Path, info: os.stat_result, field: str) -> None:
    """InputError unless ``info`` (the stat of ``path``, or of its open descriptor) is a regular
    file of at most MAX_INPUT_BYTES; a link's target is named."""
    target = f" (a link to {str(path.resolve())!r})" if path.is_symlink() else ""
    if not stat.S_ISREG(info.st_mode):
        raise InputError(
            f"{field}: {str(path)!r}{target} is not a regular file (a directory, device, FIFO or"
            " socket); give a file"
        )
    if info.st_size > MAX_INPUT_BYTES:
        raise InputError(
            f"{field}: {str(path)!r}{target} is larger than {MAX_INPUT_BYTES // 2**20} MiB; not a"
            " paraplan input"
        )
