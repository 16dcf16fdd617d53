"""Tests for the numpy / torch array utilities; torch tests skip where torch is not installed."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_arrays import (
    empty,
    extract_sequences,
    from_onehot,
    infer_leading_dims,
    iterate_mb_idxs,
    restore_leading_dims,
    select_at_indexes,
    to_onehot,
    valid_mean,
    zeros,
)


@pytest.fixture(scope="module", params=["numpy", "torch"])
def xp(request):
    """Converter to the backend under test: numpy, or torch (skipped without torch).

    Module-scoped so hypothesis tests can use it; a backend is chosen by pytest, not drawn by
    hypothesis, so a numpy-only run still runs every property test on numpy.
    """
    if request.param == "numpy":
        return np.asarray
    torch = pytest.importorskip("torch")
    return torch.as_tensor


def to_np(x):
    """numpy view of a result from either backend, for comparisons."""
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


# ---------------------------------------------------------------------------------------------
# select_at_indexes


def test_select_at_indexes_q_values(xp):
    q = np.arange(24, dtype=np.float32).reshape(2, 3, 4)  # [T,B,A]
    actions = np.array([[0, 1, 3], [2, 2, 0]])
    out = select_at_indexes(xp(actions), xp(q))
    assert is_torch(out) == is_torch(xp(q))
    assert out.shape == (2, 3)
    expected = [[q[t, b, actions[t, b]] for b in range(3)] for t in range(2)]
    np.testing.assert_array_equal(to_np(out), expected)


def test_select_at_indexes_trailing_dims_and_negative(xp):
    p = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)  # [T,B,A,n_atoms]
    actions = np.array([[0, -1, 3], [2, 2, -4]])
    out = select_at_indexes(xp(actions), xp(p))
    assert out.shape == (2, 3, 5)
    np.testing.assert_array_equal(to_np(out)[0, 1], p[0, 1, 3])
    np.testing.assert_array_equal(to_np(out)[1, 2], p[1, 2, 0])


def test_select_at_indexes_scalar_index(xp):
    out = select_at_indexes(xp(np.array(2)), xp(np.array([5, 6, 7])))
    assert to_np(out) == 7


def test_select_at_indexes_numpy_indexes_into_tensor():
    torch = pytest.importorskip("torch")
    q = torch.arange(6.0).reshape(2, 3)
    out = select_at_indexes(np.array([2, 0], dtype=np.uint8), q)
    assert torch.equal(out, torch.tensor([2.0, 3.0]))


def test_select_at_indexes_bad_shape(xp):
    with pytest.raises(ValueError, match=r"\(2, 4\).*\(2, 3, 4\)"):
        select_at_indexes(xp(np.zeros((2, 4), dtype=np.int64)), xp(np.zeros((2, 3, 4))))
    with pytest.raises(ValueError, match="leading dims"):
        select_at_indexes(xp(np.zeros((2, 3), dtype=np.int64)), xp(np.zeros((2, 3))))


def test_select_at_indexes_float_indexes(xp):
    with pytest.raises(TypeError, match="indexes must hold integers"):
        select_at_indexes(xp(np.zeros(2)), xp(np.zeros((2, 3))))


@st.composite
def select_case(draw):
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    n = draw(st.integers(1, 5))
    trail = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    array = rng.normal(size=(*lead, n, *trail))
    indexes = rng.integers(0, n, size=lead)
    return indexes, array


@settings(max_examples=60, deadline=None)
@given(case=select_case())
def test_select_at_indexes_matches_loop(xp, case):
    indexes, array = case
    out = to_np(select_at_indexes(xp(indexes), xp(array)))
    expected = np.empty(indexes.shape + array.shape[indexes.ndim + 1 :])
    for pos in itertools.product(*(range(n) for n in indexes.shape)):
        expected[pos] = array[(*pos, indexes[pos])]
    np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------------------------------------
# to_onehot / from_onehot


def test_to_onehot_and_back(xp):
    idx = np.array([[0, 2], [1, 1]])
    oh = to_onehot(xp(idx), 3)
    assert is_torch(oh) == is_torch(xp(idx))
    assert oh.shape == (2, 2, 3)
    assert str(oh.dtype).endswith("float32")
    np.testing.assert_array_equal(to_np(oh)[0, 1], [0, 0, 1])
    np.testing.assert_array_equal(to_np(oh).sum(-1), np.ones((2, 2)))
    back = from_onehot(oh)
    assert str(back.dtype).endswith("int64")
    np.testing.assert_array_equal(to_np(back), idx)


def test_onehot_dtypes():
    assert to_onehot(np.array([1]), 2, dtype=np.uint8).dtype == np.uint8
    assert from_onehot(np.eye(3), dtype=np.int32).dtype == np.int32
    np.testing.assert_array_equal(from_onehot(np.eye(3)[:, ::-1], dim=0), [2, 1, 0])


def test_onehot_dtypes_torch():
    torch = pytest.importorskip("torch")
    assert to_onehot(torch.tensor([1]), 2, dtype=torch.bool).dtype == torch.bool
    assert from_onehot(torch.eye(3), dtype=torch.int32).dtype == torch.int32
    assert torch.equal(from_onehot(torch.eye(3).flip(1), dim=0), torch.tensor([2, 1, 0]))


@pytest.mark.parametrize("dim", [0, -1, 2.5, True])  # 2.0 is accepted, as 2
def test_to_onehot_bad_dim(xp, dim):
    with pytest.raises(ValueError, match="dim must be an integer >= 1"):
        to_onehot(xp(np.array([0])), dim)


def test_to_onehot_out_of_range_numpy():
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        to_onehot(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        to_onehot(np.array([-1]), 3)


def test_to_onehot_out_of_range_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        to_onehot(torch.tensor([0, 3]), 3)


# ---------------------------------------------------------------------------------------------
# valid_mean


def test_valid_mean_basic(xp):
    x = np.array([[1.0, 2.0], [3.0, 10.0]], dtype=np.float32)
    valid = np.array([[1.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    assert float(valid_mean(xp(x))) == pytest.approx(4.0)
    assert float(valid_mean(xp(x), xp(valid))) == pytest.approx(2.0)
    assert float(valid_mean(xp(x), xp(valid.astype(bool)))) == pytest.approx(2.0)
    np.testing.assert_allclose(to_np(valid_mean(xp(x), xp(valid), dim=1)), [1.5, 3.0])
    np.testing.assert_allclose(to_np(valid_mean(xp(x), dim=0)), [2.0, 6.0])
    assert str(valid_mean(xp(x), xp(valid)).dtype).endswith("float32")


def test_valid_mean_broadcast_mask_and_empty(xp):
    x = np.arange(12, dtype=np.float64).reshape(2, 3, 2)
    valid = np.array([[True, False, True], [False, False, False]])
    out = valid_mean(xp(x), xp(valid[..., None]), dim=(1, 2))
    assert to_np(out)[0] == pytest.approx(x[0, [0, 2]].mean())
    assert np.isnan(to_np(out)[1])  # nothing valid in that row: nan, no warning


def test_valid_mean_integer_data(xp):
    x = np.array([1, 2, 4])
    assert float(valid_mean(xp(x), xp(np.array([True, True, False])))) == pytest.approx(1.5)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    seed=st.integers(0, 2**32 - 1),
)
def test_valid_mean_equals_mean_of_valid(xp, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    valid = rng.random(size=shape) < 0.6
    valid.flat[rng.integers(valid.size)] = True
    expected = x[valid].mean()
    out = valid_mean(xp(x), xp(valid))
    assert float(out) == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------
# infer_leading_dims / restore_leading_dims


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((4, 5), (0, 1, 1, (4, 5))),
        ((3, 4, 5), (1, 1, 3, (4, 5))),
        ((2, 3, 4, 5), (2, 2, 3, (4, 5))),
    ],
)
def test_infer_leading_dims(xp, shape, expected):
    assert infer_leading_dims(xp(np.zeros(shape)), 2) == expected


def test_infer_leading_dims_scalar_data(xp):
    assert infer_leading_dims(xp(np.zeros((7,))), 0) == (1, 1, 7, ())
    assert infer_leading_dims(xp(np.zeros(())), 0) == (0, 1, 1, ())


@pytest.mark.parametrize("shape", [(5,), (1, 2, 3, 4, 5)])
def test_infer_leading_dims_bad(xp, shape):
    with pytest.raises(ValueError, match=rf"expected 2, 3 or 4 dims.*{shape}"):
        infer_leading_dims(xp(np.zeros(shape)), 2)


def test_infer_leading_dims_bad_dim(xp):
    with pytest.raises(ValueError, match="dim must be an integer >= 0"):
        infer_leading_dims(xp(np.zeros(3)), -1)


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(1, 4), min_size=0, max_size=2).map(tuple),
    data=st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple),
)
def test_infer_restore_round_trip(xp, lead, data):
    x = xp(np.arange(int(np.prod(lead + data))).reshape(lead + data))
    lead_dim, T, B, shape = infer_leading_dims(x, len(data))
    assert (lead_dim, shape) == (len(lead), data)
    assert ((1,) * (2 - len(lead)) + lead)[:2] == (T, B)
    flat = x.reshape((T * B, *shape))  # what a model computes on
    restored = restore_leading_dims(flat, lead_dim, T, B)
    assert tuple(restored.shape) == tuple(x.shape)
    np.testing.assert_array_equal(to_np(restored), to_np(x))
    value = flat.reshape(T * B, -1)[:, :1]  # a model output with other data dims
    outs = restore_leading_dims((flat, None, value), lead_dim, T, B)
    assert isinstance(outs, tuple) and outs[1] is None
    assert tuple(outs[2].shape) == (*lead, 1)


def test_restore_leading_dims_structures(xp):
    a, b = xp(np.zeros((6, 2))), xp(np.ones((6,)))
    out = restore_leading_dims([a, b], 2, T=2, B=3)
    assert isinstance(out, list)
    assert [tuple(o.shape) for o in out] == [(2, 3, 2), (2, 3)]
    Pair = namedtuple("Pair", ["mu", "v"])
    out = restore_leading_dims(Pair(a, b), 2, T=3, B=2)
    assert isinstance(out, Pair) and tuple(out.v.shape) == (3, 2)
    assert restore_leading_dims(a, 1, B=6) is a
    single = restore_leading_dims(xp(np.zeros((1, 4))), 0)
    assert tuple(single.shape) == (4,)
    assert restore_leading_dims(None, 0) is None


def test_restore_leading_dims_bad(xp):
    with pytest.raises(ValueError, match="lead_dim must be 0, 1 or 2"):
        restore_leading_dims(xp(np.zeros((2, 3))), 3)
    with pytest.raises(ValueError, match=r"leading batch dim of 6.*\(5, 3\)"):
        restore_leading_dims(xp(np.zeros((5, 3))), 2, T=2, B=3)
    with pytest.raises(ValueError, match=r"leading batch dim of 1.*\(2, 3\)"):
        restore_leading_dims(xp(np.zeros((2, 3))), 0)


# ---------------------------------------------------------------------------------------------
# iterate_mb_idxs


def test_iterate_mb_idxs_in_order_with_partial_last():
    batches = list(iterate_mb_idxs(10, 4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(np.issubdtype(b.dtype, np.integer) for b in batches)
    assert [len(b) for b in iterate_mb_idxs(10, 4, drop_last=True)] == [4, 4]
    assert list(iterate_mb_idxs(0, 4)) == []


def test_iterate_mb_idxs_shuffle_reproducible():
    a = np.concatenate(list(iterate_mb_idxs(50, 7, shuffle=True, rng=3)))
    b = np.concatenate(list(iterate_mb_idxs(50, 7, shuffle=True, rng=np.random.default_rng(3))))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, np.arange(50))
    np.random.seed(0)
    c = np.concatenate(list(iterate_mb_idxs(50, 7, shuffle=True)))
    np.random.seed(0)
    d = np.concatenate(list(iterate_mb_idxs(50, 7, shuffle=True)))
    np.testing.assert_array_equal(c, d)


@pytest.mark.parametrize(
    "args, match",
    [
        ((10, -1), "minibatch_size must be an integer >= 1"),
        ((10, 0), "minibatch_size must be an integer >= 1"),
        ((10, 2.5), "minibatch_size must be an integer >= 1"),
        ((-1, 2), "data_length must be an integer >= 0"),
    ],
)
def test_iterate_mb_idxs_bad_args_raise_on_call(args, match):
    with pytest.raises(ValueError, match=match):
        iterate_mb_idxs(*args)  # raised before iteration starts


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 200),
    mb=st.integers(1, 64),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_iterate_mb_idxs_covers_each_index_once(n, mb, shuffle, seed):
    batches = list(iterate_mb_idxs(n, mb, shuffle=shuffle, rng=seed))
    assert all(len(b) == mb for b in batches[:-1])
    assert all(0 < len(b) <= mb for b in batches)
    flat = np.concatenate(batches) if batches else np.array([], dtype=int)
    assert sorted(flat.tolist()) == list(range(n))
    kept = np.concatenate(list(iterate_mb_idxs(n, mb, shuffle, drop_last=True)) or [[]])
    assert len(kept) == n - n % mb and len(set(kept.tolist())) == len(kept)


# ---------------------------------------------------------------------------------------------
# extract_sequences


def test_extract_sequences_wraps(xp):
    data = np.arange(5 * 3 * 2).reshape(5, 3, 2)  # [T_total=5, B=3, 2]
    out = extract_sequences(xp(data), [3, 0], [1, 2], 4)
    assert is_torch(out) == is_torch(xp(data))
    assert out.shape == (4, 2, 2)
    np.testing.assert_array_equal(to_np(out)[:, 0], data[[3, 4, 0, 1], 1])
    np.testing.assert_array_equal(to_np(out)[:, 1], data[[0, 1, 2, 3], 2])


def test_extract_sequences_bad(xp):
    data = xp(np.zeros((5, 3)))
    with pytest.raises(ValueError, match=r"T must be an integer in \[1, 5\]"):
        extract_sequences(data, [0], [0], 6)
    with pytest.raises(ValueError, match=r"T must be an integer in \[1, 5\]"):
        extract_sequences(data, [0], [0], 0)
    with pytest.raises(ValueError, match="equal length"):
        extract_sequences(data, [0, 1], [0], 2)
    with pytest.raises(ValueError, match="leading dims"):
        extract_sequences(xp(np.zeros(5)), [0], [0], 2)
    with pytest.raises(TypeError, match="B_idx must hold integers"):
        extract_sequences(data, [0], [0.5], 2)


@st.composite
def sequence_case(draw):
    T_total = draw(st.integers(1, 8))
    B = draw(st.integers(1, 4))
    trail = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    T = draw(st.integers(1, T_total))
    n = draw(st.integers(0, 6))
    T_idx = draw(st.lists(st.integers(0, T_total - 1), min_size=n, max_size=n))
    B_idx = draw(st.lists(st.integers(0, B - 1), min_size=n, max_size=n))
    data = np.arange(T_total * B * int(np.prod(trail))).reshape((T_total, B, *trail))
    return data, np.array(T_idx, dtype=np.int64), np.array(B_idx, dtype=np.int64), T


@settings(max_examples=80, deadline=None)
@given(case=sequence_case())
def test_extract_sequences_matches_loop(xp, case):
    data, T_idx, B_idx, T = case
    out = to_np(extract_sequences(xp(data), xp(T_idx), B_idx, T))
    expected = np.zeros((T, len(B_idx), *data.shape[2:]), dtype=data.dtype)
    for i, (t0, b) in enumerate(zip(T_idx, B_idx, strict=True)):
        for t in range(T):
            expected[t, i] = data[(t0 + t) % data.shape[0], b]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------------------------------------
# zeros / empty


@pytest.mark.parametrize("fn", [zeros, empty])
def test_zeros_empty_numpy(fn):
    out = fn((2, 3), "float32")
    assert isinstance(out, np.ndarray) and out.shape == (2, 3) and out.dtype == np.float32
    assert fn(4, np.int64).shape == (4,)
    with pytest.raises(ValueError, match="device"):
        fn((2,), np.float32, device="cpu")


def test_zeros_values():
    assert not zeros((3,), bool).any()


@pytest.mark.parametrize("name", ["zeros", "empty"])
def test_zeros_empty_torch(name):
    torch = pytest.importorskip("torch")
    fn = {"zeros": zeros, "empty": empty}[name]
    out = fn((2, 3), torch.float16, device="cpu")
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3) and out.dtype == torch.float16
    assert fn(4, torch.int64).shape == (4,)
    if name == "zeros":
        assert not out.any()


def test_numpy_paths_never_import_torch():
    """Meaningful where torch is installed: numpy users must not pay for importing it."""
    code = (
        "import sys, numpy as np\n"
        "from rl_arrays import _array_utils as u\n"
        "u.zeros((2,), np.float32); u.empty(3, 'int64')\n"
        "u.select_at_indexes(np.array([0]), np.zeros((1, 2)))\n"
        "u.extract_sequences(np.zeros((3, 2)), [0], [1], 2)\n"
        "u.valid_mean(np.ones(3), np.ones(3)); u.to_onehot([1], 2)\n"
        "list(u.iterate_mb_idxs(5, 2, shuffle=True))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
