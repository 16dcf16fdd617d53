"""TorchCartPole and TorchPendulum follow gymnasium's CartPole-v1 and Pendulum-v1 step for
step, reproduce from a seed, and feed a BatchedSampler.

gymnasium integrates in float64.  With ``dtype=torch.float64`` the torch envs follow it
over whole episodes to float64 rounding.  The float32 default is checked one step at a time
from gymnasium's state: over many steps float32 rounding grows (the upright pole and pendulum
are unstable; a float32 Pendulum run ends up to ~0.04 away after 200 steps), so comparing
float32 rollouts would test the rounding, not the physics.
"""

from __future__ import annotations

import itertools
import math

import gymnasium
import numpy as np
import pytest
import torch
from sampler_toys import AgentInfo

from rl_arrays import AgentStep
from rl_samplers import BatchedSampler, FloatBox, IntBox, TorchCartPole, TorchPendulum

# The CUDA cases are marked ``cuda`` (benchmarks/gpu.py runs them) and skipped without a GPU.
GPU = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]


def cartpole_actions(rng, B):
    return rng.integers(0, 2, B)


def pendulum_actions(rng, B):  # a little beyond the bounds, to exercise the clipping
    return rng.uniform(-2.5, 2.5, (B, 1)).astype(np.float32)


CASES = {
    "cartpole": (TorchCartPole, "CartPole-v1", cartpole_actions),
    "pendulum": (TorchPendulum, "Pendulum-v1", pendulum_actions),
}


def in_reset_range(env, rows):
    """The states ``rows`` of ``env`` lie where gymnasium's reset draws them."""
    state = env.state[rows].cpu().double()
    if isinstance(env, TorchCartPole):
        high = torch.full((4,), 0.05, dtype=torch.float64)
    else:
        high = torch.tensor([math.pi, 1.0], dtype=torch.float64)
    return bool((state.abs() <= high).all())


def follow_gymnasium(case, dtype, resync_every_step, B=12, steps=300, max_episode_steps=30):
    """Step ``B`` torch envs and ``B`` gymnasium envs with the same random actions, the torch
    state set from gymnasium's after each reset (and before every step if
    ``resync_every_step``).  Yields each step's ``(torch env, its outputs, gymnasium's
    outputs, gymnasium's states [B, ...] float64, the done envs)``; then checks the torch
    env's own resets and carries on from gymnasium's."""
    Env, gym_id, draw = CASES[case]
    rng = np.random.default_rng(3)
    gyms = [gymnasium.make(gym_id, max_episode_steps=max_episode_steps) for _ in range(B)]
    for b, g in enumerate(gyms):
        g.reset(seed=100 + b)
    env = Env(B, max_episode_steps=max_episode_steps, seed=5, dtype=dtype)
    env.reset()

    def gym_state():
        return torch.tensor(np.stack([g.unwrapped.state for g in gyms]), dtype=torch.float64)

    env.state = gym_state()
    for _ in range(steps):
        if resync_every_step:
            env.state = gym_state()
        action = draw(rng, B)
        out = env.step(torch.as_tensor(action))
        results = [
            g.step(int(a) if case == "cartpole" else a) for g, a in zip(gyms, action, strict=True)
        ]
        gym_out = [np.array([r[i] for r in results]) for i in range(4)]
        done = torch.as_tensor(np.flatnonzero(gym_out[2] | gym_out[3]))
        yield env, out, gym_out, gym_state(), done
        assert in_reset_range(env, done) and (env.elapsed[done] == 0).all()
        for b in done.tolist():
            gyms[b].reset(seed=int(rng.integers(2**31)))
            env.state[b] = torch.as_tensor(gyms[b].unwrapped.state, dtype=dtype)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    ("dtype", "resync", "tol"),
    [
        # float64: the same operations in the same order as gymnasium's; a float32
        # observation may differ by one float32 ulp where float64 sin/cos differ in the last bit.
        (torch.float64, False, 1e-6),
        # float32 from gymnasium's state: rounding the state to float32 (the pendulum's angle
        # winds up to ~80 rad, spacing 8e-6) and one step's float32 arithmetic.
        (torch.float32, True, 1e-5),
    ],
)
def test_steps_equal_gymnasium(case, dtype, resync, tol):
    n_done = n_truncated = 0
    for env, out, gym_out, gym_state, done in follow_gymnasium(case, dtype, resync):
        obs, reward, terminated, truncated = out
        gym_obs, gym_reward, gym_terminated, gym_truncated = gym_out
        assert np.array_equal(terminated.numpy(), gym_terminated)
        assert np.array_equal(truncated.numpy(), gym_truncated)
        torch.testing.assert_close(
            reward, torch.as_tensor(gym_reward, dtype=torch.float32), rtol=tol, atol=tol
        )
        live = torch.ones(env.num_envs, dtype=torch.bool)  # a done env shows its next start
        live[done] = False
        torch.testing.assert_close(obs[live], torch.as_tensor(gym_obs[live]), rtol=tol, atol=tol)
        if dtype == torch.float64:  # the state itself, to float64 rounding
            torch.testing.assert_close(env.state[live], gym_state[live], rtol=1e-12, atol=1e-12)
        n_done, n_truncated = n_done + len(done), n_truncated + int(gym_truncated.sum())
    # The comparison went through many episode ends, both kinds for CartPole.
    assert n_done >= 50 and n_truncated >= 20
    if case == "cartpole":
        assert n_done - n_truncated >= 20


