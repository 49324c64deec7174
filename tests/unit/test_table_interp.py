"""cost.table_interp: the measured tables' interpolation rule, on synthetic two- and three-row tables with
hand-computed values (the ratio rate / prior in log2 space, held at the nearest edge outside the rows)."""

from __future__ import annotations

import math

import pytest

from paraplan.cost.table_interp import leave_one_out, scatter


def _prior(point: tuple[float, ...]) -> float:
    """A hand prior s/(s + 1024): 0.5 at 1024, 2/3 at 2048, 0.8 at 4096, 8/9 at 8192, 1/3 at 512."""
    return point[0] / (point[0] + 1024.0)


# two rows: rate 100 at s = 1024 (work 100, 1 s), rate 400 at s = 4096 (work 1600, 4 s)
POINTS, WORKS, TIMES = [(1024.0,), (4096.0,)], [100.0, 1600.0], [1.0, 4.0]


def test_without_a_prior_the_log_rate_is_linear_in_log_shape_and_held_at_the_edges():
    s = scatter(POINTS, WORKS, TIMES)
    # 2048 halfway in log2: sqrt(100 · 400) = 200
    assert s.rate((2048.0,)) == pytest.approx(200.0, rel=1e-12)
    assert s.rate((8192.0,)) == pytest.approx(400.0, rel=1e-12)  # the 4096 edge rate
    assert s.rate((512.0,)) == pytest.approx(100.0, rel=1e-12)  # the 1024 edge rate
    # time = max(work / rate, fastest row's time 1 s)
    assert s.time_s(1000.0, (2048.0,)) == pytest.approx(5.0, rel=1e-12)
    assert s.time_s(10.0, (2048.0,)) == 1.0


def test_with_a_prior_the_ratio_is_interpolated_and_the_prior_follows_the_shape():
    s = scatter(POINTS, WORKS, TIMES, _prior)
    # ratios 100 / 0.5 = 200 and 400 / 0.8 = 500
    assert s.rate((1024.0,)) == pytest.approx(100.0, rel=1e-12)  # a measured shape: its own rate
    assert s.rate((4096.0,)) == pytest.approx(400.0, rel=1e-12)
    # 2048: sqrt(200 · 500) = 316.228 × 2/3 = 210.819
    assert s.rate((2048.0,)) == pytest.approx(math.sqrt(200.0 * 500.0) * 2.0 / 3.0, rel=1e-12)
    # outside: the edge ratio held, the prior at the shape: 500 · 8/9 = 444.44 and 200 · 1/3 = 66.67
    assert s.rate((8192.0,)) == pytest.approx(500.0 * 8.0 / 9.0, rel=1e-12)
    assert s.rate((512.0,)) == pytest.approx(200.0 / 3.0, rel=1e-12)


def test_several_coordinates_weigh_the_log_ratio_by_inverse_squared_distance():
    points = [(1024.0, 1024.0), (4096.0, 4096.0)]  # log2 (10, 10) and (12, 12)
    s = scatter(points, WORKS, TIMES, _prior)
    # (2048, 4096) = log2 (11, 12): d² = 5 to the first row, 1 to the second; weights 1/5 and 1 over the
    # log2 ratios of 200 and 500, times the prior 2/3
    log_ratio = (0.2 * math.log2(200.0) + math.log2(500.0)) / 1.2
    assert s.rate((2048.0, 4096.0)) == pytest.approx(2.0**log_ratio * 2.0 / 3.0, rel=1e-12)
    assert s.rate((1024.0, 1024.0)) == pytest.approx(100.0, rel=1e-12)


def test_rows_of_one_shape_are_one_point_at_the_geometric_mean_ratio():
    s = scatter([(1024.0,), (1024.0,), (4096.0,)], [100.0, 100.0, 1600.0], [1.0, 4.0, 4.0], _prior)
    # rates 100 and 25 at 1024: 50; ratio 100
    assert s.rate((1024.0,)) == pytest.approx(50.0, rel=1e-12)
    assert s.rate((8192.0,)) == pytest.approx(500.0 * 8.0 / 9.0, rel=1e-12)


def test_leave_one_out_prices_each_row_from_the_others_over_the_prior():
    points = [(1024.0,), (2048.0,), (4096.0,)]
    works, times = [100.0, 400.0, 1600.0], [1.0, 2.0, 4.0]  # rates 100, 200, 400
    got = leave_one_out(points, works, times, 0.0, _prior)
    # 1024 from the others: ratios 200 / (2/3) = 300 at 2048 held below it, × 0.5 = 150: 100 / 150 s
    # 2048: sqrt(200 · 500) × 2/3 = 210.819: 400 / 210.819 s; 4096: 300 × 0.8 = 240: 1600 / 240 s
    assert got == pytest.approx(
        [100.0 / 150.0, 400.0 / (math.sqrt(1e5) * 2.0 / 3.0), 1600.0 / 240.0], rel=1e-12
    )
    # without a prior, the edge rate itself: 200 at 1024 and 4096
    assert leave_one_out(points, works, times, 0.0) == pytest.approx([0.5, 2.0, 8.0], rel=1e-12)


@pytest.mark.parametrize("row", [0, 1, 2])
def test_a_slower_measured_row_never_makes_a_prediction_faster(row):
    points = [(1024.0, 512.0), (2048.0, 4096.0), (8192.0, 1024.0)]
    works = [2.0 * x * y for x, y in points]
    times = [1.0, 3.0, 2.0]
    slower = [t * (1.5 if i == row else 1.0) for i, t in enumerate(times)]
    fast, slow = scatter(points, works, times, _prior), scatter(points, works, slower, _prior)
    for q in [(512.0, 512.0), (1500.0, 700.0), (3000.0, 3000.0), (16384.0, 8192.0)]:
        assert slow.time_s(1e6, q) >= fast.time_s(1e6, q)
