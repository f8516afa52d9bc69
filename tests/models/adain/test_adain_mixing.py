"""Style mixing: the convex weights and the masks' rules, owned by ``models.adain.stats``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.adain.stats import check_masks, convex_weights


def test_no_weights_are_equal_weights():
    assert convex_weights(None, 4) == (0.25,) * 4
    assert convex_weights(None, 1) == (1.0,)


@given(st.lists(st.floats(0.0, 1e308), min_size=1, max_size=4).filter(lambda w: max(w) > 0))
def test_given_weights_become_their_shares_of_the_sum(weights):
    got = convex_weights(weights, len(weights))
    assert math.isclose(math.fsum(got), 1.0, rel_tol=1e-12)
    peak = max(weights)
    total = math.fsum(w / peak for w in weights)
    for share, weight in zip(got, weights, strict=True):
        assert math.isclose(share, weight / peak / total, rel_tol=1e-12, abs_tol=1e-300)


def test_huge_weights_do_not_overflow():
    assert convex_weights([1e308, 1e308], 2) == (0.5, 0.5)


@pytest.mark.parametrize(
    ("weights", "count", "message"),
    [
        ([1.0, 2.0], 3, "got 2 style weights for 3 styles"),
        ([-1.0], 1, ">= 0"),
        ([float("nan")], 1, "finite"),
        ([float("inf"), 1.0], 2, "finite"),
        ([0.0, 0.0], 2, "not all 0"),
        (None, 0, "at least one style"),
    ],
)
def test_bad_weights_are_refused(weights, count, message):
    with pytest.raises(ValueError, match=message):
        convex_weights(weights, count)


def test_masks_need_one_per_style_and_no_weights():
    check_masks(2, 2, weighted=False)
    with pytest.raises(ValueError, match="cannot be combined"):
        check_masks(1, 1, weighted=True)
    with pytest.raises(ValueError, match="got 1 masks for 2 styles"):
        check_masks(1, 2, weighted=False)
