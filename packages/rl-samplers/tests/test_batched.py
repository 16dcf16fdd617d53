"""BatchedSampler: a gymnasium VectorEnv gives the serial sampler's batch; a torch BatchEnv
gives real transitions, kept on its device, with the usual episode-boundary rules."""

from __future__ import annotations

import itertools

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from sampler_toys import AgentInfo, EchoAgent, leaves

from rl_arrays import AgentStep, normalize_device
from rl_samplers import (
    TRAJ_DONE,
    BatchedSampler,
    BatchEnv,
    FloatBox,
    IntBox,
    SerialSampler,
    TrajInfo,
    make,
)

# The CUDA cases are marked ``cuda`` (benchmarks/gpu.py runs them) and skipped without a GPU.
GPU = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]


class TorchCountingEnv(BatchEnv):
    """Batched ``CountingEnv``: observation ``[time in episode, env index, episodes so far]``,
    episode lengths drawn from a seeded torch generator, truncated at ``horizon``."""

    def __init__(self, num_envs, max_len=7, n_actions=3, horizon=None, device="cpu"):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.max_len, self.horizon = max_len, horizon
        self.observation_space = FloatBox(-1e6, 1e6, shape=(3,))
        self.action_space = IntBox(0, n_actions, dtype="int64")
        self.generator = torch.Generator(self.device)
        self.seeds = []

    def seed(self, seed):
        self.seeds.append(seed)
        self.generator.manual_seed(seed)

    def _lengths(self, n):
        return torch.randint(
            2, self.max_len + 1, (n,), generator=self.generator, device=self.device
        )

    def _obs(self):
        index = torch.arange(self.num_envs, device=self.device)
        return torch.stack([self.t, index, self.episodes], -1).float()

    def reset(self):
        B = self.num_envs
        self.t = torch.zeros(B, dtype=torch.long, device=self.device)
        self.length = self._lengths(B)
        self.episodes = torch.ones(B, dtype=torch.long, device=self.device)
        return self._obs()

    def step(self, action):
        # A tensor's device has its index ("cuda:0") where the env may declare "cuda".
        assert action.device == normalize_device(self.device)
        assert action.shape == (self.num_envs,)
        self.t += 1
        reward = action.float() + 0.5 * self.t
        terminated = self.t >= self.length
        truncated = self.t >= self.horizon if self.horizon else torch.zeros_like(terminated)
        done = terminated | truncated
        self.t = torch.where(done, 0, self.t)
        self.length = torch.where(done, self._lengths(self.num_envs), self.length)
        self.episodes += done.long()
        return self._obs(), reward, terminated, truncated


def torch_sampler(device="cpu", T=30, B=3, **env_kwargs):
    envs = []

    def make_env(n):
        envs.append(TorchCountingEnv(n, device=device, **env_kwargs))
        return envs[-1]

    return BatchedSampler(make_env, batch_T=T, batch_B=B), envs


@pytest.mark.parametrize("device", DEVICES)
def test_torch_batch_env_steps_are_real_transitions_on_its_device(device):
    sampler, envs = torch_sampler(device, horizon=5)
    agent = EchoAgent()
    sampler.initialize(agent, seed=4, bootstrap_value=True)
    env = next(e for e in envs if e.num_envs == 3)
    replay = TorchCountingEnv(3, device=device, horizon=5)
    replay.seed(env.seeds[-1])
    observation = replay.reset()
    for itr in range(2):
        agent.resets.clear()
        samples, infos = sampler.obtain_samples(itr)
        assert all(leaf.device == normalize_device(device) for leaf in leaves(samples))
        s = samples
        for t in range(30):  # the same env, stepped by hand with the recorded actions
            assert torch.equal(s.env.observation[t], observation)
            observation, reward, terminated, truncated = replay.step(s.agent.action[t])
            assert torch.equal(s.env.reward[t], reward)
            assert torch.equal(s.env.done[t], terminated | truncated)
            assert torch.equal(s.env.env_info.timeout[t], truncated & ~terminated)
        obs, done = s.env.observation.cpu(), s.env.done.cpu()
        action, prev_action = s.agent.action.cpu(), s.agent.prev_action.cpu()
        reward, prev_reward = s.env.reward.cpu(), s.env.prev_reward.cpu()
        assert torch.equal(action, (obs[..., 0].long() + prev_action) % 3)  # EchoAgent's input
        for t in range(1, 30):
            start = done[t - 1]
            assert (obs[t, start, 0] == 0).all()
            assert (prev_action[t, start] == 0).all() and (prev_reward[t, start] == 0).all()
            assert torch.equal(prev_action[t, ~start], action[t - 1, ~start])
            assert torch.equal(prev_reward[t, ~start], reward[t - 1, ~start])
        assert s.env.env_info.timeout.any() and (s.env.done & ~s.env.env_info.timeout).any()
        for b in range(3):
            assert agent.resets.count(b) == done[:, b].sum()
        assert len(infos) == done.sum()
        assert sum(info.Length for info in infos) <= 90 + 5 * 3 * itr
        expected = torch.where(done[-1], 0, obs[-1, :, 0] + 1)
        assert torch.equal(s.agent.bootstrap_value.cpu(), expected)
    # Episodes wholly inside the last batch: their infos match the recorded rewards.
    for b in range(3):
        ends = torch.nonzero(done[:, b]).flatten().tolist()
        for start, end in itertools.pairwise(ends):
            ret = reward[start + 1 : end + 1, b].sum().item()
            assert any(i.Length == end - start and i.Return == pytest.approx(ret) for i in infos)
    sampler.shutdown()


