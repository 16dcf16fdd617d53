"""as_count, and the rl-arrays counts that go through it (1e3 accepted as rlpyt writes it)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rl_arrays import (
    BatchSpec,
    as_count,
    build_array,
    extract_sequences,
    infer_leading_dims,
    iterate_mb_idxs,
    np_mp_array,
    to_onehot,
)


@pytest.mark.parametrize(
    "value, expected",
    [(1000, 1000), (np.int64(7), 7), (1e3, 1000), (50e6, 50_000_000), (np.float32(8.0), 8)],
)
def test_as_count_accepts_ints_and_integral_floats(value, expected):
    count = as_count("n_steps", value)
    assert count == expected and type(count) is int


@pytest.mark.parametrize(
    "value", [1.5, -1, -1.0, math.nan, math.inf, True, np.bool_(True), "10", None, np.float64(2.5)]
)
def test_as_count_refuses_the_rest_with_the_message(value):
    message = f"n_steps must be an integer >= 0, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        as_count("n_steps", value)


def test_as_count_low_and_expected():
    assert as_count("B", 1.0, 1) == 1
    with pytest.raises(ValueError, match=r"^B must be an integer >= 1, got 0.0$"):
        as_count("B", 0.0, 1)
    with pytest.raises(ValueError, match=r"^B must be a positive integer, got 0$"):
        as_count("B", 0, 1, expected="a positive integer")


@given(n=st.integers(-(10**6), 10**12), low=st.integers(-5, 5))
def test_as_count_float_of_an_int_is_that_int(n, low):
    if n >= low:
        assert as_count("n", float(n), low) == n == as_count("n", np.int64(n), low)
    else:
        with pytest.raises(ValueError, match=f"n must be an integer >= {low}"):
            as_count("n", float(n), low)


@given(x=st.floats(allow_nan=True, allow_infinity=True))
def test_as_count_refuses_every_non_integral_float(x):
    if math.isfinite(x) and x.is_integer() and x >= 0:
        assert as_count("n", x) == int(x)
    else:
        with pytest.raises(ValueError, match="n must be an integer >= 0"):
            as_count("n", x)


# The package's own counts: a float count is stored as an int, 1.5 and -1 still refused.
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda v: BatchSpec(T=v, B=2).T, "BatchSpec: T must be a positive integer"),
        (lambda v: BatchSpec(T=2, B=v).B, "BatchSpec: B must be a positive integer"),
        (lambda v: len(next(iterate_mb_idxs(v, 8))), "data_length must be an integer >= 0"),
        (lambda v: len(next(iterate_mb_idxs(40, v))), "minibatch_size must be an integer >= 1"),
        (lambda v: to_onehot(np.array([0]), v).shape[-1], "dim must be an integer >= 1"),
        (lambda v: extract_sequences(np.zeros((9, 2)), [0], [0], v).shape[0], "T must be an"),
        (lambda v: build_array(np.float32(0), (v, 1)).shape[0], "leading_dims must be non-neg"),
        (lambda v: build_array(np.float32(0), v).shape[0], "leading_dims must be non-negative"),
        (lambda v: np_mp_array(v, np.uint8).shape[0], "shape must be non-negative integers"),
        (lambda v: len(infer_leading_dims(np.zeros((1,) * 6), v)[3]), "dim must be an integer"),
    ],
)
def test_counts_accept_integral_floats(call, match):
    count = call(4.0)
    assert count == 4 and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=match):
            call(bad)
