"""Asymmetric actor-critic models and agents: the policy reads ``observation.actor`` only,
the value ``observation.critic`` only; layouts for [], [B] and [T, B]; the two LSTMs'
state; separate normalisation statistics, saved and restored."""

from __future__ import annotations

import io

import pytest
import torch
from rl_agents_testkit import Box, Discrete
from torch.testing import assert_close

import rl_agents as ra
from rl_arrays import AgentStep, EnvSpaces, namedarraytuple

# rl-agents must not import rl-samplers: a stand-in for its ActorCriticObservation and for
# the Composite space over it (whose shape has the fields actor and critic).
Parts = namedarraytuple("Parts", ["actor", "critic"])

ACTOR_SHAPE, CRITIC_SHAPE = (2,), (5,)
N_ACTIONS, ACTION_SIZE = 3, 2
B, T = 4, 6


class PartsSpace:
    shape = Parts(actor=ACTOR_SHAPE, critic=CRITIC_SHAPE)


DISCRETE = EnvSpaces(observation=PartsSpace(), action=Discrete(N_ACTIONS))
CONTINUOUS = EnvSpaces(observation=PartsSpace(), action=Box((ACTION_SIZE,)))

FF_KWARGS = dict(hidden_sizes=[16], critic_hidden_sizes=[8, 8])
LSTM_KWARGS = dict(hidden_sizes=[16], lstm_size=8, critic_lstm_size=12)
AGENTS = [
    (ra.AsymmetricCategoricalPgAgent, DISCRETE, FF_KWARGS),
    (ra.AsymmetricGaussianPgAgent, CONTINUOUS, FF_KWARGS),
    (ra.AsymmetricRecurrentCategoricalPgAgent, DISCRETE, LSTM_KWARGS),
    (ra.AsymmetricRecurrentGaussianPgAgent, CONTINUOUS, LSTM_KWARGS),
]
IDS = [cls.__name__ for cls, _, _ in AGENTS]


def make_agent(cls, spaces, kwargs, **model_kwargs):
    agent = cls(model_kwargs={**kwargs, **model_kwargs})
    agent.initialize(spaces)
    return agent


def inputs(spaces, lead, generator=None):
    g = torch.Generator().manual_seed(0) if generator is None else generator
    observation = Parts(
        actor=torch.randn(*lead, *ACTOR_SHAPE, generator=g),
        critic=torch.randn(*lead, *CRITIC_SHAPE, generator=g),
    )
    if isinstance(spaces.action, Discrete):
        prev_action = torch.randint(N_ACTIONS, lead, generator=g)
    else:
        prev_action = torch.randn(*lead, ACTION_SIZE, generator=g)
    return observation, prev_action, torch.randn(lead, generator=g)


def policy_tensors(dist_info):
    return list(dist_info)  # prob, or mean and log_std


def call(agent, observation, prev_action, prev_reward, rnn_state=None):
    """``(dist_info, value)`` of the agent's training forward pass."""
    if agent.recurrent:
        dist_info, value, _ = agent(observation, prev_action, prev_reward, rnn_state)
        return dist_info, value
    return agent(observation, prev_action, prev_reward)


