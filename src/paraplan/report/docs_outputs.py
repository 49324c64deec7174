"""The commands the README and docs/*.md show, run, and the outputs they quote compared or rewritten (issue 34).

A *command block* is a fenced ``bash`` / ``sh`` / ``shell`` / ``console`` block with a ``paraplan`` command on a line
(or after ``&&``: the quick start's install steps before the first ``cd`` or ``paraplan`` are left out). Its *quoted
output* is the next fenced block without a language when only blank lines, or a paragraph that starts "Output of",
separate the two (the plain block after "Output of the first command" is the document's first command's). Each block runs with bash in a fresh temporary folder holding a copy of ``examples/``, with
``paraplan`` resolving to this interpreter's package, stdout and stderr merged, at ``COLUMNS=120`` (the README's
outputs are quoted from a 120-column terminal).

Compared after :func:`normalise` (trailing blanks, and wall times, which depend on the machine): the quoted output
must equal the printed one line for line, numbers included; a line ``...`` in the quote stands for any lines (a
quote ending with ``...`` shows the head of a longer output). ``python -m paraplan.report.docs_outputs --write``
rewrites every differing quote from what the commands print now (an elided quote keeps its shape: each part after a
``...`` is found again by the words its first line starts with); ``--check`` (the default) lists the differences
and exits 1. Commands in :data:`SLOW` run only with ``--slow`` (and in the test suite's ``slow`` set).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHELLS = ("bash", "sh", "shell", "console")
ELIDED = "..."
# commands too slow for CI (prefix of the block's text -> why): run with --slow / pytest -m slow
SLOW = {
    "paraplan sweep --model gpt3-175b": "the strong-scaling sweep, 21 searches: ~2 minutes on 2 cores",
    "cd examples/calibration && paraplan calibrate": "fits every calibration input: ~1 minute",
}
_FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_WALL_TIMES = (
    (re.compile(r"; [0-9][0-9.,]* s$"), "; <time> s"),  # the search's summary line
    (re.compile(r"\b[0-9][0-9.,]* s wall-clock\b"), "<time> s wall-clock"),
)


@dataclass(frozen=True)
class DocCommand:
    """A command block of a document and the output block quoted after it (None: no output quoted)."""

    doc: Path
    line: int
    script: str
    output: tuple[int, int] | None  # character span of the quoted output's text in the document

    @property
    def label(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def slow(self) -> str | None:
        return next((why for prefix, why in SLOW.items() if self.script.startswith(prefix)), None)


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _script(body: str) -> str | None:
    """The lines of a shell block that run paraplan (from the first ``cd`` or ``paraplan`` on), or None."""
    lines = []
    for raw in body.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        parts = [p.strip() for p in line.split("&&")]
        first = next((i for i, p in enumerate(parts) if p.startswith(("paraplan ", "cd "))), None)
        if first is not None and any(p.startswith("paraplan ") for p in parts):
            lines.append(" && ".join(parts[first:]))
        elif lines and lines[-1].endswith("\\"):
            lines.append(line)
    return "\n".join(lines) if lines else None


def doc_commands(root: Path = ROOT) -> list[DocCommand]:
    """Every command block of the README and docs/*.md, in order, with its quoted output's span."""
    found = []
    for doc in documents(root):
        text = doc.read_text(encoding="utf-8")
        blocks = list(_FENCE.finditer(text))
        for i, block in enumerate(blocks):
            script = _script(block.group(2)) if block.group(1) in SHELLS else None
            if script is None:
                continue
            output = None
            if i + 1 < len(blocks) and blocks[i + 1].group(1) == "":
                gap = text[block.end() : blocks[i + 1].start()].strip()
                if not gap or (gap.startswith("Output of") and "first command" not in gap):
                    output = blocks[i + 1].span(2)
            if not any(c.doc == doc for c in found):  # "Output of the first command" may come later
                output = output or _first_command_output(text, blocks)
            found.append(DocCommand(doc, text.count("\n", 0, block.start()) + 1, script, output))
    return found


def _first_command_output(text: str, blocks: list[re.Match]) -> tuple[int, int] | None:
    """The span of the plain block after a paragraph "Output of the first command ...": the quick start's."""
    for before, block in zip(blocks, blocks[1:]):
        gap = text[before.end() : block.start()].strip().split("\n\n")[-1]
        if block.group(1) == "" and gap.startswith("Output of the first command"):
            return block.span(2)
    return None


def run(command: DocCommand, timeout: float = 600) -> str:
    """What ``command``'s block prints (stdout and stderr merged), run as the module docstring says."""
    with tempfile.TemporaryDirectory(prefix="paraplan-docs-") as folder:
        work = Path(folder)
        if (ROOT / "examples").is_dir():
            shutil.copytree(ROOT / "examples", work / "examples")
        bin_dir = work / ".bin"
        bin_dir.mkdir()
        shim = bin_dir / "paraplan"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m paraplan "$@"\n')
        shim.chmod(0o755)
        env = dict(os.environ, COLUMNS="120", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        src = str(ROOT / "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        done = subprocess.run(
            ["bash", "-e", "-c", command.script],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode not in (
        0,
        1,
    ):  # 1: a search where no plan fits, a failed gate (shown output)
        raise CommandFailed(
            f"{command.label}: exit {done.returncode}: {done.stdout[-600:].strip()}"
        )
    return done.stdout


class CommandFailed(RuntimeError):
    """A documented command that ends in an error (exit status 2 or more)."""


def normalise(text: str) -> list[str]:
    """Lines without trailing blanks, wall times replaced (module docstring), no trailing empty lines."""
    lines = []
    for line in text.rstrip().splitlines():
        line = line.rstrip()
        for pattern, stand_in in _WALL_TIMES:
            line = pattern.sub(stand_in, line)
        lines.append(line)
    return lines


def _segments(quoted: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for line in quoted:
        if line.strip() == ELIDED:
            out.append([])
        else:
            out[-1].append(line)
    return out


def matches(quoted: str, printed: str) -> bool:
    """True when the printed output is what the quote shows: line for line from the first, a ``...`` line standing
    for any lines (a quote that ends with ``...`` shows the head of a longer output)."""
    want, got = normalise(quoted), normalise(printed)
    at = 0
    for i, part in enumerate(_segments(want)):
        if i == 0:
            found = 0 if got[: len(part)] == part else None
        else:
            found = next(
                (j for j in range(at, len(got) - len(part) + 1) if got[j : j + len(part)] == part),
                None,
            )
        if found is None:
            return False
        at = found + len(part)
    return at == len(got) or want[-1].strip() == ELIDED


def _label(line: str) -> str:
    """The words a table row or a line starts with, before its first number or column gap."""
    return re.split(r"\s{2,}|\d", line.strip(), maxsplit=1)[0].strip()


def regenerated(quoted: str, printed: str) -> str:
    """The quote rewritten from ``printed``: line for line, each part after a ``...`` taken from the printed line
    that starts with the words the quoted part's first line starts with, as many lines as the part had; a
    trailing ``...`` kept."""
    got = printed.rstrip().splitlines()
    parts = _segments(quoted.rstrip().splitlines())
    if len(parts) == 1:
        return "\n".join(got) + "\n"
    out, at = got[: len(parts[0])], len(parts[0])
    for part in parts[1:]:
        out.append(ELIDED)
        if not part:
            continue
        label = _label(part[0])
        start = next((j for j in range(at, len(got)) if label and got[j].startswith(label)), None)
        if start is None:
            raise ValueError(f"no printed line starts with {label!r}; quote the output whole")
        out += got[start : start + len(part)]
        at = start + len(part)
    return "\n".join(out) + "\n"


def _check_or_write(commands: list[DocCommand], write: bool) -> list[str]:
    """Run ``commands``; the labels whose quoted output differs (rewritten in place when ``write``)."""
    differing, edits = [], {}
    for command in commands:
        try:
            printed = run(command)
        except CommandFailed as exc:
            differing.append(f"{command.label} (fails: {exc})")
            continue
        if command.output is None:
            continue
        start, end = command.output
        quoted = command.doc.read_text(encoding="utf-8")[start:end]
        if not matches(quoted, printed):
            differing.append(command.label)
            edits.setdefault(command.doc, []).append((start, end, regenerated(quoted, printed)))
    if write:
        for doc, spans in edits.items():
            text = doc.read_text(encoding="utf-8")
            for start, end, new in sorted(spans, reverse=True):
                text = text[:start] + new + text[end:]
            _write_atomically(doc, text)
    return differing


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paraplan.report.docs_outputs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--write", action="store_true", help="rewrite the quoted outputs")
    parser.add_argument("--slow", action="store_true", help="also run the commands of SLOW")
    parser.add_argument("--list", action="store_true", help="list the commands and exit")
    args = parser.parse_args(argv)
    commands = [c for c in doc_commands() if args.slow or not c.slow]
    if args.list:
        for c in doc_commands():
            mark = f"  [slow: {c.slow}]" if c.slow else ""
            print(f"{c.label}  {'output quoted' if c.output else 'no output'}{mark}")
        return 0
    differing = _check_or_write(commands, args.write)
    failed = [label for label in differing if "(fails:" in label]
    for label in differing:
        print(label if label in failed else f"{'rewritten' if args.write else 'differs'}: {label}")
    print(
        f"{len(commands)} commands run; {len(differing) - len(failed)} quoted outputs "
        f"{'rewritten' if args.write else 'differ'}; {len(failed)} commands failed"
    )
    return 1 if differing and not args.write else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
