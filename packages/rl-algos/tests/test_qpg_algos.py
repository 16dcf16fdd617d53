"""DDPG, TD3 and SAC against hand computations, with tiny agents written here (rl_agents is not
a dependency): targets with terminations and time limits, twin critics, the temperature,
action normalisation, the learning start, delayed updates and exact resumption."""

from __future__ import annotations

import copy
import io
import itertools
import math

import numpy as np
import pytest
import torch

from rl_algos import (
    DDPG,
    SAC,
    TD3,
    DdpgAgentLike,
    DdpgOptInfo,
    SacAgentLike,
    SacOptInfo,
    Td3AgentLike,
)
from rl_arrays import (
    AgentInputs,
    AgentSamples,
    BatchSpec,
    EnvSamples,
    Samples,
    namedarraytuple,
)
from rl_replay import SamplesFromReplayTL, TlUniformReplayBuffer, UniformReplayBuffer

EnvInfo = namedarraytuple("EnvInfo", ["timeout"])
OBS_DIM = 2
SacDistInfo = namedarraytuple("SacDistInfo", ["mean", "log_std"])
LOW, HIGH = [-2.0, 0.0], [2.0, 5.0]  # an asymmetric Box of two action dims


def _linear(n_in, n_out, generator):
    layer = torch.nn.Linear(n_in, n_out)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return layer


class _Base:
    """What the fake agents share: the Box, the critics and their targets, the state."""

    recurrent = False

    def __init__(self, n_critics, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.device = torch.device("cpu")
        self.low, self.high = torch.tensor(LOW), torch.tensor(HIGH)
        self.critics = [_linear(OBS_DIM + 2, 1, g) for _ in range(n_critics)]
        self.target_critics = [_linear(OBS_DIM + 2, 1, g) for _ in range(n_critics)]
        self.min_itr_learn = None
        self.target_updates = []

    def __call__(self, *args):
        raise NotImplementedError

    @staticmethod
    def _q(model, observation, action):
        return model(torch.cat([observation.float(), action], dim=-1)).squeeze(-1)

    def normalize_action(self, action):
        return (2 * action - (self.high + self.low)) / (self.high - self.low)

    def q_parameters(self):
        return itertools.chain(*(c.parameters() for c in self.critics))

    def give_min_itr_learn(self, itr):
        self.min_itr_learn = itr

    def _pairs(self):
        return list(zip(self.target_critics, self.critics, strict=True))

    def update_target(self, tau=1):
        self.target_updates.append(tau)
        with torch.no_grad():
            for target, online in self._pairs():
                for t, o in zip(target.parameters(), online.parameters(), strict=True):
                    t.lerp_(o, tau)

    def _modules(self):
        return {f"m{i}": m for i, m in enumerate(self._all())}

    def state_dict(self):
        return {name: m.state_dict() for name, m in self._modules().items()}

    def load_state_dict(self, state):
        for name, m in self._modules().items():
            m.load_state_dict(state[name])


class FakeDdpgAgent(_Base):
    """DdpgAgentLike (one critic) or Td3AgentLike (``twin``): linear tanh policy, linear
    critics. TD3's target smoothing noise is the agent's business (tested in rl-agents):
    here the target action is the target policy's, plus ``target_noise`` when set."""

    def __init__(self, twin=False, seed=0, target_noise=None):
        super().__init__(2 if twin else 1, seed)
        g = torch.Generator().manual_seed(seed + 100)
        self.twin = twin
        self.mu_model, self.target_mu = _linear(OBS_DIM, 2, g), _linear(OBS_DIM, 2, g)
        self.target_noise = target_noise

    def _all(self):
        return [self.mu_model, self.target_mu, *self.critics, *self.target_critics]

    def _pairs(self):
        return [*super()._pairs(), (self.target_mu, self.mu_model)]

    def __call__(self, observation, prev_action, prev_reward):
        return torch.tanh(self.mu_model(observation.float()))

    def _out(self, values):
        return tuple(values) if self.twin else values[0]

    def q(self, observation, prev_action, prev_reward, action):
        return self._out([self._q(c, observation, action) for c in self.critics])

    def q_at_mu(self, observation, prev_action, prev_reward):
        return self._q(self.critics[0], observation, self(observation, None, None))

    def target_action(self, observation):
        action = torch.tanh(self.target_mu(observation.float()))
        if self.target_noise is not None:
            action = (action + self.target_noise).clamp(-1, 1)
        return action

    @torch.no_grad()
    def target_q_at_mu(self, observation, prev_action, prev_reward):
        action = self.target_action(observation)
        return self._out([self._q(c, observation, action) for c in self.target_critics])

    def mu_parameters(self):
        return self.mu_model.parameters()


class FakeSacAgent(_Base):
    """SacAgentLike: a linear Gaussian policy squashed by tanh, whose "sample" is the
    fixed ``u = mean + 0.5 * std`` (so every number is known), and twin linear critics."""

    NOISE = 0.5

    def __init__(self, seed=0):
        super().__init__(2, seed)
        g = torch.Generator().manual_seed(seed + 100)
        self.pi_model = _linear(OBS_DIM, 4, g)

    def _all(self):
        return [self.pi_model, *self.critics, *self.target_critics]

    def __call__(self, *args):
        return self.pi(*args)

    def pi(self, observation, prev_action, prev_reward):
        mean, log_std = self.pi_model(observation.float()).chunk(2, dim=-1)
        std = log_std.exp()
        u = mean + self.NOISE * std
        normal = torch.distributions.Normal(mean, std)
        log_det = 2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))  # log(1-tanh²u)
        log_pi = (normal.log_prob(u) - log_det).sum(-1)
        return torch.tanh(u), log_pi, SacDistInfo(mean, log_std)

    def q(self, observation, prev_action, prev_reward, action):
        return tuple(self._q(c, observation, action) for c in self.critics)

    @torch.no_grad()
    def target_q(self, observation, prev_action, prev_reward, action):
        return tuple(self._q(c, observation, action) for c in self.target_critics)

    def pi_parameters(self):
        return self.pi_model.parameters()


