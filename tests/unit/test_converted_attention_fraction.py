"""cost.attention.converted_attention_fraction, the one conversion of an attention fraction between kernels
(cost.frameworks.framework_system and calibrate.keep_base_attention both read it): the fraction times the
kernel speed ratio, at most 1."""

from __future__ import annotations

import pytest

from paraplan.cost.attention import converted_attention_fraction, kernel_relative_speed


def test_the_fraction_scales_by_the_kernel_ratio():
    ratio = kernel_relative_speed("fa2", "fa3", "hopper")
    assert ratio < 1
    assert converted_attention_fraction(0.6, "fa2", "fa3", "hopper") == pytest.approx(0.6 * ratio)
    assert converted_attention_fraction(0.6, "fa3", "fa3", "hopper") == 0.6


def test_a_faster_kernel_stops_at_the_peak():
    assert kernel_relative_speed("fa3", "fa2", "hopper") * 0.8 > 1
    assert converted_attention_fraction(0.8, "fa3", "fa2", "hopper") == 1.0
