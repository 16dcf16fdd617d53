"""Environments' state as plain data: saved, loaded into fresh envs, and the same steps after."""

import importlib.util

import gymnasium
import numpy as np
import pytest

from rl_samplers import UnsavedState, load_state, make, state_of


def steps(env, actions):
    return [np.asarray(env.step(a).observation).copy() for a in actions]


def plain(tree):
    """Only dicts (string keys), lists, None, numbers, strings and numeric arrays."""
    if isinstance(tree, dict):
        return all(isinstance(k, str) and plain(v) for k, v in tree.items())
    if isinstance(tree, list):
        return all(plain(v) for v in tree)
    if isinstance(tree, np.ndarray):
        return not tree.dtype.hasobject
    return tree is None or isinstance(tree, bool | int | float | str)


@pytest.mark.parametrize(
    ("make_env", "actions"),
    [
        (lambda: make("CartPole-v1"), [0, 1, 1, 0, 1]),
        (lambda: make("Pendulum-v1"), [np.array([0.5], np.float32)] * 5),
        pytest.param(
            lambda: make("InvertedPendulum-v5"),
            [np.array([0.3], np.float32)] * 5,
            marks=pytest.mark.skipif(
                importlib.util.find_spec("mujoco") is None, reason="MuJoCo is not installed"
            ),
        ),
    ],
    ids=["cartpole", "pendulum", "mujoco"],
)
def test_a_fresh_env_loaded_with_the_state_steps_on_identically(make_env, actions):
    env = make_env()
    env.seed(3)
    env.reset()
    steps(env, actions[:2])
    state = state_of(env)
    assert plain(state)
    expected = steps(env, actions)
    fresh = make_env()  # never seeded nor reset: its generators are made from the state
    load_state(fresh, state)
    for a, b in zip(expected, steps(fresh, actions), strict=True):
        assert np.array_equal(a, b)


def test_atari_keeps_the_emulator_state_as_bytes():
    pytest.importorskip("ale_py")
    from rl_samplers import AtariEnv

    env = AtariEnv("pong", seed=1, repeat_action_probability=0.25)
    env.reset()
    steps(env, [1, 2, 3] * 10)
    state = state_of(env)
    assert plain(state)
    expected = steps(env, [2, 3] * 20)
    fresh = AtariEnv("pong", seed=99, repeat_action_probability=0.25)
    load_state(fresh, state)
    for a, b in zip(expected, steps(fresh, [2, 3] * 20), strict=True):
        assert np.array_equal(a, b)


class Opaque:
    __slots__ = ("handle",)


def test_state_that_is_not_data_is_named_and_classes_must_match():
    env = gymnasium.make("CartPole-v1")
    env.unwrapped.handle = Opaque()
    with pytest.raises(UnsavedState, match=r"env\.env\.env\.env\.handle is a .*Opaque"):
        state_of(env)
    state = state_of(gymnasium.make("CartPole-v1"))
    with pytest.raises(ValueError, match=r"saved state is of a .*TimeLimit, this is a .*Pendulum"):
        load_state(gymnasium.make("Pendulum-v1").unwrapped, state)
