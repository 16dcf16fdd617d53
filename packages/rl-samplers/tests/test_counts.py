"""Counts as rlpyt's scripts write them (``eval_max_steps=10e3``): an integral float is stored as
an int, and 1.5 or -1 are still refused with the message naming the argument."""

import pytest
from sampler_toys import CountingEnv

from rl_samplers import AtariEnv, SerialSampler, TorchCartPole, check_env, make


def sampler(**kwargs):
    return SerialSampler(CountingEnv, {}, **{"batch_T": 2, "batch_B": 2, **kwargs})


def atari(**kwargs):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    return AtariEnv("pong", **kwargs)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda v: sampler(batch_T=v).batch_spec.T, "T must be a positive integer"),
        (lambda v: sampler(batch_B=v).batch_spec.B, "B must be a positive integer"),
        (
            lambda v: sampler(max_decorrelation_steps=v).max_decorrelation_steps,
            "max_decorrelation_steps must be >= 0",
        ),
        (lambda v: sampler(eval_n_envs=v, eval_max_steps=80).eval_n_envs, "eval_n_envs must be"),
        (
            lambda v: sampler(eval_n_envs=1, eval_max_steps=v).eval_max_T,
            "evaluation needs eval_max_steps >= eval_n_envs=1",
        ),
        (
            lambda v: sampler(eval_max_trajectories=v).eval_max_trajectories,
            "eval_max_trajectories must be >= 1",
        ),
        (lambda v: TorchCartPole(v).num_envs, "TorchCartPole: num_envs must be an integer >= 1"),
        (
            lambda v: TorchCartPole(2, max_episode_steps=v).max_episode_steps,
            "max_episode_steps must be an integer >= 1",
        ),
        (lambda v: atari(frame_skip=v)._frame_skip, "frame_skip must be an int >= 1"),
        (lambda v: atari(horizon=v)._horizon, "horizon must be an int >= 1"),
        (lambda v: atari(max_start_noops=v)._max_start_noops, "max_start_noops must be an int"),
        (lambda v: atari(num_img_obs=v).observation_space.shape[0], "num_img_obs must be an int"),
    ],
)
def test_counts_accept_integral_floats(call, match):
    count = call(8.0)
    assert count == 8 and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=match):
            call(bad)


def test_check_env_steps_accept_integral_floats():
    check_env(make("CartPole-v1"), n_steps=20.0)
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match="n_steps must be an integer >= 0"):
            check_env(make("CartPole-v1"), n_steps=bad)
