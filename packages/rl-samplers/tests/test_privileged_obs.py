"""Privileged observations for the critic: a ``BatchEnv`` with a ``critic_observation_space``
returns ``extras["critic_observation"]``, and ``BatchedSampler`` records
``ActorCriticObservation(actor, critic)`` batches whose parts are the env's, across episode
resets; envs without one (4-tuple steps) are unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_arrays import AgentStep, namedarraytuple
from rl_samplers import (
    CRITIC_OBSERVATION,
    ActorCriticObservation,
    BatchedSampler,
    BatchEnv,
    Composite,
    FloatBox,
    IntBox,
    TorchCartPole,
    TorchPendulum,
)

# The CUDA cases are marked ``cuda`` (benchmarks/gpu.py runs them) and skipped without a GPU.
GPU = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
POSITIONS = [0, 2]  # CartPole's x and theta

ValueInfo = namedarraytuple("ValueInfo", ["value"])


class PartsAgent:
    """Acts at random (seeded) and reports as its "value" the sum of the critic part of the
    observation it was given, so the test can see what reached the agent."""

    def __init__(self, n_actions=2, seed=0):
        self.n_actions = n_actions
        self.generator = torch.Generator().manual_seed(seed)
        self.resets = []
        self.observations = []

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        self.env_spaces = env_spaces

    def reset(self):
        pass

    def reset_one(self, idx):
        self.resets.append(idx)

    def sample_mode(self, itr):
        pass

    def step(self, observation, prev_action, prev_reward):
        assert isinstance(observation, ActorCriticObservation)
        self.observations.append(observation)
        B = observation.actor.shape[0]
        action = torch.randint(self.n_actions, (B,), generator=self.generator)
        return AgentStep(action=action, agent_info=ValueInfo(observation.critic.sum(-1).cpu()))

    def value(self, observation, prev_action, prev_reward):
        return observation.critic.sum(-1).cpu()


def cartpole_sampler(device="cpu", T=40, B=4, max_episode_steps=15, **env_kwargs):
    envs = []

    def make_env(n):
        env_kwargs.setdefault("observation", "positions")
        env_kwargs.setdefault("critic_observation", "full")
        envs.append(
            TorchCartPole(n, device=device, max_episode_steps=max_episode_steps, **env_kwargs)
        )
        return envs[-1]

    return BatchedSampler(make_env, batch_T=T, batch_B=B), envs


# ------------------------------------------------------------------------ the envs


@pytest.mark.parametrize("device", DEVICES)
def test_cartpole_positions_actor_and_full_state_critic(device):
    env = TorchCartPole(
        5, device=device, seed=3, observation="positions", critic_observation="full"
    )
    assert env.observation_space.shape == (2,) and env.critic_observation_space.shape == (4,)
    np.testing.assert_array_equal(
        env.observation_space.high, env.critic_observation_space.high[POSITIONS]
    )
    spaces = env.spaces
    assert isinstance(spaces.observation, Composite)
    assert spaces.observation.shape.actor == (2,) and spaces.observation.shape.critic == (4,)
    null = spaces.observation.null_value()
    assert isinstance(null, ActorCriticObservation) and null.critic.shape == (4,)

    observation, extras = env.reset()
    critic = extras[CRITIC_OBSERVATION]
    assert critic.device.type == torch.device(device).type and critic.dtype == torch.float32
    assert torch.equal(critic, env.state.float()) and torch.equal(observation, critic[:, POSITIONS])
    dones = 0
    for t in range(60):
        action = torch.full((5,), t % 2, device=device)
        observation, reward, terminated, truncated, extras = env.step(action)
        assert (reward == 1).all()
        critic = extras[CRITIC_OBSERVATION]
        assert torch.equal(critic, env.state.float())  # a reset env's: its new episode's state
        assert torch.equal(observation, critic[:, POSITIONS])
        done = terminated | truncated
        if done.any():
            assert (critic[done].abs() <= 0.05).all()  # a fresh episode's first state
        dones += int(done.sum())
    assert dones > 0


def test_observation_kinds_and_their_checks():
    plain = TorchCartPole(2, seed=0)
    assert plain.critic_observation_space is None
    assert isinstance(plain.reset(), torch.Tensor)
    assert len(plain.step(torch.zeros(2, dtype=torch.long))) == 4
    assert plain.spaces.observation is plain.observation_space

    positions = TorchCartPole(2, seed=0, observation="positions")
    assert positions.reset().shape == (2, 2) and positions.critic_observation_space is None

    both_full = TorchCartPole(2, seed=0, critic_observation="full")
    observation, extras = both_full.reset()
    assert torch.equal(observation, extras[CRITIC_OBSERVATION])

    pendulum = TorchPendulum(3, seed=0, observation="positions", critic_observation="full")
    observation, extras = pendulum.reset()
    assert observation.shape == (3, 2) and extras[CRITIC_OBSERVATION].shape == (3, 3)
    assert torch.equal(observation, extras[CRITIC_OBSERVATION][:, :2])  # cos, sin
    assert len(pendulum.step(torch.zeros(3, 1))) == 5

    with pytest.raises(ValueError, match="observation must be one of"):
        TorchCartPole(2, observation="velocities")
    with pytest.raises(ValueError, match="critic_observation must be None or one of"):
        TorchPendulum(2, critic_observation=["full"])


# --------------------------------------------------------------------- the sampler


@pytest.mark.parametrize("device", DEVICES)
def test_batched_sampler_records_both_parts_across_resets(device):
    T, B = 40, 4
    sampler, envs = cartpole_sampler(device, T=T, B=B)
    agent = PartsAgent()
    examples = sampler.initialize(agent, seed=7, bootstrap_value=True)
    assert isinstance(examples["observation"], ActorCriticObservation)
    assert examples["observation"].actor.shape == (2,)
    assert examples["observation"].critic.shape == (4,)
    assert agent.env_spaces.observation.shape.actor == (2,)
    assert agent.env_spaces.observation.shape.critic == (4,)

    env = next(e for e in envs if e.num_envs == B)
    replay = TorchCartPole(
        B, device=device, max_episode_steps=15, observation="positions", critic_observation="full"
    )
    replay.seed(env._next_seed)  # the seed the sampler gave the run's env
    actor, extras = replay.reset()
    observation = ActorCriticObservation(actor, extras[CRITIC_OBSERVATION])
    for itr in range(2):
        samples, infos = sampler.obtain_samples(itr)
        obs = samples.env.observation
        assert isinstance(obs, ActorCriticObservation)
        assert obs.actor.shape == (T, B, 2) and obs.critic.shape == (T, B, 4)
        assert obs.actor.device.type == obs.critic.device.type == torch.device(device).type
        for t in range(T):  # the same env, stepped by hand with the recorded actions
            assert torch.equal(obs.actor[t], observation.actor)
            assert torch.equal(obs.critic[t], observation.critic)
            o, reward, terminated, truncated, extras = replay.step(samples.agent.action[t])
            observation = ActorCriticObservation(o, extras[CRITIC_OBSERVATION])
            assert torch.equal(samples.env.reward[t], reward)
            assert torch.equal(samples.env.done[t], terminated | truncated)
        assert torch.equal(obs.actor, obs.critic[..., POSITIONS])
        # What the agent saw is what was recorded, both parts.
        seen = agent.observations[-T:]
        assert all(torch.equal(s.critic, obs.critic[t]) for t, s in enumerate(seen))
        assert torch.allclose(samples.agent.agent_info.value, obs.critic.sum(-1))
        # Episode starts: a fresh state in both parts, null previous action and reward.
        done = samples.env.done
        assert done.any()
        starts = done[:-1]
        assert (obs.critic[1:][starts].abs() <= 0.05).all()
        assert (samples.agent.prev_action[1:][starts] == 0).all()
        assert (samples.env.prev_reward[1:][starts] == 0).all()
        assert len(infos) == int(done.sum())
        expected_bootstrap = observation.critic.sum(-1)
        assert torch.allclose(samples.agent.bootstrap_value, expected_bootstrap)
    sampler.shutdown()


def test_decorrelation_steps_keep_both_parts():
    sampler, envs = cartpole_sampler(T=5, B=3, max_episode_steps=500)
    sampler.max_decorrelation_steps = 30
    sampler.initialize(PartsAgent(), seed=1)
    samples, _ = sampler.obtain_samples(0)
    obs = samples.env.observation
    assert torch.equal(obs.actor, obs.critic[..., POSITIONS])
    env = next(e for e in envs if e.num_envs == 3)
    assert env.elapsed.max() > 5  # the decorrelation steps ran


# ------------------------------------------------------ extras contract and errors


class ExtrasEnv(BatchEnv):
    """A tiny env: the observation is the step count in the episode, the critic observation
    ``[count, episode length]``; episodes last 3 steps. ``mode`` breaks the contract."""

    def __init__(self, num_envs, critic=True, mode="ok"):
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.observation_space = FloatBox(0, 10, shape=(1,))
        self.action_space = IntBox(0, 2, dtype="int64")
        if critic:
            self.critic_observation_space = FloatBox(0, 10, shape=(3,) if mode == "shape" else (2,))
        self.mode = mode

    def seed(self, seed):
        pass

    def _extras(self):
        if self.mode == "no key":
            return {"other": torch.zeros(self.num_envs)}
        length = torch.full((self.num_envs,), 3.0)
        return {CRITIC_OBSERVATION: torch.stack([self.t.float(), length], -1), "log": 1}

    def reset(self):
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        if self.mode == "bad reset":
            return self.t[:, None].float(), {}, None
        return self.t[:, None].float(), self._extras()

    def step(self, action):
        self.t = self.t + 1
        terminated = self.t >= 3
        self.t = torch.where(terminated, 0, self.t)
        truncated = torch.zeros_like(terminated)
        return (
            self.t[:, None].float(),
            torch.ones(self.num_envs),
            terminated,
            truncated,
            self._extras(),
        )


def test_a_five_tuple_env_without_critic_space_records_plain_observations():
    sampler = BatchedSampler(lambda n: ExtrasEnv(n, critic=False), batch_T=7, batch_B=2)

    class PlainAgent(PartsAgent):
        def step(self, observation, prev_action, prev_reward):
            assert isinstance(observation, torch.Tensor)
            return AgentStep(
                torch.zeros(observation.shape[0], dtype=torch.long), ValueInfo(observation[:, 0])
            )

    sampler.initialize(PlainAgent())
    samples, infos = sampler.obtain_samples(0)
    assert samples.env.observation.shape == (7, 2, 1)
    assert samples.env.observation[:, 0, 0].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert len(infos) == 4


def test_extras_env_gives_both_parts():
    sampler = BatchedSampler(lambda n: ExtrasEnv(n), batch_T=7, batch_B=2)
    sampler.initialize(PartsAgent())
    samples, _ = sampler.obtain_samples(0)
    obs = samples.env.observation
    assert obs.critic[:, 0, 0].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert torch.equal(obs.actor[..., 0], obs.critic[..., 0]) and (obs.critic[..., 1] == 3).all()


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("no key", "must return extras .* with the key 'critic_observation'"),
        ("bad reset", r"reset\(\) returned a tuple of 3"),
        (
            "shape",
            r"critic observation has shape \(2,\) .* critic_observation_space.shape is \(3,\)",
        ),
    ],
)
def test_broken_extras_contracts_are_named(mode, error):
    sampler = BatchedSampler(lambda n: ExtrasEnv(n, mode=mode), batch_T=3, batch_B=2)
    with pytest.raises(ValueError, match=error):
        sampler.initialize(PartsAgent())
