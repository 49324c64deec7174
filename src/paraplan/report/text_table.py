"""Plain-text tables and output that never break inside a word.

:class:`SimpleTable` lays itself out for a width without ever breaking inside a word (a plan label, a
case name, a number): headers and name cells wrap at spaces, a search row's plan moves to its own
line, and as a last resort each row becomes a record. With no width (output to a pipe) every row is
one line, for ``grep`` and ``cut -c``. :class:`PlainConsole` prints prose and tables at a width.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence

from rich.cells import cell_len

from paraplan.io.terminal import printable

COLUMN_GAP = 2
RECORD_INDENT = "    "


class SimpleTable:
    """A borderless table of strings laid out for a given width, never breaking inside a token.

    Columns from ``numeric_from`` on are right-aligned. The layout for ``width`` characters (None:
    unlimited, one line per row, for pipes, ``grep`` and ``cut -c``), in order of preference:

    1. every column on one line per row; when that is too wide, multi-word headers wrap at their
       spaces, then the cells of the ``foldable`` columns wrap at their spaces (never narrower than
       their longest word);
    2. with a ``detach`` column (the plan of a search row): that column moves to its own line under
       each row, indented, and the other columns are laid out as in 1;
    3. one record per row: the name cells on a line, then ``header value`` pairs packed onto
       indented lines.

    A single word longer than the width stays whole (the line is then longer than the width).
    """

    def __init__(
        self,
        title: str,
        *columns: str,
        numeric_from: int = 1,
        foldable: Sequence[int] | None = None,
        detach: int | None = None,
    ):
        self.title = printable(title)
        self.columns = tuple(printable(c) for c in columns)
        self.numeric_from = numeric_from
        self.foldable = tuple(range(numeric_from)) if foldable is None else tuple(foldable)
        self.detach = detach
        self.rows: list[tuple[str, ...]] = []
        self.sections: set[int] = set()  # row indexes preceded by a rule

    def add_row(self, *cells: str) -> None:
        """A row; each cell made one printable line (escape codes in a name shown escaped)."""
        shown = tuple(printable(cell) for cell in cells)
        self.rows.append(shown + ("",) * (len(self.columns) - len(cells)))

    def add_section(self) -> None:
        self.sections.add(len(self.rows))

    # ---- layout --------------------------------------------------------------------------------
    def _widths(self, shown: list[int], width: int | None, wrap_cells: bool) -> list[int] | None:
        """Column widths for the ``shown`` columns within ``width``, or None when they cannot fit
        without breaking a word."""
        natural, header_min, cell_min = [], [], []
        for i in shown:
            cells = [r[i] for r in self.rows]
            widest = max([0] + [cell_len(c) for c in cells])
            header_word = _longest_word(self.columns[i])
            natural.append(max(widest, cell_len(self.columns[i])))
            header_min.append(max(widest, header_word))
            foldable = wrap_cells and i in self.foldable and i != self.detach
            cell_min.append(
                max(header_word, max([0] + [_longest_word(c) for c in cells]))
                if foldable
                else header_min[-1]
            )
        fixed = list(natural)
        if width is None:
            return fixed
        excess = sum(fixed) + COLUMN_GAP * (len(fixed) - 1) - width
        # first wrap the headers with the most slack at their spaces ...
        for j in sorted(range(len(fixed)), key=lambda k: header_min[k] - natural[k]):
            cut = min(max(excess, 0), fixed[j] - header_min[j])
            fixed[j] -= cut
            excess -= cut
        # ... then wrap the widest foldable column at its spaces, one character at a time
        while excess > 0:
            slack = [j for j in range(len(fixed)) if fixed[j] > cell_min[j]]
            if not slack:
                return None
            widest = max(slack, key=lambda j: fixed[j])
            fixed[widest] -= 1
            excess -= 1
        return fixed

    def lines(self, width: int | None = None) -> list[str]:
        """The table as lines of text for ``width`` characters (None: unlimited)."""
        every = list(range(len(self.columns)))
        widths = self._widths(every, width, wrap_cells=True)
        if widths is not None:
            return self._grid(every, widths, width)
        # one column on a line of its own: the given one under its row, else the widest name column above it
        detach = self.detach
        if detach is None and self.foldable:
            detach = max(
                self.foldable,
                key=lambda i: max(
                    [cell_len(self.columns[i])] + [cell_len(r[i]) for r in self.rows]
                ),
            )
        if detach is not None:
            rest = [i for i in every if i != detach]
            rest_widths = self._widths(rest, width, wrap_cells=True)
            if rest_widths is not None:
                return self._grid(rest, rest_widths, width, detach)
        return self._records(width)

    def _grid(
        self, shown: list[int], widths: list[int], width: int | None, detached: int | None = None
    ) -> list[str]:
        """Rows as lines of aligned columns; a ``detached`` column on its own line, under its row
        (indented to the second column) when it is the table's ``detach`` column, else above it."""
        below = detached is not None and detached == self.detach
        out = _wrap_prose(self.title, width)
        header_cells = [_wrap_cell(self.columns[i], w) for i, w in zip(shown, widths)]
        height = max(len(h) for h in header_cells)
        header_cells = [
            [""] * (height - len(h)) + h for h in header_cells
        ]  # headers bottom-aligned
        header = [self._join(shown, widths, [h[n] for h in header_cells]) for n in range(height)]
        indent = " " * (widths[0] + COLUMN_GAP) if below else ""
        if detached is not None:
            name = _wrap_prose(self.columns[detached], width, indent)
            header = header + name if below else name + header
        out += header
        rule = "─" * max(
            [sum(widths) + COLUMN_GAP * (len(widths) - 1)] + [cell_len(line) for line in header]
        )
        out.append(rule)
        for n, row in enumerate(self.rows):
            if n in self.sections:
                out.append(rule)
            if detached is not None and not below and row[detached]:
                out += _wrap_prose(row[detached], width)
            cells = [
                _wrap_cell(row[i], w) if i in self.foldable else [row[i]]
                for i, w in zip(shown, widths)
            ]
            for k in range(max(len(c) for c in cells)):
                out.append(self._join(shown, widths, [c[k] if k < len(c) else "" for c in cells]))
            if below and row[detached]:
                out += _wrap_prose(row[detached], width, indent)
        return out

    def _join(self, shown: list[int], widths: list[int], cells: list[str]) -> str:
        parts = []
        for i, w, cell in zip(shown, widths, cells):
            pad = " " * max(0, w - cell_len(cell))
            parts.append(pad + cell if i >= self.numeric_from else cell + pad)
        return (" " * COLUMN_GAP).join(parts).rstrip()

    def _records(self, width: int | None) -> list[str]:
        """One record per row: the name cells, then ``header value`` pairs on indented lines."""
        out = _wrap_prose(self.title, width)
        rule = "─" * (width or 1)
        out.append(rule)
        names = [i for i in range(len(self.columns)) if i < self.numeric_from and i != self.detach]
        for n, row in enumerate(self.rows):
            if n in self.sections:
                out.append(rule)
            out += _wrap_prose("  ".join(row[i] for i in names if row[i]) or "-", width)
            if self.detach is not None and row[self.detach]:
                out += _wrap_prose(row[self.detach], width, RECORD_INDENT)
            pairs = [
                f"{self.columns[i]}: {row[i]}"
                for i in range(len(self.columns))
                if i not in names and i != self.detach and row[i]
            ]
            out += _pack(pairs, width, RECORD_INDENT)
        return out

    def __rich_console__(self, console, options):
        """On a rich Console: lines at its width (kept whole; print with ``crop=False``)."""
        from rich.segment import Segment

        for line in self.lines(options.max_width):
            yield Segment(line)
            yield Segment.line()