# ------------------------------------------------------------------------------ helpers


def examples():
    return dict(
        observation=np.zeros(OBS_DIM, np.float32),
        action=np.zeros(2, np.float32),
        reward=np.float32(0),
        done=np.bool_(False),
        env_info=EnvInfo(np.bool_(False)),
        agent_info=None,
    )


def initialized(algo, agent, T=4, B=2):
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(T, B), examples=examples())
    return algo


def random_samples(T, B, seed=0, p_done=0.1):
    """A [T, B] batch of random env-unit actions within the Box, some done, some timed out."""
    g = torch.Generator().manual_seed(seed)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    action = low + (high - low) * torch.rand(T, B, 2, generator=g)
    done = torch.rand(T, B, generator=g) < p_done
    timeout = done & (torch.rand(T, B, generator=g) < 0.5)
    reward = torch.randn(T, B, generator=g)
    return Samples(
        agent=AgentSamples(action=action, prev_action=torch.zeros_like(action), agent_info=None),
        env=EnvSamples(
            torch.randn(T, B, OBS_DIM, generator=g),
            reward,
            torch.zeros_like(reward),
            done,
            EnvInfo(timeout),
        ),
    )


def hand_batch(env_action, return_, done_n, timeout_n, seed=0):
    """A replayed batch of single transitions with random observations."""
    g = torch.Generator().manual_seed(seed)
    n = len(return_)

    def inputs():
        return AgentInputs(torch.randn(n, OBS_DIM, generator=g), torch.zeros(n, 2), torch.zeros(n))

    done_n, timeout_n = torch.tensor(done_n), torch.tensor(timeout_n)
    return SamplesFromReplayTL(
        agent_inputs=inputs(),
        action=torch.tensor(env_action),
        return_=torch.tensor(return_),
        done=done_n,
        done_n=done_n,
        target_inputs=inputs(),
        timeout=timeout_n,
        timeout_n=timeout_n,
    )


