"""Q-value policy-gradient models and agents (DDPG, TD3, SAC): leading dims, action scaling
to an asymmetric Box, the squashed Gaussian's log-likelihood, target policy smoothing,
pretraining and evaluation modes, target updates and state dicts."""

import io
import math
import multiprocessing as mp

import numpy as np
import pytest
import torch
from rl_agents_testkit import Discrete
from torch.testing import assert_close

import rl_agents as ra
from rl_arrays import AgentStep, EnvSpaces

OBS_DIM = 3
LOW, HIGH = [-2.0, 0.0], [2.0, 5.0]
SMALL = dict(model_kwargs=dict(hidden_sizes=[16]), q_model_kwargs=dict(hidden_sizes=[16]))
AGENTS = [ra.DdpgAgent, ra.Td3Agent, ra.SacAgent]
B = 4


class Box:
    """A FloatBox-like space with per-dim numpy bounds."""

    def __init__(self, low, high):
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.shape = self.low.shape


SPACES = EnvSpaces(observation=Box([-1.0] * OBS_DIM, [1.0] * OBS_DIM), action=Box(LOW, HIGH))


def make(cls, seed=0, spaces=SPACES, **kwargs):
    torch.manual_seed(seed)
    agent = cls(**SMALL, **kwargs)
    agent.initialize(spaces)
    return agent


def inputs(lead, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*lead, OBS_DIM, generator=g),
        torch.zeros(*lead, 2),
        torch.zeros(lead),
    )


def to_env(model_action):
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    return low + (model_action + 1) / 2 * (high - low)


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("lead", [(), (B,), (3, B)])
def test_models_keep_leading_dims(lead):
    observation, prev_action, prev_reward = inputs(lead)
    mu = ra.MuMlpModel((OBS_DIM,), [8], action_size=2)(observation, prev_action, prev_reward)
    assert mu.shape == (*lead, 2) and bool((mu.abs() <= 1).all())
    q = ra.QofMuMlpModel((OBS_DIM,), [8, 8], action_size=2)(
        observation, prev_action, prev_reward, torch.zeros(*lead, 2)
    )
    assert q.shape == lead
    mean, log_std = ra.PiMlpModel((OBS_DIM,), [8], action_size=2)(
        observation, prev_action, prev_reward
    )
    assert mean.shape == log_std.shape == (*lead, 2)


def test_pi_model_clamps_log_std():
    model = ra.PiMlpModel((OBS_DIM,), [], action_size=1)
    with torch.no_grad():
        model.mlp.model[0].bias.copy_(torch.tensor([0.0, 100.0]))
    _, log_std = model(torch.zeros(OBS_DIM), None, None)
    assert log_std.item() == 2.0
    with torch.no_grad():
        model.mlp.model[0].bias.copy_(torch.tensor([0.0, -100.0]))
    assert model(torch.zeros(OBS_DIM), None, None)[1].item() == -20.0


def test_mu_model_output_max():
    model = ra.MuMlpModel((OBS_DIM,), [8], action_size=2, output_max=3.0)
    with torch.no_grad():
        model.mlp.model[-1].bias.fill_(100.0)
    assert_close(model(torch.zeros(OBS_DIM), None, None), torch.full((2,), 3.0))


def test_bad_action_size_is_named():
    with pytest.raises(ValueError, match="action_size"):
        ra.QofMuMlpModel((OBS_DIM,), [8], action_size=0)


# ---------------------------------------------------------------------------- acting


@pytest.mark.parametrize("cls", AGENTS)
@pytest.mark.parametrize("lead", [(), (B,), (3, B)])
def test_step_gives_env_actions_within_the_box(cls, lead):
    agent = make(cls)
    for mode in (agent.sample_mode, agent.eval_mode):
        mode(0)
        step = agent.step(*inputs(lead))
        assert isinstance(step, AgentStep) and step.action.shape == (*lead, 2)
        assert step.action.device.type == "cpu" and step.action.dtype == torch.float32
        assert bool((step.action >= torch.tensor(LOW)).all())
        assert bool((step.action <= torch.tensor(HIGH)).all())
    info = step.agent_info
    if cls is ra.SacAgent:
        assert isinstance(info, ra.AgentInfoSac)
        assert info.dist_info.mean.shape == info.dist_info.log_std.shape == (*lead, 2)
    else:
        assert isinstance(info, ra.AgentInfoDdpg) and info.mu.shape == (*lead, 2)


