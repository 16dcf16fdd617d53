"""A sampler's batches stored in a replay buffer and sampled back: the two packages agree
on every field, including what the agent saw at an episode's first step."""

import numpy as np
import torch

from rl_arrays import AgentStep, numpify_buffer
from rl_replay import SamplesToBuffer, UniformReplayBuffer
from rl_samplers import CpuSampler, GymEnvWrapper, SerialSampler


class RandomAgent:
    """Uniform random actions from its own seeded generator (no torch model needed)."""

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        self.n = env_spaces.action.n
        self.generator = torch.Generator().manual_seed(0)

    def step(self, observation, prev_action, prev_reward):
        shape = observation.shape[:-1]
        return AgentStep(torch.randint(self.n, shape, generator=self.generator), None)

    def value(self, observation, prev_action, prev_reward):
        return torch.zeros(observation.shape[:-1])

    def reset(self):
        pass

    def reset_one(self, idx):
        pass

    def sample_mode(self, itr):
        pass

    def eval_mode(self, itr):
        pass

    def sync_shared_memory(self):
        pass


def cartpole():
    import gymnasium

    return GymEnvWrapper(gymnasium.make("CartPole-v1", max_episode_steps=30))


def test_serial_sampler_batches_replay_as_sampled():
    sampler = SerialSampler(cartpole, {}, batch_T=20, batch_B=3, max_decorrelation_steps=0)
    examples = sampler.initialize(RandomAgent(), seed=0)
    example = SamplesToBuffer(
        examples["observation"], examples["action"], examples["reward"], examples["done"]
    )
    replay = UniformReplayBuffer(example, size=3 * 200, B=3, n_step_return=1, seed=0)
    seen = {}
    for itr in range(5):
        samples, _ = sampler.obtain_samples(itr)
        s = numpify_buffer(samples)
        replay.append_samples(
            SamplesToBuffer(s.env.observation, s.agent.action, s.env.reward, s.env.done)
        )
        for t in range(20):
            for b in range(3):
                key = s.env.observation[t, b].tobytes()
                seen[key] = (
                    s.agent.prev_action[t, b],
                    s.env.prev_reward[t, b],
                    s.agent.action[t, b],
                )
    batch = replay.sample_batch(64)
    for i in range(64):
        prev_action, prev_reward, action = seen[batch.agent_inputs.observation[i].tobytes()]
        assert batch.agent_inputs.prev_action[i] == prev_action
        assert batch.agent_inputs.prev_reward[i] == prev_reward
        assert batch.action[i] == action


def test_cpu_sampler_with_gym_envs_matches_serial():
    config = dict(batch_T=16, batch_B=4, max_decorrelation_steps=10)

    class Deterministic(RandomAgent):  # same actions whichever process computes them
        def step(self, observation, prev_action, prev_reward):
            return AgentStep((observation[..., 0] > 0).long(), None)

    serial = SerialSampler(cartpole, {}, **config)
    serial.initialize(Deterministic(), seed=7)
    with CpuSampler(cartpole, {}, start_method="fork", **config) as parallel:
        parallel.initialize(Deterministic(), seed=7)
        for itr in range(3):
            a, b = serial.obtain_samples(itr)[0], parallel.obtain_samples(itr)[0]
            np.testing.assert_array_equal(a.env.observation, b.env.observation)
            np.testing.assert_array_equal(a.env.env_info.timeout, b.env.env_info.timeout)
