"""SumTree and AsyncSumTree: sums, validity around the cursor, sampling, checkpoints, processes."""

import multiprocessing as mp
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_replay._sum_tree import AsyncSumTree, SumTree

# Children started with spawn import their targets by module name.
_TESTS_DIR = str(Path(__file__).parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import rl_replay_mp_children as children  # noqa: E402

TIMEOUT = 60
PROPERTY = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# --- helpers ---------------------------------------------------------------------------------


def assert_sums_consistent(tree):
    nodes, L = tree.tree, tree.n_leaves
    assert nodes.shape == (2 * L,)
    assert nodes[0] == 0
    # Every internal node is exactly the sum of its two children.
    np.testing.assert_array_equal(nodes[1:L], nodes[2 : 2 * L : 2] + nodes[3 : 2 * L : 2])
    leaves = nodes[L:]
    assert (leaves >= 0).all()
    assert (leaves[tree.size :] == 0).all()  # padding
    assert np.isclose(nodes[1], leaves.sum(), rtol=1e-12, atol=0)


def reference_occupants(T_tree, t_total):
    """Absolute time held by each ring row after ``t_total`` rows were written (-1: none)."""
    rows = np.arange(T_tree)
    return np.where(rows < t_total, rows + ((t_total - 1 - rows) // T_tree) * T_tree, -1)


def reference_valid(T_tree, t_total, off_backward, off_forward):
    """Plain-Python statement of which rows may be sampled."""
    valid = []
    for a in reference_occupants(T_tree, t_total):
        valid.append(
            bool(
                a >= 0
                and a >= off_forward  # its history (previous action / frames) exists
                and a < t_total - off_backward  # its n-step future is written
                and a - off_forward >= t_total - T_tree  # that history is not overwritten
            )
        )
    return np.array(valid)


def full_tree(priorities, rng=0, cls=SumTree):
    """A tree whose leaves are exactly ``priorities`` ([T, B]), no invalid rows."""
    priorities = np.asarray(priorities, dtype=np.float64)
    T, B = priorities.shape
    tree = cls(T, B, 0, 0, enable_input_priorities=True, rng=rng)
    tree.advance(T, priorities)
    np.testing.assert_array_equal(tree.leaf_priorities(), priorities)
    return tree


class FixedUniforms:
    """Stands in for the generator: returns the given values in [0, 1) in turn."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64)

    def random(self, n):
        return np.resize(self.values, n).copy()


@st.composite
def tree_configs(draw):
    T = draw(st.integers(1, 24))
    B = draw(st.integers(1, 4))
    off_backward = draw(st.integers(0, T - 1))
    off_forward = draw(st.integers(0, T - 1 - off_backward))
    return T, B, off_backward, off_forward


# --- validity around the cursor and input priorities -----------------------------------------


@PROPERTY
@given(
    config=tree_configs(),
    inputs=st.booleans(),
    data=st.data(),
)
def test_advance_turns_rows_on_and_off_as_specified(config, inputs, data):
    T, B, ob, of = config
    shift = data.draw(st.integers(0, ob)) if inputs else 0
    max_T = T - ob - of
    steps = data.draw(st.lists(st.integers(0, max_T), min_size=1, max_size=12))
    tree = SumTree(
        T, B, ob, of, default_value=0.5, enable_input_priorities=inputs, input_priority_shift=shift
    )
    values = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    given_for_time = {}  # absolute time -> the [B] priorities passed with that row
    for step in steps:
        priorities = None
        if inputs:
            form = data.draw(st.sampled_from(["none", "scalar", "B", "TB"]))
            shapes = {"none": None, "scalar": (), "B": (B,), "TB": (step, B)}
            if shapes[form] is not None:
                priorities = values.uniform(1.0, 2.0, size=shapes[form])
            full = np.broadcast_to(0.5 if priorities is None else priorities, (step, B))
            for k in range(step):
                given_for_time[tree.t_total + k] = full[k]
        written = tree.t_total + step
        tree.advance(step, priorities)
        assert (tree.t, tree.t_total) == (written % T, written)
        valid = reference_valid(T, tree.t_total, ob, of)
        leaves = tree.leaf_priorities()
        assert ((leaves > 0).all(axis=1) == valid).all()
        assert (leaves[~valid] == 0).all()
        for row, a in enumerate(reference_occupants(T, tree.t_total)):
            if valid[row]:
                expected = given_for_time[a + shift] if inputs else 0.5
                np.testing.assert_array_equal(leaves[row], expected)
        assert_sums_consistent(tree)
    assert tree.t_total == sum(steps)
    assert tree.t == sum(steps) % T


def test_rows_before_the_first_wrap():
    tree = SumTree(8, 2, 2, 1)
    tree.advance(3)
    assert tree.total == 0  # row 0 has no history; rows 1, 2 lack their 2-step future
    tree.advance(3)
    np.testing.assert_array_equal(tree.leaf_priorities()[:, 0], [0, 1, 1, 1, 0, 0, 0, 0])
    tree.advance(2)  # wraps: row 0 is overwritten next, so row 1's history is at risk too
    np.testing.assert_array_equal(tree.leaf_priorities()[:, 1], [0, 1, 1, 1, 1, 1, 0, 0])
    assert (tree.t, tree.t_total, tree.total) == (0, 8, 10.0)
    tree.advance(1)
    np.testing.assert_array_equal(tree.leaf_priorities()[:, 0], [0, 0, 1, 1, 1, 1, 1, 0])


def test_input_priorities_with_and_without_shift_land_where_specified():
    plain = SumTree(6, 2, 1, 0, enable_input_priorities=True)
    plain.advance(2, [[1, 2], [3, 4]])
    plain.advance(2, [5, 6])
    np.testing.assert_array_equal(
        plain.input_priorities, [[1, 2], [3, 4], [5, 6], [5, 6], [0, 0], [0, 0]]
    )
    np.testing.assert_array_equal(
        plain.leaf_priorities(), [[1, 2], [3, 4], [5, 6], [0, 0], [0, 0], [0, 0]]
    )
    plain.advance(1)  # default value for the new row
    np.testing.assert_array_equal(plain.input_priorities[4], [1, 1])

    shifted = SumTree(6, 2, 2, 0, enable_input_priorities=True, input_priority_shift=2)
    shifted.advance(2, [[1, 2], [3, 4]])  # rows 0, 1 -> stored for rows 4, 5 (earlier, mod 6)
    shifted.advance(2, 7.0)  # rows 2, 3 -> stored for rows 0, 1
    np.testing.assert_array_equal(
        shifted.input_priorities, [[7, 7], [7, 7], [0, 0], [0, 0], [1, 2], [3, 4]]
    )
    np.testing.assert_array_equal(
        shifted.leaf_priorities(), [[7, 7], [7, 7], [0, 0], [0, 0], [0, 0], [0, 0]]
    )


def test_advance_rejects_bad_input():
    with pytest.raises(ValueError, match="enable_input_priorities=False"):
        SumTree(8, 2, 1, 1).advance(2, priorities=1.0)
    tree = SumTree(8, 2, 1, 1, enable_input_priorities=True)
    with pytest.raises(ValueError, match="broadcast to shape"):
        tree.advance(2, np.ones((3, 2)))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.advance(2, -1.0)
    with pytest.raises(ValueError, match="would overlap"):
        tree.advance(7)
    with pytest.raises(ValueError, match="T must be >= 0"):
        tree.advance(-1)
    assert (tree.t, tree.total) == (0, 0.0)  # nothing was written by the failed calls
    tree.advance(6)
    tree.advance(0)
    assert tree.t == 6


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"T": 0}, ValueError, "T must be >= 1"),
        ({"B": 0}, ValueError, "B must be >= 1"),
        ({"T": 2.5}, TypeError, "T must be an int"),
        ({"off_backward": -1}, ValueError, "off_backward must be >= 0"),
        ({"off_forward": -1}, ValueError, "off_forward must be >= 0"),
        ({"off_backward": 3, "off_forward": 1}, ValueError, "off_forward must be < T"),
        ({"default_value": 0.0}, ValueError, "default_value must be finite and > 0"),
        ({"default_value": float("nan")}, ValueError, "default_value"),
        ({"input_priority_shift": 2}, ValueError, "must be <= off_backward"),
        ({"rng": "seed"}, TypeError, "rng must be"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    args = {"T": 4, "B": 2, "off_backward": 1, "off_forward": 1, **kwargs}
    with pytest.raises(error, match=match):
        SumTree(**args)


# --- sums under random use --------------------------------------------------------------------


@PROPERTY
@given(config=tree_configs(), data=st.data())
def test_sums_stay_consistent_under_random_operations(config, data):
    T, B, ob, of = config
    seed = data.draw(st.integers(0, 2**32 - 1))
    tree = SumTree(T, B, ob, of, rng=seed)
    values = np.random.default_rng(seed)
    operations = st.one_of(
        st.tuples(st.just("advance"), st.integers(0, T - ob - of)),
        st.tuples(st.just("sample"), st.integers(1, 2 * T * B)),
        st.tuples(st.just("unique"), st.integers(1, T * B)),
        st.tuples(st.just("update"), st.sampled_from([0.0, 1e-3, 1.0, 50.0])),
    )
    sampled = False
    for op, arg in data.draw(st.lists(operations, min_size=1, max_size=25)):
        if op == "advance":
            tree.advance(arg)
        elif op in ("sample", "unique"):
            unique = op == "unique"
            nonzero = int((tree.leaf_priorities() > 0).sum())
            if nonzero == 0 or (unique and arg > nonzero):
                with pytest.raises(ValueError):
                    tree.sample(arg, unique=unique)
                continue
            before = tree.tree.copy()
            T_idxs, B_idxs, priorities = tree.sample(arg, unique=unique)
            np.testing.assert_array_equal(tree.tree, before)  # sampling never writes
            assert (priorities > 0).all()
            np.testing.assert_array_equal(priorities, tree.leaf_priorities()[T_idxs, B_idxs])
            if unique:
                assert len(set(zip(T_idxs.tolist(), B_idxs.tolist(), strict=True))) == arg
            sampled = True
        elif sampled:
            n = len(tree._sampled_leaves)
            tree.update_batch_priorities(values.uniform(0.0, arg, size=n))
        assert_sums_consistent(tree)


# --- sampling ---------------------------------------------------------------------------------


def test_sample_errors():
    tree = SumTree(4, 2, 1, 1)
    with pytest.raises(ValueError, match="no valid samples yet"):
        tree.sample(1)
    tree.advance(2)
    tree.advance(2)
    with pytest.raises(ValueError, match="n must be >= 1"):
        tree.sample(0)
    with pytest.raises(RuntimeError, match="before any sample"):
        tree.update_batch_priorities(np.ones(3))
    tree.sample(3)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        tree.update_batch_priorities(np.ones(4))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update_batch_priorities([1.0, np.inf, 1.0])


EXTREMES = [0.0, 5e-324, 1e-300, 1e-10, 1.0, 1e10, 1e300]


@PROPERTY
@given(
    priorities=st.lists(st.sampled_from(EXTREMES), min_size=1, max_size=40).filter(any),
    seed=st.integers(0, 2**32 - 1),
)
def test_sample_never_returns_a_zero_priority_leaf(priorities, seed):
    tree = full_tree(np.array(priorities)[:, None], rng=seed)
    T_idxs, B_idxs, values = tree.sample(2000)
    assert (values > 0).all()
    assert (tree.leaf_priorities()[T_idxs, B_idxs] > 0).all()
    nonzero = int(np.count_nonzero(priorities))
    T_idxs, _, values = tree.sample(nonzero, unique=True)
    assert (values > 0).all() and len(set(T_idxs.tolist())) == nonzero


def test_sample_at_the_ends_of_the_range_skips_zero_leaves():
    # Here a plain descent (go right when value >= left sum) with the largest generator value
    # reaches leaf 7: the subtractions on the way leave more than the right sums hold.
    priorities = np.array([0.3, 0.0, 0.0, 0.3, 0.1, 0.3, 0.7, 0.0])
    tree = full_tree(priorities[:, None])
    edges = [0.0, 5e-324, 0.5, np.nextafter(1.0, 0), 1 - 2**-50]
    tree.rng = FixedUniforms(edges)
    T_idxs, _, values = tree.sample(len(edges))
    assert (values > 0).all()
    assert T_idxs[0] == 0 and T_idxs[3] == 6  # first and last positive leaves
    # Values spread over [0, 1) and out-of-range generator values (clamped) also land on
    # positive leaves, with huge and tiny priorities mixed with zeros.
    mixed = np.array([0, 1e16, 1, 0, 0, 1e16, 1, 0, 0, 0, 3e-300, 0, 0, 0, 0, 0], float)
    tree = full_tree(mixed[:, None])
    tree.rng = FixedUniforms(np.concatenate([np.linspace(0, 1, 10001)[:-1], [1.0, 1.5]]))
    _, _, values = tree.sample(10002)
    assert (values > 0).all()


def chi_square(counts, expected):
    return float(((counts - expected) ** 2 / expected).sum())


def chi_square_critical(df, z=4.753):
    """Wilson-Hilferty approximation of the chi-square quantile (z = 4.753: p = 1e-6)."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def test_sampling_distribution_matches_priorities():
    values = np.random.default_rng(12345)
    priorities = values.uniform(0.5, 5.0, size=(16, 4))
    priorities[values.random((16, 4)) < 0.2] = 0.0
    tree = full_tree(priorities, rng=2024)
    n = 50_000
    T_idxs, B_idxs, _ = tree.sample(n)
    counts = np.zeros((16, 4))
    np.add.at(counts, (T_idxs, B_idxs), 1)
    assert (counts[priorities == 0] == 0).all()
    positive = priorities > 0
    expected = n * priorities[positive] / priorities.sum()
    critical = chi_square_critical(positive.sum() - 1)
    assert chi_square(counts[positive], expected) < critical
    # The test has power: the same counts are far from a uniform distribution.
    uniform = np.full(positive.sum(), n / positive.sum())
    assert chi_square(counts[positive], uniform) > 10 * critical


def test_unique_sampling_distribution_is_successive_draws_without_replacement():
    priorities = np.array([8.0, 1.0, 1.0, 0.0])  # a dominant leaf forces repeated rounds
    tree = full_tree(priorities[:, None], rng=7)
    calls = 6000
    counts = np.zeros((4, 4))
    for _ in range(calls):
        T_idxs, _, _ = tree.sample(2, unique=True)
        counts[T_idxs[0], T_idxs[1]] += 1
    total = priorities.sum()
    expected = np.zeros((4, 4))
    for i in range(3):
        for j in range(3):
            if i != j:
                expected[i, j] = (
                    calls * priorities[i] / total * priorities[j] / (total - priorities[i])
                )
    possible = expected > 0
    assert counts[~possible].sum() == 0
    assert chi_square(counts[possible], expected[possible]) < chi_square_critical(
        possible.sum() - 1
    )


def test_unique_sampling():
    priorities = np.zeros((5, 3))
    priorities[[0, 1, 1, 3, 4], [2, 0, 1, 1, 2]] = [1e300, 1e-300, 2.0, 3.0, 5e-324]
    tree = full_tree(priorities, rng=3)
    before = tree.tree.copy()
    for n in range(1, 6):
        T_idxs, B_idxs, values = tree.sample(n, unique=True)
        pairs = set(zip(T_idxs.tolist(), B_idxs.tolist(), strict=True))
        assert len(pairs) == n
        assert (values > 0).all()
    # n equal to the number of nonzero leaves gives exactly those leaves, even 5e-324.
    assert pairs == {(0, 2), (1, 0), (1, 1), (3, 1), (4, 2)}
    with pytest.raises(ValueError, match="only 5 slots have a nonzero priority"):
        tree.sample(6, unique=True)
    with pytest.raises(ValueError, match="from a tree of 15 slots"):
        tree.sample(16, unique=True)
    np.testing.assert_array_equal(tree.tree, before)  # unique sampling never writes
    # The last successful sample is still the one updated.
    tree.update_batch_priorities(np.full(5, 4.0))
    assert tree.total == 20.0
    assert_sums_consistent(tree)


def test_update_with_duplicate_leaves_keeps_sums_correct():
    tree = full_tree(np.array([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]), rng=5)
    T_idxs, B_idxs, _ = tree.sample(50)
    leaves = T_idxs * 2 + B_idxs
    assert len(np.unique(leaves)) == 2
    new = np.arange(1.0, 51.0)
    tree.update_batch_priorities(new)
    for leaf in np.unique(leaves):
        last = np.flatnonzero(leaves == leaf)[-1]
        assert tree.leaf_priorities().ravel()[leaf] == new[last]  # last write wins
    assert_sums_consistent(tree)
    assert (
        tree.total
        == new[np.flatnonzero(leaves == leaves[0])[-1]]
        + new[np.flatnonzero(leaves != leaves[0])[-1]]
    )


def test_update_can_set_a_priority_to_zero():
    tree = full_tree(np.ones((4, 1)), rng=1)
    tree.sample(1)
    tree.update_batch_priorities([0.0])
    assert tree.total == 3.0
    _, _, values = tree.sample(1000)
    assert (values > 0).all()


def test_print_tree_and_repr(capsys):
    tree = full_tree(np.array([[1.0], [2.0], [3.0]]))
    tree.print_tree()
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["level 0: [6.]", "level 1: [3. 3.]", "level 2: [1. 2. 3. 0.]"]
    tree.print_tree(level=1)
    assert capsys.readouterr().out == "level 1: [3. 3.]\n"
    with pytest.raises(ValueError, match="leaf level"):
        tree.print_tree(level=3)
    assert "t=0" in repr(tree) and "total=6" in repr(tree)
    with pytest.raises(ValueError, match="read-only"):
        tree.leaf_priorities()[0, 0] = 5.0


def test_single_slot_tree():
    tree = SumTree(1, 1, 0, 0)
    assert tree.n_leaves == 1 and tree.depth == 0
    tree.advance(1)
    T_idxs, B_idxs, _ = tree.sample(3)
    assert T_idxs.tolist() == [0, 0, 0] and B_idxs.tolist() == [0, 0, 0]
    tree.update_batch_priorities([1.0, 2.0, 3.0])
    assert tree.total == 3.0
    assert tree.sample(1, unique=True)[0].tolist() == [0]


# --- checkpoints ------------------------------------------------------------------------------


def _run_script(tree, steps):
    """Alternate advances, samples and updates; return what was sampled."""
    values = np.random.default_rng(99)
    out = []
    for step in steps:
        tree.advance(step, values.uniform(0.1, 2.0, size=(step, tree.B)))
        T_idxs, B_idxs, priorities = tree.sample(8)
        tree.update_batch_priorities(priorities * values.uniform(0.5, 1.5, size=8))
        out.append((T_idxs, B_idxs, priorities, tree.sample(3, unique=True)[0]))
    return out


@pytest.mark.parametrize("cls", [SumTree, AsyncSumTree])
def test_state_dict_round_trip_reproduces_future_samples(cls):
    args = (10, 3, 2, 1, 1.0, True, 1)
    tree = cls(*args, rng=11)
    _run_script(tree, [5, 4, 7])
    state = tree.state_dict()
    assert set(state) >= {"tree", "cursor", "input_priorities", "rng_state"}
    state = pickle.loads(pickle.dumps(state))  # holds only plain data
    original = _run_script(tree, [3, 7, 6, 2])

    restored = cls(*args, rng=12345)
    restored.load_state_dict(state)
    again = _run_script(restored, [3, 7, 6, 2])
    for a, b in zip(original, again, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(restored.tree, tree.tree)
    assert (restored.t, restored.t_total) == (tree.t, tree.t_total)


def test_load_state_dict_checks_the_configuration():
    state = SumTree(10, 3, 2, 1).state_dict()
    with pytest.raises(ValueError, match="B=3"):
        SumTree(10, 2, 2, 1).load_state_dict(state)
    with pytest.raises(ValueError, match="enable_input_priorities"):
        SumTree(10, 3, 2, 1, enable_input_priorities=True).load_state_dict(state)
    bad = dict(state, tree=np.zeros(3))
    target = SumTree(10, 3, 2, 1)
    target.advance(4)
    with pytest.raises(ValueError, match="shape"):
        target.load_state_dict(bad)
    assert target.t == 4  # nothing restored by the failed load


# --- shared memory across processes -----------------------------------------------------------


def _join(process):
    process.join(TIMEOUT)
    assert process.exitcode == 0


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_async_tree_child_advances_and_updates(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    ctx = mp.get_context(method)
    tree = AsyncSumTree(8, 2, 1, 1, rng=0)
    tree.advance(4)
    queue = ctx.Queue()
    new = [5.0, 6.0, 7.0]
    process = ctx.Process(target=children.advance_sample_update, args=(tree, 3, new, queue))
    process.start()
    T_idxs, B_idxs, child_total, child_t, child_t_total = queue.get(timeout=TIMEOUT)
    _join(process)
    assert (tree.t, tree.t_total) == (child_t, child_t_total) == (7, 7)
    assert tree.total == child_total
    leaves = tree.leaf_priorities()
    assert leaves[T_idxs[-1], B_idxs[-1]] == 7.0
    assert_sums_consistent(tree)
    reference = SumTree(8, 2, 1, 1)
    reference.advance(4)
    reference.advance(3)
    changed = np.zeros((8, 2), bool)
    changed[T_idxs, B_idxs] = True
    np.testing.assert_array_equal(leaves[~changed], reference.leaf_priorities()[~changed])
    _, _, values = tree.sample(100)  # the parent samples the child's priorities
    assert set(values.tolist()) <= {1.0, 5.0, 6.0, 7.0}


def test_async_tree_through_a_queue_under_spawn():
    ctx = mp.get_context("spawn")
    tree = AsyncSumTree(6, 3, 1, 0, enable_input_priorities=True, rng=0)
    tree.advance(3, 2.0)
    tree.sample(2)  # the parent's remembered leaves do not travel
    inbox, outbox = ctx.Queue(), ctx.Queue()
    process = ctx.Process(target=children.advance_from_queue, args=(inbox, outbox))
    process.start()
    inbox.put((tree, 2))
    total, t, t_total, fresh = outbox.get(timeout=TIMEOUT)
    _join(process)
    assert fresh
    assert (tree.t, tree.t_total) == (t, t_total) == (5, 5)
    assert tree.total == total == 2.0 * 3 * 3 + 1.0 * 3  # rows 0-2 input, row 3 default
    np.testing.assert_array_equal(tree.input_priorities[3:5], 1.0)
    assert tree._sampled_leaves is not None


def test_async_tree_pickles_shared_arrays_not_views():
    tree = AsyncSumTree(4, 2, 1, 0)
    state = tree.__getstate__()
    assert not {"_nodes", "_pairs", "_inputs", "_sampled_leaves"} & set(state)
    assert type(tree.tree).__name__ == "SharedArray"
    assert type(tree._nodes) is np.ndarray  # arithmetic on plain views


def test_plain_tree_pickles_as_an_independent_copy():
    tree = SumTree(4, 2, 1, 0, rng=0)
    tree.advance(3)
    tree.sample(2)
    copy = pickle.loads(pickle.dumps(tree))
    assert copy._sampled_leaves is None
    np.testing.assert_array_equal(copy.tree, tree.tree)
    np.testing.assert_array_equal(copy.sample(5)[0], tree.sample(5)[0])  # same rng state
    copy.advance(1)
    assert (copy.t, tree.t) == (0, 3)
