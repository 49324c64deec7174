"""Framework profiles (catalog/frameworks/*.yaml) are data files that restate shared facts: the host seconds
per kernel launch (host_launch_s) of PyTorch's autograd dispatcher is one measurement quoted by most of
them (issue 31). These tests keep the copies in step: profiles that quote the same source state the same
value, every host_launch_s source quotes the value it backs, and profiles that state the same non-zero
host_launch_s cite the same measurement files, so a new measurement cannot reach some profiles only."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import yaml

import paraplan.catalog

FRAMEWORKS = Path(paraplan.catalog.__file__).parent / "frameworks"
MEASURED = re.compile(r"benchmarks/[\w./-]+\.(?:csv|json)")


def profiles() -> dict[str, dict]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(FRAMEWORKS.glob("*.yaml"))}


def test_profiles_quoting_the_same_source_state_the_same_value():
    values = defaultdict(dict)  # (field, source text) -> {profile: value}
    for name, data in profiles().items():
        for key, text in (data.get("sources") or {}).items():
            if key in data:
                values[(key, text)][name] = data[key]
    assert len(values) > 50  # the profiles do quote sources
    for (key, text), by_profile in values.items():
        assert len({str(v) for v in by_profile.values()}) == 1, (key, by_profile, text[:80])


def test_every_host_launch_source_quotes_its_value():
    loaded = profiles()  # read once: each profile's value and its source
    stated = {n: d["host_launch_s"] for n, d in loaded.items() if "host_launch_s" in d}
    assert len(stated) >= 10
    for name, value in stated.items():
        number = str(value).split()[0]
        if float(number) == 0.0:
            continue  # not priced: its source says why, with no figure
        assert number in loaded[name]["sources"]["host_launch_s"], (name, value)


def test_profiles_sharing_a_host_launch_cite_the_same_measurements():
    cited = defaultdict(dict)  # value -> {profile: measurement files}
    for name, data in profiles().items():
        value = str(data.get("host_launch_s", "0"))
        if float(value.split()[0]) > 0.0:
            cited[value][name] = frozenset(MEASURED.findall(data["sources"]["host_launch_s"]))
    shared = {v: c for v, c in cited.items() if len(c) > 1}
    assert len(shared) >= 2  # 31.6 us and 35.6 us are each quoted by several profiles
    for value, by_profile in shared.items():
        files = set(by_profile.values())
        assert len(files) == 1 and next(iter(files)), (value, by_profile)