# A termination, a time-out (both done) and an ongoing transition; the Box's low, middle and
# high actions (in the model's units: -1, 0 and 1).
ACTIONS = [[-2.0, 0.0], [0.0, 2.5], [2.0, 5.0]]
RETURNS, DONE_N, TIMEOUT_N = [1.0, 2.0, 3.0], [True, True, False], [False, True, False]
MODEL_ACTIONS = torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]])
SMALL = dict(replay_size=1000, replay_ratio=4)  # a small buffer, a few updates per batch


def params(*modules):
    return [p.detach().clone() for m in modules for p in m.parameters()]


# --------------------------------------------------------------------------- the targets


def test_ddpg_target_bootstraps_ongoing_transitions_ignores_time_outs_and_stops_at_terminations():
    agent = FakeDdpgAgent()
    algo = initialized(DDPG(discount=0.9), agent)
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    loss, q = algo.q_loss(batch)

    obs, next_obs = batch.agent_inputs.observation, batch.target_inputs.observation
    with torch.no_grad():
        q_hand = agent._q(agent.critics[0], obs, MODEL_ACTIONS)  # the actions, normalised
        next_q = agent._q(agent.target_critics[0], next_obs, torch.tanh(agent.target_mu(next_obs)))
    y_terminated = 1.0  # no bootstrap
    y_ongoing = 3.0 + 0.9 * next_q[2].item()
    # The time-out (index 1) is left out: its successor is not in the buffer.
    expected = (0.5 * (y_terminated - q_hand[0]) ** 2 + 0.5 * (y_ongoing - q_hand[2]) ** 2) / 2
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert q.tolist() == pytest.approx(q_hand.tolist(), rel=1e-5)


def test_without_bootstrap_timelimit_a_time_out_is_a_termination():
    agent = FakeDdpgAgent()
    algo = initialized(DDPG(discount=0.9, bootstrap_timelimit=False), agent)
    assert type(algo.replay_buffer) is UniformReplayBuffer
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    loss, q = algo.q_loss(batch)
    with torch.no_grad():
        next_obs = batch.target_inputs.observation
        next_q = agent._q(agent.target_critics[0], next_obs, torch.tanh(agent.target_mu(next_obs)))
    y = torch.tensor([1.0, 2.0, 3.0 + 0.9 * next_q[2].item()])
    assert loss.item() == pytest.approx((0.5 * (y - q) ** 2).mean().item(), rel=1e-5)


def test_q_target_clip_bounds_the_target():
    agent = FakeDdpgAgent()
    algo = initialized(DDPG(q_target_clip=0.5), agent)
    y = algo.q_target(hand_batch(ACTIONS, [10.0, -10.0, 0.0], [True, True, True], [False] * 3))
    assert y.tolist() == pytest.approx([0.5, -0.5, 0.0])


def test_td3_regresses_both_critics_on_the_smaller_target():
    agent = FakeDdpgAgent(twin=True, target_noise=torch.tensor([0.3, -0.4]))
    algo = initialized(TD3(discount=0.9), agent)
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    loss, q = algo.q_loss(batch)
    obs, next_obs = batch.agent_inputs.observation, batch.target_inputs.observation
    with torch.no_grad():
        next_action = agent.target_action(next_obs)
        next_q = torch.min(*(agent._q(c, next_obs, next_action) for c in agent.target_critics))
        qs = [agent._q(c, obs, MODEL_ACTIONS) for c in agent.critics]
    y = torch.tensor([1.0, 0.0, 3.0 + 0.9 * next_q[2].item()])
    valid = torch.tensor([1.0, 0.0, 1.0])
    expected = sum(((0.5 * (y - qi) ** 2) * valid).sum() / 2 for qi in qs)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert q.tolist() == pytest.approx(qs[0].tolist(), rel=1e-5)