@pytest.mark.parametrize("cls", AGENTS)
def test_training_across_processes_is_refused(cls):
    """Their Q networks would not be all-reduced: several processes would drift apart."""
    with pytest.raises(NotImplementedError, match="does not train across processes"):
        make(cls).data_parallel()


@pytest.mark.parametrize("cls", AGENTS)
def test_eval_acts_deterministically_with_the_scaled_policy_action(cls):
    agent = make(cls)
    agent.eval_mode(0)
    observation = inputs((B,))
    first, second = agent.step(*observation), agent.step(*observation)
    assert torch.equal(first.action, second.action)
    with torch.no_grad():
        if cls is ra.SacAgent:
            model_action = torch.tanh(agent.model(*observation)[0])
        else:
            model_action = agent.model(*observation)
    assert_close(first.action, to_env(model_action))
    if cls is not ra.SacAgent:
        assert_close(first.agent_info.mu, first.action)


@pytest.mark.parametrize("cls", AGENTS)
def test_sampling_explores(cls):
    agent = make(cls)
    agent.sample_mode(10)
    observation = inputs((B,))
    assert not torch.equal(agent.step(*observation).action, agent.step(*observation).action)


def test_action_scaling_to_an_asymmetric_box():
    agent = make(ra.DdpgAgent)
    model_action = torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [0.5, -0.5]])
    expected = torch.tensor([[-2.0, 0.0], [0.0, 2.5], [2.0, 5.0], [1.0, 1.25]])
    assert_close(agent._env_action(model_action), expected)
    assert_close(agent.normalize_action(expected), model_action)
    assert_close(agent.normalize_action(expected.numpy()), model_action)


def test_ddpg_noise_is_clipped_and_actions_stay_in_bounds():
    agent = make(ra.DdpgAgent, action_std=10.0, action_noise_clip=0.3)
    agent.sample_mode(0)
    observation = inputs((256,))
    with torch.no_grad():
        mu = agent.model(*observation)
    action = agent.normalize_action(agent.step(*observation).action)
    assert bool(((action - mu).abs() <= 0.3 + 1e-5).all())
    assert bool((action.abs() <= 1).all())


def test_pretraining_std_before_min_itr_learn():
    agent = make(ra.Td3Agent, action_std=0.1, pretrain_std=0.5)
    agent.give_min_itr_learn(3)
    agent.sample_mode(2)
    assert agent.distribution.std.tolist() == [0.5, 0.5]
    agent.sample_mode(3)
    assert agent.distribution.std.tolist() == pytest.approx([0.1, 0.1])
    agent.eval_mode(0)
    assert agent.distribution.std.tolist() == [0.0, 0.0]
    ddpg = make(ra.DdpgAgent, action_std=0.2)  # no pretrain_std: action_std throughout
    ddpg.give_min_itr_learn(3)
    ddpg.sample_mode(0)
    assert ddpg.distribution.std.tolist() == pytest.approx([0.2, 0.2])


def test_sac_pretraining_samples_around_the_mean_with_pretrain_std():
    agent = make(ra.SacAgent, pretrain_std=0.75)
    agent.give_min_itr_learn(5)
    agent.sample_mode(4)
    observation = inputs((B,))
    torch.manual_seed(3)
    action = agent.step(*observation).action
    with torch.no_grad():
        mean, _ = agent.model(*observation)
    torch.manual_seed(3)
    expected = torch.tanh(mean + 0.75 * torch.randn_like(mean))
    assert_close(action, to_env(expected))
    agent.sample_mode(5)  # then from the policy's own std
    torch.manual_seed(3)
    action = agent.step(*observation).action
    with torch.no_grad():
        mean, log_std = agent.model(*observation)
    torch.manual_seed(3)
    assert_close(action, to_env(torch.tanh(mean + log_std.exp() * torch.randn_like(mean))))


