"""``RslRlVecEnvAdapter``: an env with rsl_rl's ``VecEnv`` members (duck-typed here; the
integration test uses rsl_rl's own base class) stepped by ``BatchedSampler``: time-outs
become ``env_info.timeout``, the critic's group reaches the agent, the probe never steps the
simulator, and bad settings are refused before anything runs."""

from __future__ import annotations

import pytest
import torch

from rl_arrays import AgentStep, namedarraytuple
from rl_samplers import ActorCriticObservation, BatchedSampler, RslRlVecEnvAdapter

ValueInfo = namedarraytuple("ValueInfo", ["value"])


class ToyVecEnv:
    """A point on a line per env, pushed by the action: terminated past ``|x| > 1``, timed
    out after ``max_episode_length`` steps; reset inside ``step``.  Groups ``"policy"`` [x],
    ``"critic"`` [x, t], ``"extra"`` [2x].  ``tuple_form``: rsl-rl-lib 2.x's interface
    (``get_observations() -> (obs, extras)``, groups besides policy in
    ``extras["observations"]``).  Records every step's dones and time-outs."""

    def __init__(self, num_envs=4, max_episode_length=5, tuple_form=False):
        self.num_envs, self.num_actions, self.device = num_envs, 1, torch.device("cpu")
        self.max_episode_length, self.cfg, self.tuple_form = max_episode_length, {}, tuple_form
        self.x = torch.linspace(-0.5, 0.5, num_envs)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.steps, self.dones, self.time_outs, self.critic = 0, [], [], []

    def _groups(self):
        t = self.episode_length_buf.float()
        return {
            "policy": self.x[:, None].clone(),
            "critic": torch.stack([self.x, t], -1),
            "extra": 2 * self.x[:, None],
        }

    def _out(self, extras):
        groups = self._groups()
        if not self.tuple_form:
            return groups, extras
        policy = groups.pop("policy")
        return policy, {**extras, "observations": groups}

    def get_observations(self):
        observation, extras = self._out({})
        return (observation, extras) if self.tuple_form else observation

    def step(self, actions):
        assert actions.shape == (self.num_envs, self.num_actions)
        self.steps += 1
        self.x = self.x + 0.3 * actions[:, 0].clamp(-1, 1)
        self.episode_length_buf += 1
        terminated = self.x.abs() > 1
        time_outs = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        dones = terminated | time_outs
        rewards = 1.0 - self.x.square()
        self.x = torch.where(dones, torch.zeros_like(self.x), self.x)
        self.episode_length_buf = self.episode_length_buf.masked_fill(dones, 0)
        self.dones.append(dones.clone())
        self.time_outs.append(time_outs.clone())
        observation, extras = self._out({"time_outs": time_outs, "log": {"/x": self.x.mean()}})
        self.critic.append(self._groups().get("critic"))
        return observation, rewards, dones.long(), extras


class RecordingAgent:
    """Gaussian actions (seeded); its value is the sum of the critic observation it saw."""

    def __init__(self):
        self.generator = torch.Generator().manual_seed(0)
        self.observations = []

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        self.env_spaces = env_spaces

    def reset(self):
        pass

    def reset_one(self, idx):
        pass

    def sample_mode(self, itr):
        pass

    def step(self, observation, prev_action, prev_reward):
        self.observations.append(observation)
        actor = (
            observation.actor if isinstance(observation, ActorCriticObservation) else observation
        )
        action = 2 * torch.randn(actor.shape[0], 1, generator=self.generator)
        critic = observation.critic if isinstance(observation, ActorCriticObservation) else actor
        return AgentStep(action=action, agent_info=ValueInfo(critic.sum(-1)))

    def value(self, observation, prev_action, prev_reward):
        return torch.zeros(observation[0].shape[0])


def sample(env, T=12, **adapter_kwargs):
    adapter = RslRlVecEnvAdapter(env, **adapter_kwargs)
    sampler = BatchedSampler(adapter.make_env, batch_T=T, batch_B=env.num_envs)
    agent = RecordingAgent()
    sampler.initialize(agent, seed=0)
    try:
        samples, infos = sampler.obtain_samples(0)
        return adapter, sampler, agent, samples, list(infos)
    finally:
        sampler.shutdown()


