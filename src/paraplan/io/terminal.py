"""User text made safe to print or to write into a one-line comment: :func:`printable`.

A name from a file (a model, a cluster, a case, a plan file's path) may hold newlines, carriage
returns, terminal escape sequences (ESC ... BEL) or Unicode line separators. Written to a terminal
they repaint it; copied into the header comment of an exported launch script they end the comment and
start a command. :func:`printable` is the one rule for both: every character that is not printable
(Unicode categories Cc, Cf, Zl, Zp, Zs other than the plain space, Co, Cn) is shown as its Python
escape (``\\n``, ``\\x1b``, ``\\u2028``), so the text stays one line and shows what was there.
"""

from __future__ import annotations


def _escaped(ch: str) -> str:
    return ch if ch.isprintable() else repr(ch)[1:-1]


def printable(text: object) -> str:
    """``str(text)`` on one line with its non-printable characters shown as escapes (see the module)."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(_escaped(ch) for ch in s)


__all__ = ["printable"]