@pytest.mark.parametrize("Agent", [ra.DdpgAgent, ra.Td3Agent, ra.SacAgent])
def test_uniform_pretraining_covers_the_action_box_then_the_policy_acts(Agent):
    """``pretrain_std="uniform"``: before learning, actions uniform over the (asymmetric)
    box, whatever the policy; from ``min_itr_learn`` on, the policy's own sampling."""
    agent = make(Agent, pretrain_std="uniform")
    agent.give_min_itr_learn(5)
    agent.sample_mode(4)
    observation = inputs((4096,))
    action = agent.normalize_action(agent.step(*observation).action)  # in [-1, 1] units
    assert bool((action.abs() <= 1).all())
    assert_close(action.mean(0), torch.zeros(2), atol=0.05, rtol=0)
    assert_close(action.var(0), torch.full((2,), 1 / 3), atol=0.02, rtol=0)  # U(-1, 1)
    agent.sample_mode(5)
    torch.manual_seed(3)
    after = agent.normalize_action(agent.step(*observation).action)
    torch.manual_seed(3)
    with torch.no_grad():
        if Agent is ra.SacAgent:
            mean, log_std = agent.model(*observation)
            expected = torch.tanh(mean + log_std.exp() * torch.randn_like(mean))
        else:
            mu = agent.model(*observation)
            expected = (mu + agent.action_std * torch.randn_like(mu)).clamp(-1, 1)
    assert_close(after, expected, atol=1e-5, rtol=1e-5)


def _pretraining_in_child(agent, ready, results):
    ready.wait(30)
    agent.sample_mode(4)
    results.put((agent.min_itr_learn, agent._pretraining))


def test_min_itr_learn_set_after_workers_started_reaches_them():
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("fork is not available here")
    ctx = mp.get_context("fork")
    agent = ra.SacAgent(**SMALL)
    agent.initialize(SPACES, share_memory=True)
    ready, results = ctx.Event(), ctx.Queue()
    process = ctx.Process(target=_pretraining_in_child, args=(agent, ready, results))
    process.start()
    try:
        agent.give_min_itr_learn(7)  # what the algorithm does, after the sampler started
        ready.set()
        assert results.get(timeout=30) == (7, True)
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()


# --------------------------------------------------------------- the squashed Gaussian


def squashed_log_density(a, mean, std):
    """log p(a) for a = tanh(u), u ~ N(mean, std), by the change of variables in plain math."""
    u = math.atanh(a)
    log_normal = -0.5 * ((u - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)
    return log_normal - math.log(1 - a * a)


def test_sac_log_pi_matches_the_change_of_variables():
    agent = make(ra.SacAgent)
    observation = inputs((64,))
    torch.manual_seed(0)
    action, log_pi, dist_info = agent.pi(*observation)
    assert action.shape == (64, 2) and log_pi.shape == (64,)
    assert bool((action.abs() < 1).all())
    mean, std = dist_info.mean.double(), dist_info.log_std.double().exp()
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, std), [torch.distributions.TanhTransform()]
    )
    assert_close(log_pi.double(), reference.log_prob(action.double()).sum(-1), rtol=1e-4, atol=1e-3)
    # A few numbers by hand.
    for i in range(3):
        by_hand = sum(
            squashed_log_density(action[i, d].item(), mean[i, d].item(), std[i, d].item())
            for d in range(2)
        )
        assert log_pi[i].item() == pytest.approx(by_hand, rel=1e-3, abs=1e-3)


def test_squashed_log_likelihood_is_stable_where_tanh_saturates():
    distribution = ra.Gaussian(dim=1, squash=1.0)
    dist_info = ra.DistInfoStd(mean=torch.zeros(3, 1), log_std=torch.zeros(3, 1))
    u = torch.tensor([[15.0], [-30.0], [0.5]])  # tanh(u)**2 == 1 in float32 for the first two
    log_li = distribution.log_likelihood(u, dist_info)
    assert bool(torch.isfinite(log_li).all())
    u64 = u.double()
    exact = (
        -0.5 * u64**2
        - 0.5 * math.log(2 * math.pi)
        - (2 * (math.log(2) - u64 - torch.nn.functional.softplus(-2 * u64)))
    )
    assert_close(log_li.double(), exact.squeeze(-1), rtol=1e-5, atol=1e-4)
    # In float64 the plain formula is still finite at u = 0.5 and 15; they agree.
    plain = -0.5 * u64**2 - 0.5 * math.log(2 * math.pi) - torch.log(1 - torch.tanh(u64) ** 2)
    assert_close(log_li.double()[[0, 2]], plain.squeeze(-1)[[0, 2]], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("mean", "std"), [(0.3, 0.5), (-1.0, 1.2), (0.0, 0.1)])