@pytest.mark.parametrize("fixed_alpha", [0.5, None])
def test_sac_soft_target_by_hand(fixed_alpha):
    agent = FakeSacAgent()
    algo = initialized(SAC(discount=0.9, reward_scale=2.0, fixed_alpha=fixed_alpha), agent)
    alpha = torch.tensor(0.5 if fixed_alpha else 1.0)  # a learned alpha starts at 1
    assert algo.alpha == pytest.approx(alpha.item())
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    q1_loss, q2_loss, q1, q2 = algo.q_loss(batch, alpha)

    obs, next_obs = batch.agent_inputs.observation, batch.target_inputs.observation
    with torch.no_grad():
        next_action, next_log_pi, _ = agent.pi(next_obs, None, None)
        t1, t2 = (agent._q(c, next_obs, next_action) for c in agent.target_critics)
        soft_value = torch.min(t1, t2) - alpha * next_log_pi
        hand_q = [agent._q(c, obs, MODEL_ACTIONS) for c in agent.critics]
    y = torch.tensor([2.0 * 1.0, 0.0, 2.0 * 3.0 + 0.9 * soft_value[2].item()])
    valid = torch.tensor([1.0, 0.0, 1.0])
    for loss, qi, hand in ((q1_loss, q1, hand_q[0]), (q2_loss, q2, hand_q[1])):
        assert qi.tolist() == pytest.approx(hand.tolist(), rel=1e-5)
        expected = ((0.5 * (y - hand) ** 2) * valid).sum() / 2
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_sac_policy_loss_and_action_prior():
    agent = FakeSacAgent()
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    obs = batch.agent_inputs.observation
    action, log_pi, _ = agent.pi(obs, None, None)
    with torch.no_grad():
        q_min = torch.min(*(agent._q(c, obs, action) for c in agent.critics))
    alpha = torch.tensor(0.3)
    normal = torch.distributions.Normal(0.0, 1.0)
    for prior, log_prior in (("uniform", 0.0), ("gaussian", normal.log_prob(action).sum(-1))):
        algo = initialized(SAC(action_prior=prior), agent)
        loss = algo.pi_loss(batch, action, log_pi, alpha)
        expected = (alpha * log_pi - q_min - log_prior).mean()
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # The critics are held fixed: the policy loss reaches the policy only.
    loss.backward()
    assert all(p.grad is None for c in agent.critics for p in c.parameters())
    assert all(p.grad is not None for p in agent.pi_model.parameters())


def test_sac_temperature_follows_the_entropy_target():
    """With plain SGD, log_alpha (from 0) moves by lr * (mean(log_pi) + target_entropy)."""
    agent = FakeSacAgent()
    algo = SAC(OptimCls=torch.optim.SGD, learning_rate=0.1, target_entropy=-0.5)
    initialized(algo, agent)
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    with torch.no_grad():  # the critic step before it does not change the policy
        _, log_pi, _ = agent.pi(*batch.agent_inputs)
    opt_info = SacOptInfo(*([] for _ in SacOptInfo._fields))
    algo._update(batch, opt_info)
    assert algo.log_alpha.item() == pytest.approx(0.1 * (log_pi.mean().item() - 0.5), rel=1e-5)
    assert opt_info.alpha == [1.0]  # the update itself used the alpha from before its step


def _sac_update_step_by_step(algo, agent, batch):
    """One SAC update as separate steps, each with its own backward pass: the critics, the
    policy, then the temperature (the reference for the update's one pi-and-alpha pass)."""
    alpha = algo.log_alpha.detach().exp()
    q1_loss, q2_loss, _, _ = algo.q_loss(batch, alpha)
    algo._step(algo.q_optimizer, q1_loss + q2_loss, algo._q_params)
    action, log_pi, _ = agent.pi(*batch.agent_inputs)
    algo._step(algo.pi_optimizer, algo.pi_loss(batch, action, log_pi, alpha), algo._pi_params)
    alpha_loss = -(algo.log_alpha * (log_pi.detach() + algo._target_entropy)).mean()
    algo.alpha_optimizer.zero_grad()
    alpha_loss.backward()
    algo.alpha_optimizer.step()


