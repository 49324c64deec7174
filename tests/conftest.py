"""Test-wide settings: property tests are deterministic (hypothesis derandomized) unless the
HYPOTHESIS_PROFILE environment variable asks for the "explore" profile (random, more examples)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: exhaustive or many-example tests (run in CI too; -m 'not slow' skips them)")