# ------------------------------------------------------------------------- layouts


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), AGENTS, ids=IDS)
@pytest.mark.parametrize("lead", [(), (B,), (T, B)], ids=["none", "B", "TB"])
def test_outputs_keep_the_leading_dims(cls, spaces, kwargs, lead):
    agent = make_agent(cls, spaces, kwargs)
    dist_info, value = call(agent, *inputs(spaces, lead))
    assert value.shape == lead
    if isinstance(spaces.action, Discrete):
        assert isinstance(dist_info, ra.DistInfo) and dist_info.prob.shape == (*lead, N_ACTIONS)
        assert_close(dist_info.prob.sum(-1), torch.ones(lead))
    else:
        assert isinstance(dist_info, ra.DistInfoStd)
        assert dist_info.mean.shape == dist_info.log_std.shape == (*lead, ACTION_SIZE)
    if lead != (T, B):
        agent.sample_mode(0)
        step = agent.step(*inputs(spaces, lead))
        assert isinstance(step, AgentStep) and step.agent_info.value.shape == lead
        action_shape = () if isinstance(spaces.action, Discrete) else (ACTION_SIZE,)
        assert step.action.shape == (*lead, *action_shape)
        assert agent.value(*inputs(spaces, lead)).shape == lead


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), AGENTS, ids=IDS)
def test_model_kwargs_come_from_the_two_part_space(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    size = N_ACTIONS if isinstance(spaces.action, Discrete) else ACTION_SIZE
    assert agent.env_model_kwargs == dict(
        actor_observation_shape=ACTOR_SHAPE,
        critic_observation_shape=CRITIC_SHAPE,
        action_size=size,
        policy="categorical" if isinstance(spaces.action, Discrete) else "gaussian",
    )
    model = agent.model
    assert model.actor.mlp.model[0].in_features == 2 and model.critic.mlp.model[0].in_features == 5
    if agent.recurrent:
        assert model.actor.lstm.hidden_size == 8 and model.critic.lstm.hidden_size == 12
    else:
        assert model.critic.mlp.output_size == 8 and len(model.critic.mlp.model) == 4


# -------------------------------------------------------------------- separation


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), AGENTS, ids=IDS)
def test_the_policy_reads_only_the_actor_part_and_the_value_only_the_critic_part(
    cls, spaces, kwargs
):
    agent = make_agent(cls, spaces, kwargs)
    observation, prev_action, prev_reward = inputs(spaces, (T, B))
    actor = observation.actor.clone().requires_grad_()
    critic = observation.critic.clone().requires_grad_()
    dist_info, value = call(agent, Parts(actor, critic), prev_action, prev_reward)
    g = torch.Generator().manual_seed(2)  # weights: the probabilities' plain sum is constant
    policy = sum((x * torch.rand(x.shape, generator=g)).sum() for x in policy_tensors(dist_info))
    (grad_actor, grad_critic) = torch.autograd.grad(policy, (actor, critic), allow_unused=True)
    assert grad_critic is None or (grad_critic == 0).all()
    assert grad_actor is not None and grad_actor.abs().sum() > 1e-3
    grad_actor, grad_critic = torch.autograd.grad(value.sum(), (actor, critic), allow_unused=True)
    assert grad_actor is None or (grad_actor == 0).all()
    assert grad_critic is not None and grad_critic.abs().sum() > 1e-3

    # Perturbation: a different critic part leaves the policy exactly as it was, and a
    # different actor part the value.
    with torch.no_grad():
        base_dist, base_value = call(agent, observation, prev_action, prev_reward)
        other = Parts(observation.actor, observation.critic + 1.0)
        dist, value = call(agent, other, prev_action, prev_reward)
        for x, y in zip(policy_tensors(dist), policy_tensors(base_dist), strict=True):
            assert torch.equal(x, y)
        assert not torch.allclose(value, base_value)
        other = Parts(observation.actor + 1.0, observation.critic)
        dist, value = call(agent, other, prev_action, prev_reward)
        assert torch.equal(value, base_value)
        assert not torch.allclose(policy_tensors(dist)[0], policy_tensors(base_dist)[0])


def test_the_gaussian_log_std_is_a_state_independent_parameter():
    agent = make_agent(ra.AsymmetricGaussianPgAgent, CONTINUOUS, FF_KWARGS, init_log_std=-0.5)
    dist_info, _ = call(agent, *inputs(CONTINUOUS, (B,)))
    assert_close(dist_info.log_std, torch.full((B, ACTION_SIZE), -0.5))
    assert agent.model.log_std.requires_grad