def test_sac_policy_and_temperature_from_one_backward_pass_equal_separate_steps():
    batch = hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N)
    results = []
    for one_pass in (True, False):
        agent = FakeSacAgent()
        algo = initialized(SAC(learning_rate=0.1, target_entropy=-0.5), agent)
        for _ in range(3):  # Adam's state too
            if one_pass:
                algo._update(batch, SacOptInfo(*([] for _ in SacOptInfo._fields)))
            else:
                _sac_update_step_by_step(algo, agent, batch)
        results.append([*params(*agent._all()), algo.log_alpha.detach().clone()])
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


@pytest.mark.parametrize(
    ("make_algo", "make_agent"),
    [
        (DDPG, FakeDdpgAgent),
        (TD3, lambda: FakeDdpgAgent(twin=True)),
        (SAC, FakeSacAgent),
    ],
    ids=["DDPG", "TD3", "SAC"],
)
def test_diagnostics_are_read_once_per_call_as_floats(make_algo, make_agent):
    """The updates keep their diagnostics as tensors; optimize_agent returns plain floats,
    the values a per-update read would give."""
    algo = initialized(make_algo(min_steps_learn=0, batch_size=4, replay_ratio=2), make_agent())
    opt_info = algo.optimize_agent(0, random_samples(4, 2))
    assert all(values for values in opt_info)
    assert all(type(v) is float and math.isfinite(v) for values in opt_info for v in values)
    recorded = type(opt_info)(*([] for _ in opt_info))
    algo._update(algo._to_device(algo.replay_buffer.sample_batch(4)), recorded)
    assert all(torch.is_tensor(v) and v.dim() == 0 for values in recorded for v in values)
    assert all(not v.requires_grad for values in recorded for v in values)


def test_sac_auto_target_entropy_is_minus_the_action_dim():
    algo = initialized(SAC(), FakeSacAgent())
    assert algo._target_entropy == -2.0


def test_sac_fixed_alpha_stays():
    algo = initialized(
        SAC(fixed_alpha=0.2, min_steps_learn=0, batch_size=4, **SMALL), FakeSacAgent()
    )
    algo.optimize_agent(0, random_samples(4, 2))
    assert algo.alpha_optimizer is None
    assert algo.alpha == pytest.approx(0.2)


# ----------------------------------------------------------------------------- the loop


@pytest.mark.parametrize(
    ("make_algo", "make_agent", "info_cls"),
    [
        (DDPG, FakeDdpgAgent, DdpgOptInfo),
        (TD3, lambda: FakeDdpgAgent(twin=True), DdpgOptInfo),
        (SAC, FakeSacAgent, SacOptInfo),
    ],
    ids=["DDPG", "TD3", "SAC"],
)
def test_optimize_agent_waits_for_min_steps_learn(make_algo, make_agent, info_cls):
    agent = make_agent()
    T, B = 4, 2
    algo = make_algo(min_steps_learn=24, batch_size=8, replay_ratio=16)
    initialized(algo, agent, T=T, B=B)
    assert algo.min_itr_learn == 3 and agent.min_itr_learn == 3
    assert algo.updates_per_optimize == 16
    before = params(*agent._all())
    for itr in range(3):
        opt_info = algo.optimize_agent(itr, random_samples(T, B, seed=itr))
        assert isinstance(opt_info, info_cls) and all(v == [] for v in opt_info)
    assert all(torch.equal(a, b) for a, b in zip(before, params(*agent._all()), strict=True))
    assert algo.update_counter == 0 and agent.target_updates == []
    opt_info = algo.optimize_agent(3, random_samples(T, B, seed=3))
    first = opt_info.qLoss if info_cls is DdpgOptInfo else opt_info.q1Loss
    assert len(first) == 16 and all(math.isfinite(v) for v in first)
    assert algo.update_counter == 16
    assert not all(torch.equal(a, b) for a, b in zip(before, params(*agent._all()), strict=True))


