"""Result files written atomically: a temporary file in the same folder, fsync'ed, then a rename.

Kept for the export / import / calibrate commands; the rule itself lives in ``paraplan.io``
(``atomic_write_text``), shared with search --csv and the sweep outputs."""

from __future__ import annotations

from pathlib import Path

from paraplan.io import atomic_write_text


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (creating its folder) so that readers see the old file or the whole
    new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, text)
    return target