class LivesEnv(TorchCountingEnv):
    """Each episode is one of two lives: a trajectory ends at every second done (as Atari's
    game over after a life loss); ``Bonus``, a per-step value its trajectory infos sum."""

    traj_info_fields = ("Bonus",)

    def step(self, action):
        observation, reward, terminated, truncated = super().step(action)
        game_over = self.episodes % 2 == 1  # (episodes: those begun, the next one counted)
        extras = {TRAJ_DONE: game_over, "Bonus": 10 * action.float()}
        return observation, reward, terminated, truncated, extras


def test_an_env_can_end_trajectories_after_episodes_and_add_fields():
    T, B = 40, 3
    sampler = BatchedSampler(LivesEnv, batch_T=T, batch_B=B)
    sampler.initialize(EchoAgent(), seed=0)
    samples, infos = sampler.obtain_samples(0)
    sampler.shutdown()
    done, reward, action = samples.env.done, samples.env.reward, samples.agent.action
    expected = []  # (t, b, Length, Return, Bonus), every second episode's end, as recorded
    for b in range(B):
        length, ret, bonus, dones = 0, 0.0, 0.0, 0
        for t in range(T):
            length, ret, bonus = (
                length + 1,
                ret + float(reward[t, b]),
                bonus + 10 * int(action[t, b]),
            )
            dones += int(done[t, b])
            if done[t, b] and dones % 2 == 0:
                expected.append((t, b, length, ret, bonus))
                length, ret, bonus = 0, 0.0, 0.0
    expected.sort()
    assert 0 < len(infos) == len(expected) < done.sum()
    got = [(i.Length, i.Return, i.Bonus) for i in infos]
    assert got == [pytest.approx(e[2:]) for e in expected]


class NoBonusEnv(LivesEnv):
    def step(self, action):
        return super().step(action)[:4]


class BadFieldEnv(LivesEnv):
    traj_info_fields = ("Return",)


def test_bad_trajectory_info_fields_are_refused():
    with pytest.raises(ValueError, match=r"'Bonus' in traj_info_fields.*got no extras"):
        BatchedSampler(NoBonusEnv, batch_T=2, batch_B=2).initialize(EchoAgent(), seed=0)
    with pytest.raises(ValueError, match="'Return' is not a field name"):
        BatchedSampler(BadFieldEnv, batch_T=2, batch_B=2).initialize(EchoAgent(), seed=0)


class GradAgent(EchoAgent):
    """Values that carry autograd history however they are made (a learned parameter
    broadcast into the output, as a Gaussian model's log_std can be)."""

    def step(self, observation, prev_action, prev_reward):
        with torch.enable_grad():
            weight = torch.ones((), requires_grad=True)
            action, info = super().step(observation, prev_action, prev_reward)
            return AgentStep(action, AgentInfo(value=info.value * weight))


class MaskResetAgent(EchoAgent):
    """Takes the done environments as a mask (what recurrent agents do on a device)."""

    def reset_done(self, done):
        self.resets.append(done.clone())


def test_done_environments_are_reset_by_mask_when_the_agent_can():
    sampler, _ = torch_sampler(T=20, B=3)
    agent = MaskResetAgent()
    sampler.initialize(agent, seed=0)
    agent.resets.clear()
    samples, _ = sampler.obtain_samples(0)
    assert len(agent.resets) == 20  # one call per step, the whole mask: no host read
    assert torch.equal(torch.stack(agent.resets), samples.env.done)
    sampler.shutdown()


def test_the_batch_holds_no_autograd_history():
    sampler, _ = torch_sampler(T=4, B=2)
    sampler.initialize(GradAgent(), seed=0, bootstrap_value=True)
    samples, _ = sampler.obtain_samples(0)
    assert not samples.agent.agent_info.value.requires_grad
    sampler.shutdown()