def test_squashed_density_integrates_to_one(mean, std):
    """Numerical integration of exp(log_likelihood) over the 1-D action a in (-1, 1)."""
    distribution = ra.Gaussian(dim=1, squash=1.0)
    a = torch.linspace(-1, 1, 400_001, dtype=torch.float64)[1:-1]
    u = torch.atanh(a).unsqueeze(-1)
    dist_info = ra.DistInfoStd(
        mean=torch.full_like(u, mean), log_std=torch.full_like(u, math.log(std))
    )
    density = distribution.log_likelihood(u, dist_info).exp()
    assert torch.trapezoid(density, a).item() == pytest.approx(1.0, abs=2e-3)


def test_squashed_samples_follow_the_density():
    """Monte Carlo: the fraction of samples in an interval matches the integrated density."""
    dist_info = ra.DistInfoStd(mean=torch.full((200_000, 1), 0.4), log_std=torch.zeros(200_000, 1))
    distribution = ra.Gaussian(dim=1, squash=1.0)
    torch.manual_seed(0)
    samples = distribution.sample(dist_info).squeeze(-1)
    a = torch.linspace(0.2, 0.8, 10_001, dtype=torch.float64)
    u = torch.atanh(a).unsqueeze(-1)
    info = ra.DistInfoStd(mean=torch.full_like(u, 0.4), log_std=torch.zeros_like(u))
    mass = torch.trapezoid(distribution.log_likelihood(u, info).exp(), a).item()
    fraction = ((samples > 0.2) & (samples < 0.8)).double().mean().item()
    assert fraction == pytest.approx(mass, abs=5e-3)


# ------------------------------------------------------------------------------ TD3


def test_td3_target_smoothing_by_hand():
    agent = make(ra.Td3Agent, target_noise_std=2.0, target_noise_clip=0.5)
    observation = inputs((64,))
    with torch.no_grad():
        agent.target_model.mlp.model[-1].bias.copy_(torch.tensor([3.0, -3.0]))  # near the bounds
        mu = agent.target_model(*observation)
    torch.manual_seed(5)
    q1, q2 = agent.target_q_at_mu(*observation)
    torch.manual_seed(5)
    noise = (2.0 * torch.randn_like(mu)).clamp(-0.5, 0.5)
    action = (mu + noise).clamp(-1.0, 1.0)
    assert bool((noise.abs() == 0.5).any()) and bool((action.abs() == 1.0).any())
    with torch.no_grad():
        assert_close(q1, agent.target_q_model(*observation, action))
        assert_close(q2, agent.target_q2_model(*observation, action))
    assert not q1.requires_grad


def test_td3_q_returns_both_critics_and_q_at_mu_the_first():
    agent = make(ra.Td3Agent)
    observation = inputs((B,))
    action = torch.rand(B, 2) * 2 - 1
    q1, q2 = agent.q(*observation, action)
    assert q1.shape == q2.shape == (B,) and q1.requires_grad and not torch.equal(q1, q2)
    with torch.no_grad():
        mu = agent.model(*observation)
    assert_close(agent.q_at_mu(*observation), agent.q_model(*observation, mu))
    assert len(list(agent.q_parameters())) == 2 * len(list(agent.q_model.parameters()))


def test_ddpg_interface():
    agent = make(ra.DdpgAgent)
    observation = inputs((B,))
    q = agent.q(*observation, torch.zeros(B, 2))
    assert q.shape == (B,) and q.requires_grad
    agent.q_at_mu(*observation).sum().backward()
    assert all(p.grad is not None for p in agent.mu_parameters())
    target = agent.target_q_at_mu(*observation)
    assert target.shape == (B,) and not target.requires_grad
    assert all(not p.requires_grad for p in agent.target_q_model.parameters())


# ------------------------------------------------------------------- targets and state


def flat(module):
    return torch.cat([p.detach().flatten() for p in module.state_dict().values()])


@pytest.mark.parametrize("cls", AGENTS)
def test_soft_and_hard_target_updates(cls):
    agent = make(cls)
    pairs = agent._target_pairs()
    assert len(pairs) == {ra.DdpgAgent: 2, ra.Td3Agent: 3, ra.SacAgent: 2}[cls]
    for _, online in pairs:
        with torch.no_grad():
            for p in online.parameters():
                p.add_(torch.randn_like(p))
    before = [(flat(target), flat(online)) for target, online in pairs]
    agent.update_target(0.3)
    for (target, _), (old, new) in zip(pairs, before, strict=True):
        assert_close(flat(target), 0.3 * new + 0.7 * old)
    agent.update_target(1)
    for target, online in pairs:
        assert torch.equal(flat(target), flat(online))


