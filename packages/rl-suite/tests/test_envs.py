"""Environment options of the trainer's ``env_kwargs``."""

import numpy as np
import pytest

from rl_suite._envs import make_env


def test_clip_action_sends_actions_inside_the_box_and_keeps_its_bounds():
    seen = []
    env = make_env("Pendulum-v1", clip_action=True)
    inner = env.env.unwrapped
    step = inner.step
    inner.step = lambda action: (seen.append(np.array(action)), step(action))[1]
    env.reset()
    env.step(np.array([5.0], dtype=np.float32))
    env.step(np.array([-0.5], dtype=np.float32))
    assert [float(a[0]) for a in seen] == [2.0, -0.5]
    assert env.action_space.high[0] == 2.0  # the agent still sees the bounds
    env.close()


def test_clip_action_is_refused_where_it_means_nothing():
    with pytest.raises(ValueError, match="Box action space"):
        make_env("CartPole-v1", clip_action=True)
    with pytest.raises(ValueError, match="not to Atari"):
        make_env("atari:pong", clip_action=True)