# ------------------------------------------------------------------ recurrent state


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), AGENTS[2:], ids=IDS[2:])
def test_recurrent_state_holds_both_lstms(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    observation, prev_action, prev_reward = inputs(spaces, (T, B))
    _, _, state = agent(observation, prev_action, prev_reward, None)
    assert isinstance(state, ra.ActorCriticRnnState)
    assert state.actor_h.shape == state.actor_c.shape == (1, B, 8)
    assert state.critic_h.shape == state.critic_c.shape == (1, B, 12)

    # Running the sequence in two halves, carrying the state, gives the same outputs.
    half = T // 2
    first = agent(*(x[:half] for x in (observation, prev_action, prev_reward)), None)
    second = agent(*(x[half:] for x in (observation, prev_action, prev_reward)), first[2])
    whole = agent(observation, prev_action, prev_reward, None)
    assert_close(torch.cat([first[1], second[1]]), whole[1])
    for a, b in zip(second[2], whole[2], strict=True):
        assert_close(a, b)

    # The sampler's view: prev_rnn_state stored batch-first, per env reset to zeros.
    agent.sample_mode(0)
    agent.reset()
    step = agent.step(observation[0], prev_action[0], prev_reward[0])
    stored = step.agent_info.prev_rnn_state
    assert isinstance(stored, ra.ActorCriticRnnState)
    assert stored.actor_h.shape == (B, 1, 8) and stored.critic_c.shape == (B, 1, 12)
    assert all((x == 0).all() for x in stored)
    agent.step(observation[1], prev_action[1], prev_reward[1])
    agent.reset_one(2)
    state = agent.prev_rnn_state
    assert all((x[:, 2] == 0).all() and (x[:, 1] != 0).any() for x in state)
    step = agent.step(observation[2], prev_action[2], prev_reward[2])
    assert all((x[2] == 0).all() for x in step.agent_info.prev_rnn_state)


# ------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), AGENTS, ids=IDS)
def test_each_part_has_its_own_normalisation_statistics(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs, normalize_observation=True)
    g = torch.Generator().manual_seed(1)
    observation = Parts(
        actor=3.0 + 2.0 * torch.randn(T, B, *ACTOR_SHAPE, generator=g),
        critic=-1.0 + 0.5 * torch.randn(T, B, *CRITIC_SHAPE, generator=g),
    )
    _, prev_action, prev_reward = inputs(spaces, (T, B))
    model = agent.model
    before = {k: v.clone() for k, v in agent.state_dict().items() if "obs_rms" in k}
    assert set(before) == {
        f"{part}.obs_rms.{stat}"
        for part in ("actor", "critic")
        for stat in ("mean", "var", "count")
    }
    agent.train_mode(0)
    call(agent, observation, prev_action, prev_reward)  # forward passes change nothing
    agent.sample_mode(0)
    agent.step(observation[0], prev_action[0], prev_reward[0])
    for key, value in before.items():
        assert torch.equal(agent.state_dict()[key], value)

    agent.update_obs_rms(observation)
    assert_close(model.actor.obs_rms.mean, observation.actor.reshape(-1, 2).mean(0))
    assert_close(model.critic.obs_rms.mean, observation.critic.reshape(-1, 5).mean(0))
    assert_close(model.critic.obs_rms.var, observation.critic.reshape(-1, 5).var(0, unbiased=False))
    assert float(model.actor.obs_rms.count) == float(model.critic.obs_rms.count) == T * B

    # Saved and restored with the model, through torch.save / torch.load(weights_only=True).
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    restored = make_agent(cls, spaces, kwargs, normalize_observation=True)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for part in ("actor", "critic"):
        for stat in ("mean", "var", "count"):
            key = f"{part}.obs_rms.{stat}"
            assert torch.equal(restored.state_dict()[key], agent.state_dict()[key])
    with torch.no_grad():
        a = call(agent, observation, prev_action, prev_reward)
        b = call(restored, observation, prev_action, prev_reward)
    assert_close(a[1], b[1])
    assert_close(policy_tensors(a[0])[0], policy_tensors(b[0])[0])


def test_normalisation_can_be_chosen_per_part():
    agent = make_agent(
        ra.AsymmetricCategoricalPgAgent,
        DISCRETE,
        FF_KWARGS,
        normalize_observation=False,
        normalize_critic_observation=True,
    )
    assert hasattr(agent, "update_obs_rms")
    assert not hasattr(agent.model.actor, "obs_rms")
    observation = Parts(torch.randn(B, *ACTOR_SHAPE), 5 + torch.randn(B, *CRITIC_SHAPE))
    agent.update_obs_rms(observation)
    assert_close(agent.model.critic.obs_rms.mean, observation.critic.mean(0))
    assert not any("actor.obs_rms" in key for key in agent.state_dict())

    plain = make_agent(ra.AsymmetricCategoricalPgAgent, DISCRETE, FF_KWARGS)
    assert not hasattr(plain, "update_obs_rms")


# ------------------------------------------------------------------------ errors


def test_a_single_part_observation_space_is_refused():
    agent = ra.AsymmetricCategoricalPgAgent(model_kwargs=FF_KWARGS)
    with pytest.raises(ValueError, match="actor and critic"):
        agent.initialize(EnvSpaces(observation=Box((4,)), action=Discrete(2)))
    agent = ra.AsymmetricGaussianPgAgent()
    with pytest.raises(ValueError, match="continuous action space"):
        agent.initialize(EnvSpaces(observation=PartsSpace(), action=Discrete(2)))


def test_bad_inputs_and_arguments_are_named():
    model = ra.AsymmetricFfModel(ACTOR_SHAPE, CRITIC_SHAPE, N_ACTIONS)
    with pytest.raises(TypeError, match="fields actor and critic"):
        model(torch.zeros(B, 2), None, None)
    with pytest.raises(ValueError, match="same leading dims"):
        model(Parts(torch.zeros(B, 2), torch.zeros(B + 1, 5)), None, None)
    with pytest.raises(ValueError, match="policy must be one of"):
        ra.AsymmetricFfModel(ACTOR_SHAPE, CRITIC_SHAPE, N_ACTIONS, policy="beta")
    with pytest.raises(ValueError, match="action_size"):
        ra.AsymmetricLstmModel(ACTOR_SHAPE, CRITIC_SHAPE, 0)
    with pytest.raises(ValueError, match="critic_lstm_size"):
        ra.AsymmetricLstmModel(ACTOR_SHAPE, CRITIC_SHAPE, 2, critic_lstm_size=0)
    with pytest.raises(ValueError, match="policy"):
        ra.AsymmetricCategoricalPgAgent(model_kwargs=dict(policy="gaussian")).initialize(DISCRETE)
