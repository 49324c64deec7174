"""docs/heterogeneous.md states the AMP-trial accuracy in prose (the Result table, "Not done / limits")
beside the `paraplan validate --hetero` output it quotes, which tests/cli/test_docs_outputs.py checks
against the command; here the prose is checked against that quote, so neither can drift alone."""

from __future__ import annotations

import re

from paraplan.report.docs_outputs import ROOT, doc_commands

DOC = ROOT / "docs" / "heterogeneous.md"


def _quoted_group_mape() -> dict[str, str]:
    """{group: MAPE %} of the quoted `paraplan validate --hetero` output's "By group" table."""
    (command,) = [
        c for c in doc_commands() if c.doc == DOC and c.script == "paraplan validate --hetero"
    ]
    assert command.output is not None
    start, end = command.output
    quoted = DOC.read_text(encoding="utf-8")[start:end]
    return dict(re.findall(r"^(amp-\w+)\s+\d+\s+([0-9.]+)\s", quoted, re.M))


def test_the_prose_quotes_the_figures_validate_hetero_prints():
    mape = _quoted_group_mape()
    assert set(mape) == {"amp-mixed", "amp-t4"}
    text = DOC.read_text(encoding="utf-8")
    not_done = text[text.index("## Not done / limits") :]
    accuracy = not_done[: not_done.index("  - Calibration cannot close the gap")]
    assert f": {mape['amp-mixed']} % on the mixed cluster" in accuracy
    assert f"{mape['amp-t4']} % on the T4 cluster" in accuracy
    assert (
        f"| 43 | **{mape['amp-mixed']} %** |" in text and f"| 47 | **{mape['amp-t4']} %** |" in text
    )