def test_min_steps_learn_too_small_for_a_first_batch_is_refused():
    with pytest.raises(ValueError, match="min_steps_learn"):
        initialized(DDPG(min_steps_learn=0, batch_size=64), FakeDdpgAgent(), T=1, B=1)


def test_td3_delays_policy_and_target_updates():
    agent = FakeDdpgAgent(twin=True)
    algo = initialized(TD3(min_steps_learn=0, batch_size=4, replay_ratio=2), agent, T=4, B=2)
    assert algo.updates_per_optimize == 4
    opt_info = algo.optimize_agent(0, random_samples(4, 2))
    assert len(opt_info.qLoss) == 4 and len(opt_info.muLoss) == len(opt_info.muGradNorm) == 2
    assert agent.target_updates == [0.005, 0.005]


def test_ddpg_updates_policy_and_targets_every_step():
    agent = FakeDdpgAgent()
    algo = initialized(DDPG(min_steps_learn=0, batch_size=4, replay_ratio=2), agent, T=4, B=2)
    mu_before = params(agent.mu_model)
    opt_info = algo.optimize_agent(0, random_samples(4, 2))
    assert len(opt_info.muLoss) == len(opt_info.qLoss) == 4
    assert agent.target_updates == [0.01] * 4
    assert not all(
        torch.equal(a, b) for a, b in zip(mu_before, params(agent.mu_model), strict=True)
    )


def test_policy_step_leaves_the_critic_alone():
    """The mu loss backpropagates into the policy only (the critic's gradient is its own)."""
    agent = FakeDdpgAgent()
    algo = initialized(DDPG(), agent)
    loss = algo.mu_loss(hand_batch(ACTIONS, RETURNS, DONE_N, TIMEOUT_N))
    loss.backward()
    assert all(p.grad is None for p in agent.critics[0].parameters())
    assert all(p.requires_grad for p in agent.critics[0].parameters())


def test_replay_stores_the_timeout():
    agent = FakeDdpgAgent()
    algo = initialized(DDPG(min_steps_learn=100), agent)
    assert type(algo.replay_buffer) is TlUniformReplayBuffer
    samples = random_samples(4, 2, p_done=0.5)
    algo.optimize_agent(0, samples)
    np.testing.assert_array_equal(
        algo.replay_buffer.samples.timeout[:4], samples.env.env_info.timeout.numpy()
    )
    np.testing.assert_allclose(algo.replay_buffer.samples.action[:4], samples.agent.action)


# --------------------------------------------------------------------------- resumption


