"""Time limits, for real: a critic trained on episodes that are all cut by a time limit learns
the values of the endless task only when time-outs are bootstrapped through.

The task, ``EndlessEnv``: an episode starts in a start state (reward -4), then every step is
a regular one (reward 1) until a time limit cuts the episode after ``HORIZON`` steps
(``done`` with ``env_info.timeout``); nothing else ever ends it. A regular state's
observation is noise, drawn afresh at every step, so the critic cannot tell how far the time
limit is; the start state has an observation of its own.

* ``bootstrap_timelimit=True`` (rlpyt's way): the transitions cut by the time limit are left
  out of the critic's loss, every other one bootstraps, so Q learns the endless task's
  values: ``1 / (1 - gamma)`` = 10 at a regular state, ``-4 + gamma * 10`` = 5 at the start,
  whatever the action; with 1-step and 3-step returns.
* ``bootstrap_timelimit=False``: each time-out is taken for a termination, which ends one
  regular step in ``HORIZON - 1``; a critic that cannot see the clock learns the values of a
  task that ends there with that probability: 3.08 at a regular state, -1.23 at the start.

A time limit handled wrongly in any other way also shows: bootstrapping a time-out from the
observation stored after it (the next episode's start, worth 5 instead of 10) would teach
0.82 at a regular state. DDPG is the learner: its critic's target has no entropy term, so
the values are exact; they are checked at a grid of observations x actions, within 1 (10% of
the endless value; runs land within 0.6). About 20 s per run on a 2-core machine.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_agents import DdpgAgent
from rl_algos import DDPG
from rl_arrays import EnvStep, namedarraytuple
from rl_runners import MinibatchRl, logger_context
from rl_samplers import CpuResetCollector, Env, FloatBox, SerialSampler, check_env

HORIZON = 5  # steps per episode: the start step, then 4 regular ones
DISCOUNT = 0.9
START = -1.0  # the start state's observation
START_REWARD = -4.0
STEPS = 4_000
BATCH_SIZE = 256
# (start state, regular states): bootstrapped, a regular state is worth 1 / (1 - gamma) = 10,
# the start state START_REWARD + gamma * 10 = 5.
ENDLESS = (START_REWARD + DISCOUNT / (1 - DISCOUNT), 1 / (1 - DISCOUNT))
# Taken for terminations, the time-outs end one regular step in HORIZON - 1: -1.23, 3.08.
_CUT = 1 / (1 - DISCOUNT * (HORIZON - 2) / (HORIZON - 1))
TERMINATED = (START_REWARD + DISCOUNT * _CUT, _CUT)
TOLERANCE = 1.0

TimeoutInfo = namedarraytuple("TimeoutInfo", ["timeout"])


class EndlessEnv(Env):
    """An episode starts in the start state (observation -1, reward ``START_REWARD``), then
    every step is a regular one (observation uniform in [0, 1], new at every step, reward
    1), until a time limit cuts it after ``horizon`` steps: nothing else ever ends it. One
    action in [-1, 1], ignored."""

    def __init__(self, horizon: int = HORIZON):
        self._horizon = horizon
        self._observation_space = FloatBox(-1.0, 1.0, shape=(1,))
        self._action_space = FloatBox(-1.0, 1.0, shape=(1,))
        self.rng = np.random.default_rng()
        self.t = 0

    def seed(self, seed):
        super().seed(seed)
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.t = 0
        return np.full(1, START, np.float32)

    def step(self, action):
        reward = START_REWARD if self.t == 0 else 1.0
        self.t += 1
        timeout = self.t >= self._horizon
        observation = self.rng.uniform(0.0, 1.0, size=1).astype(np.float32)
        return EnvStep(observation, reward, timeout, TimeoutInfo(timeout))

    @property
    def horizon(self):
        return self._horizon


def learned_values(bootstrap_timelimit, n_step_return, log_dir):
    """Train DDPG on ``EndlessEnv``; the critic's Q-values ``(at the start state, at regular
    states)``, each at a grid of observations x actions."""
    small = {"hidden_sizes": [64, 64]}
    agent = DdpgAgent(model_kwargs=small, q_model_kwargs=small, action_std=0.5)
    algo = DDPG(
        discount=DISCOUNT,
        batch_size=BATCH_SIZE,
        replay_ratio=BATCH_SIZE,  # one update per step
        min_steps_learn=400,
        replay_size=STEPS,
        target_update_tau=0.05,
        learning_rate=1e-3,
        q_learning_rate=3e-4,
        n_step_return=n_step_return,
        bootstrap_timelimit=bootstrap_timelimit,
    )
    sampler = SerialSampler(
        EndlessEnv,
        {},
        batch_T=HORIZON,
        batch_B=4,
        CollectorCls=CpuResetCollector,
        max_decorrelation_steps=0,
    )
    runner = MinibatchRl(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=STEPS,
        seed=0,
        affinity={"master_torch_threads": 1},
        log_interval_steps=STEPS,
    )
    with logger_context(log_dir, 0, "endless", override_prefix=True):
        runner.train()
    actions = torch.linspace(-1.0, 1.0, 5)
    values = []
    for states in (torch.full((1,), START), torch.linspace(0.0, 1.0, 5)):
        observation, action = torch.meshgrid(states, actions, indexing="ij")
        observation, action = observation.reshape(-1, 1), action.reshape(-1, 1)
        with torch.no_grad():
            q = agent.q(observation, torch.zeros_like(action), torch.zeros(len(action)), action)
        values.append(q)
    return values


def test_endless_env_is_only_ever_cut_by_its_time_limit():
    env = EndlessEnv()
    check_env(env)
    env.seed(0)
    assert env.reset()[0] == START
    steps = [env.step(np.zeros(1, np.float32)) for _ in range(HORIZON)]
    assert [s.reward for s in steps] == [START_REWARD] + [1.0] * (HORIZON - 1)
    assert [bool(s.done) for s in steps] == [False] * (HORIZON - 1) + [True]
    assert all(bool(s.env_info.timeout) == bool(s.done) for s in steps)
    assert all(0.0 <= s.observation[0] <= 1.0 for s in steps)


def _assert_values(values, expected):
    for name, q, value in zip(("start", "regular"), values, expected, strict=True):
        assert (q - value).abs().max() < TOLERANCE, (
            f"Q at the {name} state {q.tolist()}, want {value:.2f}"
        )


@pytest.mark.slow
@pytest.mark.parametrize("n_step_return", [1, 3])
def test_bootstrapped_time_limits_learn_the_endless_values(tmp_path, n_step_return):
    _assert_values(learned_values(True, n_step_return, tmp_path), ENDLESS)


@pytest.mark.slow
def test_time_limits_taken_for_terminations_learn_shorter_values(tmp_path):
    _assert_values(learned_values(False, 1, tmp_path), TERMINATED)