def rollout(env, n_steps=60, action_seed=0):
    rng = np.random.default_rng(action_seed)
    draw = CASES["cartpole" if isinstance(env, TorchCartPole) else "pendulum"][2]
    outs = [(env.reset(),)]
    for _ in range(n_steps):
        outs.append(env.step(torch.as_tensor(draw(rng, env.num_envs))))
    return [x for out in outs for x in out]


@pytest.mark.parametrize("Env", [TorchCartPole, TorchPendulum])
def test_seeds_reproduce_and_differ(Env):
    a, b, c = rollout(Env(8, seed=1)), rollout(Env(8, seed=1)), rollout(Env(8, seed=2))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])
    env = Env(8, seed=2)
    rollout(env)  # seed() takes effect at the next reset, whatever ran before
    env.seed(1)
    assert all(torch.equal(x, y) for x, y in zip(a, rollout(env), strict=True))
    # Without a seed, two envs start differently; envs of one batch start differently.
    assert not torch.equal(Env(8).reset(), Env(8).reset())
    first = Env(8, seed=1).reset()
    assert len(torch.unique(first, dim=0)) == 8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("Env", [TorchCartPole, TorchPendulum])
def test_shapes_dtypes_devices_and_spaces(Env, device):
    B = 5
    env = Env(B, device=device, seed=0)
    dev = torch.device(device)
    obs_dim = 4 if Env is TorchCartPole else 3
    assert env.num_envs == B and env.device.type == dev.type
    assert isinstance(env.observation_space, FloatBox)
    assert env.observation_space.shape == (obs_dim,)
    assert env.observation_space.dtype == np.float32
    if Env is TorchCartPole:
        assert isinstance(env.action_space, IntBox) and env.action_space.n == 2
        assert env.action_space.shape == () and env.action_space.dtype == np.int64
        action = torch.ones(B, dtype=torch.int64, device=device)
    else:
        space = env.action_space
        assert isinstance(space, FloatBox) and space.shape == (1,)
        assert (space.low == -2).all() and (space.high == 2).all()
        action = torch.zeros(B, 1, device=device)
    obs = env.reset()
    assert obs.shape == (B, obs_dim) and obs.dtype == torch.float32 and obs.device.type == dev.type
    assert env.state.dtype == torch.float32 and env.state.device.type == dev.type
    obs, reward, terminated, truncated = env.step(action)
    assert obs.shape == (B, obs_dim) and obs.dtype == torch.float32
    assert reward.shape == (B,) and reward.dtype == torch.float32
    for flag in (terminated, truncated):
        assert flag.shape == (B,) and flag.dtype == torch.bool
    assert all(x.device.type == dev.type for x in (obs, reward, terminated, truncated))
    assert all(x.device == env.device for x in (obs, reward, terminated, truncated))  # "cuda:0"
    assert torch.equal(env.elapsed, torch.ones(B, dtype=torch.int64, device=device))
    assert env.spaces.observation is env.observation_space


def test_pendulum_is_truncated_and_never_terminated_and_clips():
    env = TorchPendulum(3, max_episode_steps=4, seed=0)
    env.reset()
    env.state = torch.tensor([[0.0, 7.9], [2 * math.pi, 0.0], [0.0, 0.0]])
    _, reward, terminated, truncated = env.step(torch.tensor([[2.0], [0.0], [-10.0]]))
    assert env.state[0, 1] == 8.0  # speed clipped
    assert env.state[2, 1] == pytest.approx(-6.0 * 0.05)  # torque clipped to -2: 3 * -2 * dt
    # A full turn costs nothing (the angle is wrapped); the torque is clipped before its cost.
    assert reward[1] == pytest.approx(0.0, abs=1e-6)
    assert reward[2] == pytest.approx(-0.001 * 4)
    flags = []
    for _ in range(7):
        _, _, terminated, truncated = env.step(torch.zeros(3, 1))
        flags.append(truncated.clone())
        assert not terminated.any()
    assert [bool(f.all()) for f in flags] == [False, False, True, False, False, False, True]