def _longest_word(text: str) -> int:
    return max([0] + [cell_len(w) for w in text.split()])


def _wrap_cell(text: str, width: int) -> list[str]:
    """A cell wrapped at its spaces to ``width`` (a longer word stays whole)."""
    if cell_len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _wrap_prose(text: str, width: int | None, indent: str = "") -> list[str]:
    """Prose wrapped at spaces to ``width`` (None: one line), every line prefixed by ``indent``."""
    if width is None or cell_len(indent + text) <= width:
        return [indent + text]
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def _pack(units: list[str], width: int | None, indent: str) -> list[str]:
    """Units (never split) packed onto lines of ``width`` with ``indent``, separated by two spaces."""
    lines: list[str] = []
    current = ""
    for unit in units:
        if (
            width is not None and cell_len(indent + unit) > width
        ):  # a unit too long for a line: wrap it alone
            if current:
                lines.append(indent + current)
                current = ""
            lines += _wrap_prose(unit, width, indent)
            continue
        candidate = f"{current}  {unit}" if current else unit
        if current and width is not None and cell_len(indent + candidate) > width:
            lines.append(indent + current)
            current = unit
        else:
            current = candidate
    if current:
        lines.append(indent + current)
    return lines


def simple_table(
    title: str,
    *columns: str,
    numeric_from: int = 1,
    foldable: Sequence[int] | None = None,
    detach: int | None = None,
) -> SimpleTable:
    """A :class:`SimpleTable` (``foldable``: indexes of the columns whose cells may wrap at spaces;
    default the name columns before ``numeric_from``; ``detach``: a column that moves to its own line
    under each row when the table is too wide)."""
    return SimpleTable(title, *columns, numeric_from=numeric_from, foldable=foldable, detach=detach)


class PlainConsole:
    """Plain-text output of a width (None: unlimited) that never breaks inside a word.

    ``print`` takes strings (prose, wrapped at spaces), :class:`SimpleTable` s and lists of them;
    no colour and no markup, so the output is the same on a terminal and in a
    pipe. The CLI's stdout (``paraplan.cli.app._stdout``)."""

    def __init__(self, width: int | None = None, file=None):
        self.width = width
        self.file = file

    def lines(self, obj) -> list[str]:
        if isinstance(obj, SimpleTable):
            return obj.lines(self.width)
        if isinstance(obj, (list, tuple)):
            return [line for r in obj for line in self.lines(r)]
        text = getattr(obj, "plain", None)  # a rich Text
        text = str(obj) if text is None else text
        return [
            line for paragraph in text.split("\n") for line in _wrap_prose(paragraph, self.width)
        ]

    def print(self, *objects) -> None:
        """Every line of ``objects`` with its non-printable characters escaped (io.terminal.printable:
        a name holding an escape code cannot reach the terminal as one)."""
        lines = [printable(line) for obj in (objects or ("",)) for line in self.lines(obj)]
        file = self.file if self.file is not None else sys.stdout
        file.write("".join(line.rstrip() + "\n" for line in lines))