def test_trajectory_infos_are_built_only_where_indexed():
    sampler, _ = torch_sampler(T=30, B=4)
    sampler.initialize(EchoAgent(), seed=3)
    samples, infos = sampler.obtain_samples(0)
    done = samples.env.done.clone()
    everything = list(infos)
    n = int(done.sum())
    assert len(infos) == len(everything) == n > 10
    # (t, b) order: an env's episode that began in the batch spans the steps since its done
    last_done = [None] * 4
    for info, end in zip(everything, torch.nonzero(done.flatten()).flatten().tolist(), strict=True):
        t, b = divmod(end, 4)
        assert last_done[b] is None or info.Length == t - last_done[b]
        last_done[b] = t
    key = lambda info: (info.Length, info.Return, info.DiscountedReturn)  # noqa: E731
    expected = list(map(key, everything))
    for index in (slice(-3, None), slice(1, 7, 2), slice(None, None, -4), slice(-(n + 5), None)):
        assert list(map(key, infos[index])) == expected[index]
    assert key(infos[-1]) == expected[-1] and key(infos[2]) == expected[2]
    assert infos[n:] == []
    with pytest.raises(IndexError):
        infos[n]
    sampler.obtain_samples(1)  # the infos keep their own data: the next batch leaves them
    assert list(map(key, infos)) == expected
    sampler.shutdown()


class DeviceAgent(EchoAgent):
    """Has ``output_device``, where rl-agents' agents put the outputs of ``step``."""

    output_device = None


def test_the_agent_is_told_to_keep_its_outputs_on_the_envs_device():
    sampler, _ = torch_sampler(T=2, B=2)
    agent = DeviceAgent()
    sampler.initialize(agent, seed=0)
    assert agent.output_device == sampler.device == torch.device("cpu")
    sampler.shutdown()


def test_torch_batch_env_seeds_reproduce_and_decorrelation_runs():
    def batch(seed, **kwargs):
        envs = []

        def make_env(n):
            envs.append(TorchCountingEnv(n))
            return envs[-1]

        sampler = BatchedSampler(make_env, batch_T=10, batch_B=4, **kwargs)
        sampler.initialize(EchoAgent(), seed=seed)
        return sampler.obtain_samples(0)[0].env.observation.clone()

    assert torch.equal(batch(1), batch(1)) and not torch.equal(batch(1), batch(2))
    assert torch.equal(batch(1, max_decorrelation_steps=20), batch(1, max_decorrelation_steps=20))


def cartpole_vec(mode):
    def make_env(n):
        return gymnasium.make_vec(
            "CartPole-v1",
            num_envs=n,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": mode},
            max_episode_steps=9,
        )

    return make_env


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_gym_vector_env_batch_equals_serial_batch(mode):
    config = dict(batch_T=25, batch_B=4, max_decorrelation_steps=0)
    serial = SerialSampler(make, {"id": "CartPole-v1", "max_episode_steps": 9}, **config)
    serial.initialize(EchoAgent(), seed=7, bootstrap_value=True)
    batched = BatchedSampler(cartpole_vec(mode), **config)
    batched.initialize(EchoAgent(), seed=7, bootstrap_value=True)
    for itr in range(3):
        (a, infos_a), (b, infos_b) = serial.obtain_samples(itr), batched.obtain_samples(itr)
        for x, y in zip(leaves(a), leaves(b), strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)
        key = lambda info: (info.Length, info.Return, info.DiscountedReturn)  # noqa: E731
        assert sorted(map(key, infos_a)) == sorted(map(key, infos_b))
    assert b.env.env_info.timeout.any() and (b.env.done & ~b.env.env_info.timeout).any()
    serial.shutdown()
    batched.shutdown()


def test_bad_arguments_are_refused():
    sampler = BatchedSampler(cartpole_vec(AutoresetMode.NEXT_STEP), batch_T=2, batch_B=2)
    with pytest.raises(ValueError, match="autoreset_mode"):
        sampler.initialize(EchoAgent())

    class StepInfo(TrajInfo):
        def step(self, *args):
            super().step(*args)

    with pytest.raises(TypeError, match="overrides step"):
        BatchedSampler(cartpole_vec(AutoresetMode.SAME_STEP), 2, 2, TrajInfoCls=StepInfo)
    with pytest.raises(TypeError, match="VectorEnv or a BatchEnv"):
        BatchedSampler(lambda n: object(), 2, 2).initialize(EchoAgent())
    sampler, _ = torch_sampler()
    sampler.initialize(EchoAgent(), seed=0)
    with pytest.raises(NotImplementedError, match="does not evaluate"):
        sampler.evaluate_agent(0)
    assert np.isscalar(sampler.batch_size)