@pytest.mark.parametrize("cls", AGENTS)
def test_modes_reach_every_network_and_submodule(cls):
    agent = make(cls)
    networks = list(agent._networks().values())
    for switch, training in (
        (agent.sample_mode, False),
        (agent.train_mode, True),
        (agent.train_mode, True),  # twice in a row
        (agent.eval_mode, False),
        (agent.train_mode, True),
    ):
        switch(0)
        assert all(m.training == training for n in networks for m in n.modules())


@pytest.mark.parametrize("cls", AGENTS)
def test_state_dict_round_trip(cls):
    agent = make(cls, seed=0)
    agent.update_target(0.5)  # targets differ from fresh copies
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    expected_keys = {
        ra.DdpgAgent: ["model", "q_model", "target_model", "target_q_model"],
        ra.Td3Agent: [
            "model",
            "q2_model",
            "q_model",
            "target_model",
            "target_q2_model",
            "target_q_model",
        ],
        ra.SacAgent: ["model", "q1_model", "q2_model", "target_q1_model", "target_q2_model"],
    }[cls]
    assert sorted(state) == expected_keys
    other = make(cls, seed=1)
    other.load_state_dict(state)
    for name, network in {"model": agent.model, **agent._networks()}.items():
        assert torch.equal(flat(network), flat({"model": other.model, **other._networks()}[name]))
    with pytest.raises(KeyError, match="target"):
        other.load_state_dict({"model": state["model"]})


def test_initial_state_dicts_are_loaded():
    source = make(ra.Td3Agent, seed=0)
    agent = make(
        ra.Td3Agent,
        seed=1,
        initial_model_state_dict=source.model.state_dict(),
        initial_q_model_state_dict=source.q_model.state_dict(),
        initial_q2_model_state_dict=source.q2_model.state_dict(),
    )
    for name in ("model", "q_model", "q2_model", "target_model", "target_q_model"):
        assert torch.equal(flat(getattr(agent, name)), flat(getattr(source, name)))


# ----------------------------------------------------------------------- bad input


@pytest.mark.parametrize("cls", AGENTS)
@pytest.mark.parametrize(
    "action_space", [Discrete(3), Box([-np.inf], [np.inf]), Box([[0.0, 1.0]], [[1.0, 2.0]])]
)
def test_only_bounded_box_actions_are_accepted(cls, action_space):
    agent = cls(**SMALL)
    spaces = EnvSpaces(observation=SPACES.observation, action=action_space)
    with pytest.raises(ValueError, match=cls.__name__):
        agent.initialize(spaces)


def test_discrete_refusal_names_the_space():
    with pytest.raises(ValueError, match=r"Discrete.*DQN-family"):
        ra.SacAgent(**SMALL).initialize(EnvSpaces(SPACES.observation, Discrete(3)))


@pytest.mark.parametrize(
    ("cls", "kwargs", "name"),
    [
        (ra.DdpgAgent, {"action_std": -0.1}, "action_std"),
        (ra.DdpgAgent, {"action_noise_clip": 0}, "action_noise_clip"),
        (ra.Td3Agent, {"target_noise_std": -1}, "target_noise_std"),
        (ra.Td3Agent, {"target_noise_clip": -0.5}, "target_noise_clip"),
        (ra.SacAgent, {"pretrain_std": -1}, "pretrain_std"),
        (ra.SacAgent, {"pretrain_std": "gaussian"}, "pretrain_std"),
    ],
)
def test_bad_arguments_are_named(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


def test_methods_before_initialize_say_so():
    with pytest.raises(RuntimeError, match="initialize"):
        ra.SacAgent().step(*inputs((B,)))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("cls", AGENTS)
def test_to_device_moves_the_fixed_stds_with_the_networks(cls):
    """TD3's target smoothing noise and DDPG's exploration noise are drawn on the GPU with
    no copy from the host (which a captured update step cannot hold)."""
    agent = make(cls)
    agent.to_device(0)
    agent.sample_mode(0)
    for dist in (agent.distribution, getattr(agent, "target_distribution", None)):
        if dist is not None and dist.std is not None:
            assert dist.std.device == agent.device
    observation, prev_action, prev_reward = (x.cuda() for x in inputs((4,)))
    assert agent.step(observation, prev_action, prev_reward).action.shape == (4, 2)
    if cls is ra.Td3Agent:
        q1, q2 = agent.target_q_at_mu(observation, prev_action, prev_reward)
        assert q1.device == q2.device == agent.device
