"""Counts as rlpyt's scripts write them (``min_steps_learn=5e3``, ``replay_size=1e6``): an
integral float is stored as an int, and 1.5 or -1 are still refused with the message."""

import pytest
from rl_algos_fakes import LinearAgent

from rl_algos import A2C, DDPG, DQN, PPO, R2D1, SAC


def a2c_n_itr(v):
    algo = A2C()
    algo.initialize(LinearAgent(3, 2), n_itr=v)
    return algo.n_itr


@pytest.mark.parametrize(
    "cls, name",
    [
        (DQN, "batch_size"),
        (DQN, "min_steps_learn"),
        (DQN, "replay_size"),
        (DQN, "target_update_interval"),
        (DQN, "n_step_return"),
        (DQN, "eps_steps"),
        (DQN, "pri_beta_steps"),
        (DQN, "updates_per_sync"),
        (SAC, "replay_size"),
        (DDPG, "policy_update_interval"),
        (R2D1, "batch_T"),
        (R2D1, "batch_B"),
        (R2D1, "warmup_T"),
        (R2D1, "store_rnn_state_interval"),
        (R2D1, "input_priority_shift"),
        (PPO, "minibatches"),
        (PPO, "epochs"),
        (a2c_n_itr, "n_itr"),
    ],
)
def test_counts_accept_integral_floats(cls, name):
    def make(value):
        return cls(value) if cls is a2c_n_itr else getattr(cls(**{name: value}), name)

    count = make(8.0)
    assert count == 8 and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= "):
            make(bad)
