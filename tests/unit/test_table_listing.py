"""Every shipped kernel table is listed where a user looks (issue 32: "Tables are data files with provenance,
shipped in the package, listed by ``paraplan systems --tables``"; each table's provenance and fit residual in
docs/validation.md): a table measured on no catalog accelerator (a100-pcie-simumax) is listed too, said to be
attached to no catalog system, with its leave-one-out residuals."""

from __future__ import annotations

from paraplan.cost import kernel_tables as kt
from paraplan.validate.tables import shipped_table_residuals, tables_markdown

UNATTACHED = "a100-pcie-simumax"


def test_every_shipped_table_has_a_docs_section_with_its_provenance():
    lines = tables_markdown()
    headings = [line for line in lines if line.startswith("### ")]
    assert [heading.split()[1] for heading in headings] == kt.shipped_tables()
    for name in kt.shipped_tables():
        prov = kt.table_provenance(name)
        for key in ("device", "software", "date", "source"):
            assert f"- {key}: {prov[key]}" in lines, (name, key)
    assert (
        f"### {UNATTACHED} (not attached to any catalog system: opt-in by name; left out only)"
        in headings
    )
    assert f"- catalog: {kt.table_provenance(UNATTACHED)['catalog']}" in lines


def test_a_table_on_no_catalog_accelerator_gets_its_leave_one_out_rows_alone():
    shipped = shipped_table_residuals()  # worked out once (each table's leave-one-out fits)
    system, residuals = shipped[UNATTACHED]
    assert system is None and kt.table_provenance(UNATTACHED)["accelerators"] == []
    assert [(r.file, r.what, r.points) for r in residuals] == [
        ("gemm.csv", "GEMMs, table leave-one-out", 183),
        ("grouped_gemm.csv", "grouped GEMMs (per-expert loop), table leave-one-out", 12),
    ]
    attached = {name: entry for name, entry in shipped.items() if entry[0]}
    assert set(attached) == set(kt.shipped_tables()) - {UNATTACHED}
