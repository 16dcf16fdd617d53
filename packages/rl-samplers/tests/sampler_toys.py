"""A toy environment and agent for sampler tests; importable by spawned workers.

``CountingEnv``: the observation is ``[time in episode, env seed tag, episodes so far]``;
episodes last a random length drawn from the env's seeded rng, so data depends on seeding
exactly as a real env's would.  ``EchoAgent`` acts deterministically from its inputs and
records what it was told (reset_one calls), so collectors can be checked step by step.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from rl_arrays import AgentStep, namedarraytuple
from rl_samplers import Env, FloatBox, IntBox

CountInfo = namedarraytuple("CountInfo", ["timeout", "traj_done"])
AgentInfo = namedarraytuple("AgentInfo", ["value"])


class CountingEnv(Env):
    def __init__(self, max_len=7, n_actions=3, crash_at=None, horizon=None):
        self.max_len, self.crash_at, self._horizon = max_len, crash_at, horizon
        self._observation_space = FloatBox(-1e6, 1e6, shape=(3,))
        self._action_space = IntBox(0, n_actions)
        self.rng = np.random.default_rng()
        self.tag, self.episodes, self.steps_total = 0.0, 0, 0

    def seed(self, seed):
        super().seed(seed)
        self.rng = np.random.default_rng(seed)
        self.tag = float(seed % 1000)

    def reset(self):
        self.t, self.length = 0, int(self.rng.integers(2, self.max_len + 1))
        self.episodes += 1
        return self._obs()

    def _obs(self):
        return np.array([self.t, self.tag, self.episodes], np.float32)

    def step(self, action):
        self.t += 1
        self.steps_total += 1
        if self.crash_at is not None and self.steps_total >= self.crash_at:
            raise RuntimeError(f"CountingEnv crashed on purpose in process {os.getpid()}")
        done = self.t >= self.length
        timeout = bool(self._horizon and self.t >= self._horizon)
        reward = float(action) + 0.5 * self.t
        return self._env_step(done or timeout, reward, timeout)

    def _env_step(self, done, reward, timeout):
        from rl_arrays import EnvStep

        return EnvStep(self._obs(), reward, done, CountInfo(timeout, done))

    @property
    def horizon(self):
        return self._horizon


class SlowEnv(CountingEnv):
    """A ``CountingEnv`` whose steps take ``delay`` seconds (a worker busy in a batch)."""

    def __init__(self, delay=0.01, **kwargs):
        super().__init__(**kwargs)
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)


def leaves(buffer, out=None):
    out = [] if out is None else out
    if isinstance(buffer, tuple):
        for item in buffer:
            leaves(item, out)
    elif buffer is not None:
        out.append(buffer)
    return out


def assert_same(a, b):
    """Two sample buffers (torch) hold equal values in every field."""
    for x, y in zip(leaves(a), leaves(b), strict=True):
        assert torch.equal(x, y)


class EchoAgent:
    """action = (time in episode + previous action) % n; value = observation's time."""

    def __init__(self):
        self.resets = []

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        self.n = env_spaces.action.n
        self.env_ranks = env_ranks
        self.weight = torch.zeros(1)
        if share_memory:
            self.weight.share_memory_()

    def step(self, observation, prev_action, prev_reward):
        action = (observation[..., 0].long() + prev_action.long() + self.weight.long()) % self.n
        return AgentStep(action, AgentInfo(value=observation[..., 0] + prev_reward * 0))

    def value(self, observation, prev_action, prev_reward):
        return observation[..., 0]

    def reset(self):
        self.resets.append("all")

    def reset_one(self, idx):
        self.resets.append(int(idx))

    def sample_mode(self, itr):
        self.mode = "sample"

    def eval_mode(self, itr):
        self.mode = "eval"

    def sync_shared_memory(self):
        pass

    # The asynchronous samplers' side: a weight of its own, refreshed from the trained one.

    def to_device(self, cuda_idx=None):
        self.cuda_idx = cuda_idx

    def async_cpu(self, share_memory=True):
        self.shared_weight, self.weight = self.weight, self.weight.clone()
        if share_memory:
            self.weight.share_memory_()

    def recv_shared_memory(self):
        self.weight.copy_(self.shared_weight)


class RankAgent(EchoAgent):
    """Records, as each step's value, the rank of the environment it acts for, as far as it
    knows it: from ``collector_initialize`` in a parallel sampler's worker."""

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        super().initialize(env_spaces, share_memory, global_B, env_ranks)
        self.ranks = torch.tensor(env_ranks, dtype=torch.float32)

    def collector_initialize(self, global_B, env_ranks):
        self.global_B, self.ranks = global_B, torch.tensor(env_ranks, dtype=torch.float32)

    def step(self, observation, prev_action, prev_reward):
        action, _ = super().step(observation, prev_action, prev_reward)
        ranks = self.ranks if prev_reward.dim() else self.ranks[0]  # (the unbatched example)
        return AgentStep(action, AgentInfo(value=ranks))


class NoisyAgent(EchoAgent):
    """Acts at random, with torch's global generator (as a stochastic policy samples), in
    training and in evaluation."""

    def step(self, observation, prev_action, prev_reward):
        action = torch.randint(0, self.n, observation.shape[:-1])
        return AgentStep(action, AgentInfo(value=torch.rand(observation.shape[:-1])))


def run_async_sampler(sampler, n_itr, ready, copied, infos, affinity=None):
    """The sampler's process, as the asynchronous runner drives it: fill the two halves of
    the double buffer in turn, each once its last batch was taken (``copied``), and say so
    (``ready``)."""
    sampler.initialize(affinity)
    try:
        for itr in range(n_itr):
            db_idx = itr % 2
            copied[db_idx].acquire()
            infos.put([(info.Length, info.Return) for info in sampler.obtain_samples(itr, db_idx)])
            ready[db_idx].release()
    finally:
        sampler.shutdown()