def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize(
    ("make_algo", "make_agent"),
    [
        (lambda: DDPG(min_steps_learn=0, batch_size=8, **SMALL), lambda s: FakeDdpgAgent(seed=s)),
        (
            lambda: TD3(min_steps_learn=0, batch_size=8, **SMALL),
            lambda s: FakeDdpgAgent(twin=True, seed=s),
        ),
        (lambda: SAC(min_steps_learn=0, batch_size=8, **SMALL), lambda s: FakeSacAgent(seed=s)),
    ],
    ids=["DDPG", "TD3", "SAC"],
)
def test_state_dicts_resume_exactly(make_algo, make_agent, tmp_path):
    torch.manual_seed(0)
    algo, agent = make_algo(), make_agent(0)
    initialized(algo, agent, T=8)
    for itr in range(3):
        algo.optimize_agent(itr, random_samples(8, 2, seed=itr))
    checkpoint = _roundtrip(
        {"agent": agent.state_dict(), "optim": algo.optim_state_dict()}
    )  # weights_only
    algo.save_replay(tmp_path / "replay.npz")

    torch.manual_seed(1)
    resumed, resumed_agent = make_algo(), make_agent(1)
    initialized(resumed, resumed_agent, T=8)
    resumed_agent.load_state_dict(checkpoint["agent"])
    resumed.load_optim_state_dict(checkpoint["optim"])
    resumed.load_replay(tmp_path / "replay.npz")
    if isinstance(algo, SAC):
        assert sorted(checkpoint["optim"]) == [
            "alpha_optimizer",
            "log_alpha",
            "pi_optimizer",
            "q_optimizer",
            "update_counter",
        ]
        assert resumed.alpha == algo.alpha != 1.0
    else:
        assert sorted(checkpoint["optim"]) == ["mu_optimizer", "q_optimizer", "update_counter"]
    assert resumed.update_counter == algo.update_counter

    samples = random_samples(8, 2, seed=9)
    torch.manual_seed(2)
    expected = algo.optimize_agent(3, samples)
    torch.manual_seed(2)
    got = resumed.optimize_agent(3, samples)
    assert got == expected
    for a, b in zip(params(*agent._all()), params(*resumed_agent._all()), strict=True):
        assert torch.equal(a, b)
    assert resumed.optim_state_dict().keys() == algo.optim_state_dict().keys()


def test_initial_optim_state_dict_is_loaded():
    algo = initialized(SAC(min_steps_learn=0, batch_size=8, **SMALL), FakeSacAgent(), T=8)
    algo.optimize_agent(0, random_samples(8, 2))
    state = copy.deepcopy(algo.optim_state_dict())
    fresh = initialized(SAC(initial_optim_state_dict=state, **SMALL), FakeSacAgent())
    assert fresh.alpha == algo.alpha and fresh.update_counter == algo.update_counter


def test_optim_state_dict_missing_keys_are_named():
    algo = initialized(DDPG(), FakeDdpgAgent())
    with pytest.raises(ValueError, match="q_optimizer"):
        algo.load_optim_state_dict({"mu_optimizer": {}, "update_counter": 0})
    sac = initialized(SAC(), FakeSacAgent())
    state = sac.optim_state_dict()
    del state["log_alpha"]
    with pytest.raises(ValueError, match="log_alpha"):
        sac.load_optim_state_dict(state)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("cls", "kwargs", "name"),
    [
        (DDPG, {"target_update_tau": -0.1}, "target_update_tau"),
        (DDPG, {"target_update_tau": 1.5}, "target_update_tau"),
        (DDPG, {"policy_update_interval": 0}, "policy_update_interval"),
        (DDPG, {"q_target_clip": 0}, "q_target_clip"),
        (DDPG, {"discount": 1.2}, "discount"),
        (TD3, {"batch_size": 0}, "batch_size"),
        (TD3, {"q_learning_rate": -1}, "q_learning_rate"),
        (SAC, {"action_prior": "laplace"}, "action_prior"),
        (SAC, {"fixed_alpha": 0}, "fixed_alpha"),
        (SAC, {"target_entropy": "max"}, "target_entropy"),
        (SAC, {"replay_ratio": 0}, "replay_ratio"),
        (SAC, {"n_step_return": 0}, "n_step_return"),
    ],
)
def test_bad_arguments_are_named(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


def test_an_agent_without_the_protocol_is_refused():
    class NotAnAgent:
        device = torch.device("cpu")

        def __call__(self, *args):
            return None

    for algo, protocol in (
        (DDPG(), "DdpgAgentLike"),
        (TD3(), "Td3AgentLike"),
        (SAC(), "SacAgentLike"),
    ):
        with pytest.raises(TypeError, match=protocol):
            initialized(algo, NotAnAgent())


def test_fake_agents_meet_the_protocols():
    assert isinstance(FakeDdpgAgent(), DdpgAgentLike)
    assert isinstance(FakeDdpgAgent(twin=True), Td3AgentLike)
    assert isinstance(FakeSacAgent(), SacAgentLike)