@pytest.mark.parametrize("tuple_form", [False, True], ids=["tensordict-form", "tuple-form"])
def test_time_outs_and_critic_group(tuple_form):
    env = ToyVecEnv(tuple_form=tuple_form)
    adapter, sampler, _agent, samples, infos = sample(env)
    assert env.steps == 12  # the sampler's probe stepped nothing
    dones, time_outs = torch.stack(env.dones), torch.stack(env.time_outs)
    assert time_outs.any() and (dones & ~time_outs).any()  # both kinds happened
    assert torch.equal(samples.env.done, dones)
    assert torch.equal(samples.env.env_info.timeout, time_outs)
    # The critic's group reaches the agent (and the batch) beside the policy's.
    observation = samples.env.observation
    assert isinstance(observation, ActorCriticObservation)
    assert adapter.critic_groups == ["critic"]
    assert tuple(sampler.env_spaces.observation.shape) == ((1,), (2,))
    assert torch.equal(observation.critic[1:], torch.stack(env.critic[:-1]))
    assert torch.equal(observation.actor[..., 0], observation.critic[..., 0])
    assert torch.equal(samples.agent.agent_info.value, observation.critic.sum(-1))
    # Episode statistics from the env's own rewards and ends.
    assert len(infos) == int(dones.sum())
    assert all(1 <= info.Length <= env.max_episode_length for info in infos)


def test_default_groups_without_critic_group():
    env = ToyVecEnv()
    env_groups = env._groups
    env._groups = lambda: {"policy": env_groups()["policy"]}
    adapter, _sampler, _agent, samples, _ = sample(env)
    assert adapter.critic_groups is None and adapter.critic_observation_space is None
    assert isinstance(samples.env.observation, torch.Tensor)
    assert samples.env.observation.shape == (12, 4, 1)


def test_obs_groups_concatenate_and_choose():
    env = ToyVecEnv()
    _adapter, _, _, samples, _ = sample(
        env, obs_groups={"actor": ["policy", "extra"], "critic": ["policy"]}
    )
    observation = samples.env.observation
    assert observation.actor.shape == (12, 4, 2) and observation.critic.shape == (12, 4, 1)
    assert torch.equal(observation.actor[..., 1], 2 * observation.actor[..., 0])
    # The critic reading what the actor reads is no separate critic observation.
    same = RslRlVecEnvAdapter(ToyVecEnv(), obs_groups={"actor": ["critic"], "critic": ["critic"]})
    assert same.critic_groups is None and same.observation_space.shape == (2,)


def test_refusals():
    with pytest.raises(ValueError, match=r"'critic'\] names \['state'\].*'extra', 'policy'"):
        RslRlVecEnvAdapter(ToyVecEnv(), obs_groups={"critic": ["state"]})
    with pytest.raises(ValueError, match="non-empty list"):
        RslRlVecEnvAdapter(ToyVecEnv(), obs_groups={"actor": "policy"})
    with pytest.raises(ValueError, match="'actor' and 'critic', got \\['teacher'\\]"):
        RslRlVecEnvAdapter(ToyVecEnv(), obs_groups={"teacher": ["policy"]})
    with pytest.raises(ValueError, match=r"\[num_envs, size\]"):
        env = ToyVecEnv()
        env_groups = env._groups
        env._groups = lambda: {**env_groups(), "image": torch.zeros(4, 2, 3)}
        RslRlVecEnvAdapter(env, obs_groups={"actor": ["policy", "image"]})
    with pytest.raises(TypeError, match="has no num_actions"):
        env = ToyVecEnv()
        del env.num_actions
        RslRlVecEnvAdapter(env)
    adapter = RslRlVecEnvAdapter(ToyVecEnv())
    sampler = BatchedSampler(adapter.make_env, batch_T=4, batch_B=8)
    with pytest.raises(ValueError, match="batch_B=4, not 8"):
        sampler.initialize(RecordingAgent(), seed=0)


def test_one_env():
    """With one env, the sampler's first make_env(1) is the adapter, the next the probe."""
    env = ToyVecEnv(num_envs=1)
    _, _, _, samples, _ = sample(env, T=6)
    assert env.steps == 6 and samples.env.done.shape == (6, 1)
