"""Return utilities against plain Python loops, on numpy arrays and torch tensors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rl_algos
import rl_replay
from rl_algos import (
    discount_return,
    discount_return_tl,
    generalized_advantage_estimation,
    generalized_advantage_estimation_tl,
    valid_from_done,
)

# ---------------------------------------------------------------- loop references (one env at a time)


def loop_discount_return(reward, done, bootstrap_value, discount, timeout=None, value=None):
    out = np.zeros(reward.shape)
    for idx in np.ndindex(*reward.shape[1:]):
        following = float(bootstrap_value[idx])
        for t in reversed(range(reward.shape[0])):
            at = (t, *idx)
            if timeout is not None and timeout[at]:
                g = value[at]  # the time-out step's target is its own value
            elif done[at]:
                g = reward[at]
            else:
                g = reward[at] + discount * following
            out[at] = following = g
    return out


def loop_gae(reward, value, done, bootstrap_value, discount, gae_lambda, timeout=None):
    advantage = np.zeros(reward.shape)
    for idx in np.ndindex(*reward.shape[1:]):
        next_value, next_advantage = float(bootstrap_value[idx]), 0.0
        for t in reversed(range(reward.shape[0])):
            at = (t, *idx)
            if timeout is not None and timeout[at]:
                a = 0.0
            elif done[at]:
                a = reward[at] - value[at]
            else:
                delta = reward[at] + discount * next_value - value[at]
                a = delta + discount * gae_lambda * next_advantage
            advantage[at] = next_advantage = a
            next_value = value[at]
    return advantage, advantage + value


def loop_valid(done):
    valid = np.zeros(done.shape)
    for idx in np.ndindex(*done.shape[1:]):
        alive = True
        for t in range(done.shape[0]):
            valid[(t, *idx)] = alive
            alive = alive and not done[(t, *idx)]
    return valid


# ---------------------------------------------------------------- random batches


@st.composite
def batches(draw):
    T = draw(st.integers(1, 9))
    trailing = draw(st.sampled_from([(), (1,), (4,), (2, 3)]))
    p_done = draw(st.sampled_from([0.0, 0.25, 0.6, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (T, *trailing)
    done = rng.random(shape) < p_done
    return dict(
        reward=rng.normal(size=shape),
        value=rng.normal(size=shape),
        done=done,
        timeout=done & (rng.random(shape) < 0.5),
        bootstrap_value=rng.normal(size=trailing),
        discount=draw(st.floats(0, 1)),
        gae_lambda=draw(st.floats(0, 1)),
    )


def as_kind(b, kind):
    """The batch as numpy arrays or torch tensors (done as bool, or float for torch_float)."""
    if kind == "numpy":
        return b
    out = {
        k: torch.from_numpy(np.asarray(v)) if isinstance(v, np.ndarray) else v for k, v in b.items()
    }
    if kind == "torch_float":
        out["done"] = out["done"].double()
    return out


def to_numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


KINDS = ["numpy", "torch", "torch_float"]


@pytest.mark.parametrize("kind", KINDS)
@given(b=batches())
def test_discount_return_matches_loop(kind, b):
    a = as_kind(b, kind)
    got = discount_return(a["reward"], a["done"], a["bootstrap_value"], a["discount"])
    assert type(got) is type(a["reward"])
    expected = loop_discount_return(b["reward"], b["done"], b["bootstrap_value"], b["discount"])
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@given(b=batches())
def test_gae_matches_loop(kind, b):
    a = as_kind(b, kind)
    advantage, return_ = generalized_advantage_estimation(
        a["reward"], a["value"], a["done"], a["bootstrap_value"], a["discount"], a["gae_lambda"]
    )
    exp_adv, exp_ret = loop_gae(
        b["reward"], b["value"], b["done"], b["bootstrap_value"], b["discount"], b["gae_lambda"]
    )
    np.testing.assert_allclose(to_numpy(advantage), exp_adv, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(to_numpy(return_), exp_ret, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@given(b=batches())
def test_time_limit_forms_match_loop(kind, b):
    a = as_kind(b, kind)
    return_ = discount_return_tl(
        a["reward"], a["done"], a["bootstrap_value"], a["discount"], a["timeout"], a["value"]
    )
    expected = loop_discount_return(
        b["reward"], b["done"], b["bootstrap_value"], b["discount"], b["timeout"], b["value"]
    )
    np.testing.assert_allclose(to_numpy(return_), expected, rtol=1e-10, atol=1e-10)
    advantage, return_ = generalized_advantage_estimation_tl(
        a["reward"],
        a["value"],
        a["done"],
        a["bootstrap_value"],
        a["discount"],
        a["gae_lambda"],
        a["timeout"],
    )
    exp_adv, exp_ret = loop_gae(
        b["reward"],
        b["value"],
        b["done"],
        b["bootstrap_value"],
        b["discount"],
        b["gae_lambda"],
        b["timeout"],
    )
    np.testing.assert_allclose(to_numpy(advantage), exp_adv, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(to_numpy(return_), exp_ret, rtol=1e-10, atol=1e-10)


@given(b=batches())
def test_time_limit_forms_without_timeouts_are_the_plain_forms(b):
    no_timeout = np.zeros_like(b["done"])
    args = (b["reward"], b["done"], b["bootstrap_value"], b["discount"])
    np.testing.assert_array_equal(
        discount_return_tl(*args, no_timeout, b["value"]), discount_return(*args)
    )
    gae_args = (b["reward"], b["value"], b["done"], b["bootstrap_value"], b["discount"])
    plain = generalized_advantage_estimation(*gae_args, b["gae_lambda"])
    tl = generalized_advantage_estimation_tl(*gae_args, b["gae_lambda"], no_timeout)
    np.testing.assert_array_equal(plain[0], tl[0])
    np.testing.assert_array_equal(plain[1], tl[1])


@given(b=batches())
def test_gae_with_lambda_one_is_the_discounted_return(b):
    gae_args = (b["reward"], b["value"], b["done"], b["bootstrap_value"], b["discount"])
    advantage, return_ = generalized_advantage_estimation(*gae_args, 1.0)
    expected = discount_return(b["reward"], b["done"], b["bootstrap_value"], b["discount"])
    np.testing.assert_allclose(return_, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(advantage, expected - b["value"], rtol=1e-9, atol=1e-9)
    _, return_tl = generalized_advantage_estimation_tl(*gae_args, 1.0, b["timeout"])
    expected_tl = discount_return_tl(
        b["reward"], b["done"], b["bootstrap_value"], b["discount"], b["timeout"], b["value"]
    )
    np.testing.assert_allclose(return_tl, expected_tl, rtol=1e-9, atol=1e-9)


@given(b=batches())
def test_gae_with_lambda_zero_is_the_one_step_td_error(b):
    r, v, d, bv, g = b["reward"], b["value"], b["done"], b["bootstrap_value"], b["discount"]
    advantage, _ = generalized_advantage_estimation(r, v, d, bv, g, 0.0)
    next_value = np.concatenate([v[1:], bv[None]])
    np.testing.assert_allclose(advantage, r + g * (1 - d) * next_value - v, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@given(b=batches())
def test_valid_from_done_matches_loop(kind, b):
    a = as_kind(b, kind)
    valid = valid_from_done(a["done"])
    np.testing.assert_array_equal(to_numpy(valid), loop_valid(b["done"]))
    assert valid.dtype in (np.float32, np.float64, torch.float32, torch.float64)


# ---------------------------------------------------------------- a worked example


def test_worked_example_with_a_termination_a_timeout_and_bootstrap():
    # One env, T = 6: steps 0-1 end in a termination at 1; steps 2-3 end in a time-out at 3;
    # steps 4-5 run on and bootstrap from 10 after the batch.
    reward = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    value = np.array([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    done = np.array([0, 1, 0, 1, 0, 0], bool)
    timeout = np.array([0, 0, 0, 1, 0, 0], bool)
    g = 0.5
    expected = [
        1 + g * 2,  # 2: terminated after step 1
        2,
        3 + g * 0.8,  # bootstraps from value[3], the time-out step's value
        0.8,  # the time-out step: its own value (masked out in training)
        5 + g * (6 + g * 10),
        6 + g * 10,
    ]
    np.testing.assert_allclose(discount_return_tl(reward, done, 10.0, g, timeout, value), expected)
    # Without the time-limit form the time-out is a termination.
    np.testing.assert_allclose(discount_return(reward, done, 10.0, g)[2:4], [3 + g * 4, 4])
    lam = 0.5
    advantage, return_ = generalized_advantage_estimation_tl(
        reward, value, done, 10.0, g, lam, timeout
    )
    d5 = 6 + g * 10 - 1.0
    d4 = 5 + g * 1.0 - 0.9
    np.testing.assert_allclose(
        advantage,
        [
            1 + g * 0.6 - 0.5 + g * lam * (2 - 0.6),
            2 - 0.6,
            3 + g * 0.8 - 0.7,
            0,
            d4 + g * lam * d5,
            d5,
        ],
    )
    np.testing.assert_allclose(return_, advantage + value)


# ---------------------------------------------------------------- types, destinations, errors


def test_float32_stays_float32_and_inputs_are_not_modified():
    reward = np.arange(6, dtype=np.float32).reshape(3, 2)
    done = np.array([[0, 1], [1, 1], [0, 0]], bool)
    keep = reward.copy()
    out = discount_return_tl(reward, done, np.zeros(2, np.float32), 0.9, done, reward * 2)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(reward, keep)
    t_out = generalized_advantage_estimation(
        torch.from_numpy(reward),
        torch.zeros(3, 2),
        torch.from_numpy(done),
        torch.zeros(2),
        0.9,
        0.9,
    )
    assert all(x.dtype == torch.float32 for x in t_out)


def test_integer_rewards_give_float32():
    out = discount_return(np.array([1, 2, 3]), np.zeros(3, bool), 0, 0.5)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_results_are_written_into_the_destinations(kind):
    rng = np.random.default_rng(0)
    b = dict(
        reward=rng.normal(size=(5, 3)),
        value=rng.normal(size=(5, 3)),
        done=rng.random((5, 3)) < 0.3,
        bootstrap_value=rng.normal(size=3),
    )
    a = as_kind(b, kind)
    zeros = (lambda: np.zeros((5, 3))) if kind == "numpy" else (lambda: torch.zeros(5, 3).double())
    dest = zeros()
    out = discount_return(a["reward"], a["done"], a["bootstrap_value"], 0.9, return_dest=dest)
    assert out is dest
    expected = loop_discount_return(b["reward"], b["done"], b["bootstrap_value"], 0.9)
    np.testing.assert_allclose(to_numpy(dest), expected)
    adv_dest, ret_dest = zeros(), zeros()
    adv, ret = generalized_advantage_estimation(
        a["reward"], a["value"], a["done"], a["bootstrap_value"], 0.9, 0.8, adv_dest, ret_dest
    )
    assert adv is adv_dest and ret is ret_dest
    exp_adv, exp_ret = loop_gae(b["reward"], b["value"], b["done"], b["bootstrap_value"], 0.9, 0.8)
    np.testing.assert_allclose(to_numpy(adv_dest), exp_adv)
    np.testing.assert_allclose(to_numpy(ret_dest), exp_ret)


def test_bad_shapes_are_named():
    reward, done = np.zeros((4, 2)), np.zeros((4, 2), bool)
    with pytest.raises(ValueError, match="done must have reward's shape"):
        discount_return(reward, done[:, :1], np.zeros(2), 0.9)
    with pytest.raises(ValueError, match="bootstrap_value must have shape"):
        discount_return(reward, done, np.zeros(3), 0.9)
    with pytest.raises(ValueError, match="value must have reward's shape"):
        generalized_advantage_estimation(reward, np.zeros(4), done, np.zeros(2), 0.9, 0.9)
    with pytest.raises(ValueError, match="leading time dim"):
        discount_return(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(2), 0.9)
    with pytest.raises(ValueError, match="leading time dim"):
        valid_from_done(np.array(True))


def test_a_timeout_must_be_done_and_have_a_value():
    done = np.array([False, True])
    with pytest.raises(ValueError, match="timeout is True at a step where done is False"):
        discount_return_tl(np.zeros(2), done, 0.0, 0.9, np.array([True, False]), np.zeros(2))
    with pytest.raises(ValueError, match="value is required"):
        discount_return_tl(np.zeros(2), done, 0.0, 0.9, done, None)
    with pytest.raises(ValueError, match="value is required"):
        generalized_advantage_estimation(np.zeros(2), None, done, 0.0, 0.9, 0.9)


def test_n_step_return_is_rl_replays():
    assert rl_algos.discount_return_n_step is rl_replay.discount_return_n_step


@settings(max_examples=20)
@given(b=batches())
def test_torch_tensors_keep_their_device_and_dtype(b):
    a = as_kind(b, "torch")
    out = discount_return_tl(
        a["reward"].float(), a["done"], a["bootstrap_value"], 0.9, a["timeout"], a["value"].float()
    )
    assert out.dtype == torch.float32 and out.device == a["reward"].device
