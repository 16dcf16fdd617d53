"""A reference world for replay tests: samples whose contents encode their absolute time
and environment, and the expected value of anything a buffer may return.

Every observation frame is ``[time + 1, env + 1]`` (0 means "zeroed"), so a returned
observation says exactly which step it came from and whether its history was handled.
"""

from __future__ import annotations

import numpy as np

from rl_replay import SamplesToBuffer, SamplesToBufferRnn, SamplesToBufferTl


class World:
    def __init__(self, B, n_frames=0, done_prob=0.2, timeout_prob=0.0, rnn=False, seed=0):
        self.B, self.n_frames, self.rnn = B, n_frames, rnn
        self.done_prob, self.timeout_prob = done_prob, timeout_prob
        self.rng = np.random.default_rng(seed)
        self.action = np.zeros((0, B), np.int64)
        self.reward = np.zeros((0, B), np.float32)
        self.done = np.zeros((0, B), bool)
        self.timeout = np.zeros((0, B), bool)

    @property
    def W(self):
        return len(self.action)

    def example(self):
        observation = np.zeros((self.n_frames, 2) if self.n_frames else (2,), np.int32)
        common = (observation, np.int64(0), np.float32(0), False)
        if self.rnn:
            return SamplesToBufferRnn(*common, np.zeros(2, np.float32))
        if self.timeout_prob:
            return SamplesToBufferTl(*common, False)
        return SamplesToBuffer(*common)

    def chunk(self, T):
        """The next T steps of all B environments, as a buffer receives them."""
        start = self.W
        action = self.rng.integers(0, 5, (T, self.B))
        reward = self.rng.normal(size=(T, self.B)).astype(np.float32)
        done = self.rng.random((T, self.B)) < self.done_prob
        timeout = done & (self.rng.random((T, self.B)) < self.timeout_prob)
        self.action = np.concatenate([self.action, action])
        self.reward = np.concatenate([self.reward, reward])
        self.done = np.concatenate([self.done, done])
        self.timeout = np.concatenate([self.timeout, timeout])
        obs = np.stack([[self.observation(start + i, b) for b in range(self.B)] for i in range(T)])
        common = (obs, action, reward, done)
        if self.rnn:
            rnn = np.stack(
                [[self.rnn_state(start + i, b) for b in range(self.B)] for i in range(T)]
            )
            return SamplesToBufferRnn(*common, rnn)
        if self.timeout_prob:
            return SamplesToBufferTl(*common, timeout)
        return SamplesToBuffer(*common)

    def episode_start(self, a, b):
        dones = np.flatnonzero(self.done[:a, b])
        return dones[-1] + 1 if len(dones) else 0

    def observation(self, a, b):
        if not self.n_frames:
            return np.array([a + 1, b + 1], np.int32)
        start = self.episode_start(a, b)
        frames = np.zeros((self.n_frames, 2), np.int32)
        for k in range(self.n_frames):
            time = a - (self.n_frames - 1 - k)
            if time >= start:
                frames[k] = [time + 1, b + 1]
        return frames

    def rnn_state(self, a, b):
        return np.array([a + 1, b + 1], np.float32)

    def previous(self, field, a, b):
        """The previous action or reward of step a, zero at an episode's first step."""
        return 0 if a == 0 or self.done[a - 1, b] else field[a - 1, b]

    def n_step(self, a, b, n, discount):
        return_, done_n, timeout_n = 0.0, False, False
        for k in range(n):
            return_ += discount**k * self.reward[a + k, b]
            if self.done[a + k, b]:
                done_n, timeout_n = True, bool(self.timeout[a + k, b])
                break
        return np.float32(return_), done_n, timeout_n


def decode(observation):
    """(absolute time, env) of an observation from the world (its newest frame)."""
    newest = observation if observation.ndim == 1 else observation[-1]
    return int(newest[0]) - 1, int(newest[1]) - 1