def test_cartpole_terminates_at_the_bounds_and_state_can_be_set():
    env = TorchCartPole(4, seed=0, dtype=torch.float64)
    env.reset()
    # Beyond the track, beyond the angle, just inside both, and at rest.
    env.state = torch.tensor(
        [[2.41, 0.0, 0.0, 0.0], [0.0, 0.0, -0.21, 0.0], [2.39, 0.0, 0.2, 0.0], [0.0] * 4]
    )
    _, reward, terminated, truncated = env.step(torch.tensor([1, 0, 0, 1]))
    assert terminated.tolist() == [True, True, False, False] and not truncated.any()
    assert torch.equal(reward, torch.ones(4))
    assert in_reset_range(env, [0, 1]) and env.elapsed.tolist() == [0, 0, 1, 1]
    assert env.state[3, 1] > 0 and env.state[3, 3] < 0  # pushed right, the pole tips back


class RandomAgent:
    """Uniformly random actions from a seeded torch generator on the observations' device."""

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        self.space = env_spaces.action
        self.generator = None

    def step(self, observation, prev_action, prev_reward):
        lead, device = observation.shape[:-1], observation.device
        if self.generator is None:
            self.generator = torch.Generator(device).manual_seed(0)
        if isinstance(self.space, IntBox):
            action = torch.randint(
                self.space.low, self.space.high, lead, generator=self.generator, device=device
            )
        else:
            low = torch.as_tensor(self.space.low, device=device)
            high = torch.as_tensor(self.space.high, device=device)
            u = torch.rand(lead + self.space.shape, generator=self.generator, device=device)
            action = low + (high - low) * u
        return AgentStep(action, AgentInfo(value=torch.zeros(lead, device=device)))

    def reset(self):
        self.generator = None

    def reset_one(self, idx):
        pass

    def sample_mode(self, itr):
        pass


@pytest.mark.parametrize("device", DEVICES)
def test_batched_sampler_over_cartpole(device):
    T, B = 100, 6
    sampler = BatchedSampler(lambda n: TorchCartPole(n, device=device), batch_T=T, batch_B=B)
    sampler.initialize(RandomAgent(), seed=3)
    samples, infos = sampler.obtain_samples(0)
    env = samples.env
    assert env.observation.shape == (T, B, 4) and samples.agent.action.shape == (T, B)
    assert env.observation.device.type == torch.device(device).type
    assert (env.reward == 1).all() and not env.env_info.timeout.any()
    done = env.done.cpu()
    assert len(infos) == done.sum() > B  # random play drops the pole within ~20 steps
    assert all(info.Return == info.Length for info in infos)
    for b in range(B):  # episodes wholly inside the batch have the lengths infos report
        ends = torch.nonzero(done[:, b]).flatten().tolist()
        lengths = {end - start for start, end in itertools.pairwise(ends)}
        assert lengths <= {info.Length for info in infos}
    sampler.shutdown()


@pytest.mark.parametrize("device", DEVICES)
def test_batched_sampler_over_pendulum(device):
    T, B = 250, 4
    sampler = BatchedSampler(lambda n: TorchPendulum(n, device=device), batch_T=T, batch_B=B)
    sampler.initialize(RandomAgent(), seed=3)
    samples, infos = sampler.obtain_samples(0)
    env = samples.env
    assert env.observation.shape == (T, B, 3) and samples.agent.action.shape == (T, B, 1)
    done = env.done.cpu()
    assert torch.equal(done, env.env_info.timeout.cpu())  # only time limits end episodes
    assert done[199].all() and done.sum() == B
    assert len(infos) == B and all(info.Length == 200 for info in infos)
    returns = env.reward[:200].sum(0).double().cpu()
    assert sorted(i.Return for i in infos) == pytest.approx(sorted(returns.tolist()), rel=1e-5)
    assert all(-16.3 * 200 <= i.Return < 0 for i in infos)  # the cost is at most pi^2+6.4+0.004
    sampler.shutdown()


@pytest.mark.parametrize("Env", [TorchCartPole, TorchPendulum])
def test_bad_arguments_are_refused(Env):
    for num_envs in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_envs"):
            Env(num_envs)
    with pytest.raises(ValueError, match="device"):
        Env(2, device="no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device"):
            Env(2, device="cuda")
    with pytest.raises(ValueError, match="max_episode_steps"):
        Env(2, max_episode_steps=0)
    with pytest.raises(ValueError, match="dtype"):
        Env(2, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="reset"):
        Env(2).step(torch.zeros(2))
