"""Agent settings as parameters: ``PgAgent``'s policy / recurrent / alternating options and
``env_to_model_kwargs`` give the agents rlpyt names; rlpyt's mixins and ``...Base`` names
still work; no agent sits more than four classes under ``BaseAgent``."""

import inspect

import pytest
import torch
from rl_agents_testkit import (
    ATARI_LSTM_KWARGS,
    ATARI_SPACES,
    MUJOCO_FF_KWARGS,
    MUJOCO_LSTM_KWARGS,
    MUJOCO_SPACES,
    N_ACTIONS,
    VECTOR_DISCRETE_SPACES,
    VECTOR_LSTM_KWARGS,
    agent_inputs,
)
from torch.testing import assert_close

import rl_agents as ra

B, T = 4, 3


def _leaves(x):
    return [leaf for item in x for leaf in _leaves(item)] if isinstance(x, tuple) else [x]


def _build(make, spaces, seed=0):
    torch.manual_seed(seed)
    agent = make()
    agent.initialize(spaces)
    return agent


def _assert_act_alike(first, second, spaces):
    """Same steps (actions and infos, seeded alike), values and training outputs."""
    assert first.recurrent == second.recurrent and first.alternating == second.alternating
    for agent in (first, second):
        agent.sample_mode(0)
    inputs = agent_inputs(spaces, (T, B), seed=2)
    for t in range(T):
        x = [i[t] for i in inputs]
        torch.manual_seed(t)
        one = first.step(*x)
        torch.manual_seed(t)
        for a, b in zip(_leaves(one), _leaves(second.step(*x)), strict=True):
            assert_close(a, b)
    last = [i[-1] for i in inputs]
    assert_close(first.value(*last), second.value(*last))
    extra = (None,) if first.recurrent else ()
    for a, b in zip(_leaves(first(*inputs, *extra)), _leaves(second(*inputs, *extra)), strict=True):
        assert_close(a, b)


def _mujoco_kwargs(env_spaces):
    return dict(
        observation_shape=env_spaces.observation.shape, action_size=env_spaces.action.shape[0]
    )


def _vector_kwargs(env_spaces):
    return dict(observation_shape=env_spaces.observation.shape, output_size=env_spaces.action.n)


# --------------------------------------------------------------- parameters


def test_pg_agent_with_parameters_is_the_named_agent():
    gaussian = _build(
        lambda: ra.PgAgent(
            ra.MujocoLstmModel,
            MUJOCO_LSTM_KWARGS,
            policy="gaussian",
            recurrent=True,
            env_to_model_kwargs=_mujoco_kwargs,
        ),
        MUJOCO_SPACES,
    )
    named = _build(lambda: ra.MujocoLstmAgent(model_kwargs=MUJOCO_LSTM_KWARGS), MUJOCO_SPACES)
    assert gaussian.env_model_kwargs == named.env_model_kwargs
    _assert_act_alike(gaussian, named, MUJOCO_SPACES)

    categorical = _build(
        lambda: ra.CategoricalPgAgent(
            ra.CategoricalLstmModel,
            VECTOR_LSTM_KWARGS,
            recurrent=True,
            env_to_model_kwargs=_vector_kwargs,
            onehot_prev_action=False,
        ),
        VECTOR_DISCRETE_SPACES,
    )
    named = _build(
        lambda: ra.CategoricalLstmAgent(model_kwargs=VECTOR_LSTM_KWARGS), VECTOR_DISCRETE_SPACES
    )
    _assert_act_alike(categorical, named, VECTOR_DISCRETE_SPACES)


@pytest.mark.parametrize(
    ("alternating_cls", "cls", "spaces", "kwargs"),
    [
        (ra.AlternatingAtariLstmAgent, ra.AtariLstmAgent, ATARI_SPACES, ATARI_LSTM_KWARGS),
        (ra.AlternatingMujocoLstmAgent, ra.MujocoLstmAgent, MUJOCO_SPACES, MUJOCO_LSTM_KWARGS),
    ],
)
def test_alternating_is_a_parameter(alternating_cls, cls, spaces, kwargs):
    named = _build(lambda: alternating_cls(model_kwargs=kwargs), spaces)
    with_parameter = _build(lambda: cls(model_kwargs=kwargs, alternating=True), spaces)
    assert with_parameter.rnn_states.alternating
    _assert_act_alike(named, with_parameter, spaces)
    assert with_parameter.rnn_states.turn == named.rnn_states.turn == T % 2


def test_the_previous_action_goes_one_hot_or_as_integers():
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self, output_size):
            super().__init__()
            self.pi = torch.nn.Linear(1, output_size)

        def forward(self, observation, prev_action, prev_reward):
            seen.append(prev_action)
            ones = torch.ones(*prev_reward.shape, 1)
            return torch.softmax(self.pi(ones), -1), prev_reward * 0

    for onehot in (True, False):
        agent = ra.CategoricalPgAgent(
            Spy,
            env_to_model_kwargs=lambda s: dict(output_size=s.action.n),
            onehot_prev_action=onehot,
        )
        agent.initialize(VECTOR_DISCRETE_SPACES)
        agent.step(*agent_inputs(VECTOR_DISCRETE_SPACES, (B,)))
    assert seen[0].shape == (B, N_ACTIONS) and seen[0].is_floating_point()
    assert seen[1].shape == (B,) and seen[1].dtype == torch.long


def test_dqn_agent_with_parameters_is_the_named_agent():
    kwargs = dict(hidden_sizes=[16])
    dqn = _build(
        lambda: ra.DqnAgent(
            ra.DqnMlpModel,
            kwargs,
            env_to_model_kwargs=_vector_kwargs,
            onehot_prev_action=False,
            eps_eval=0.0,
        ),
        VECTOR_DISCRETE_SPACES,
    )
    named = _build(
        lambda: ra.VectorDqnAgent(model_kwargs=kwargs, eps_eval=0.0), VECTOR_DISCRETE_SPACES
    )
    inputs = agent_inputs(VECTOR_DISCRETE_SPACES, (B,))
    assert_close(dqn(*inputs), named(*inputs))
    for agent in (dqn, named):
        agent.eval_mode(0)
    assert torch.equal(dqn.step(*inputs).action, named.step(*inputs).action)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="policy must be one of"):
        ra.PgAgent(ra.MujocoFfModel, policy="beta")
    with pytest.raises(ValueError, match="alternating=True needs recurrent=True"):
        ra.GaussianPgAgent(ra.MujocoFfModel, alternating=True)
    with pytest.raises(TypeError, match="policy"):
        ra.MujocoFfAgent(policy="categorical")  # the named agents fix their policy


# ------------------------------------------------------------ rlpyt's names


def test_rlpyt_mixins_still_make_agents_of_ones_own():
    class MyMujocoAgent(ra.MujocoMixin, ra.GaussianPgAgent):
        pass

    class MyAlternatingAgent(
        ra.AlternatingRecurrentAgentMixin, ra.MujocoMixin, ra.RecurrentGaussianPgAgentBase
    ):
        pass

    class MyVectorAgent(ra.VectorCategoricalMixin, ra.RecurrentCategoricalPgAgent):
        pass

    mine = _build(lambda: MyMujocoAgent(ra.MujocoFfModel, MUJOCO_FF_KWARGS), MUJOCO_SPACES)
    named = _build(lambda: ra.MujocoFfAgent(model_kwargs=MUJOCO_FF_KWARGS), MUJOCO_SPACES)
    _assert_act_alike(mine, named, MUJOCO_SPACES)

    mine = _build(lambda: MyAlternatingAgent(ra.MujocoLstmModel, MUJOCO_LSTM_KWARGS), MUJOCO_SPACES)
    named = _build(
        lambda: ra.AlternatingMujocoLstmAgent(model_kwargs=MUJOCO_LSTM_KWARGS), MUJOCO_SPACES
    )
    assert MyAlternatingAgent.alternating and mine.rnn_states.alternating
    _assert_act_alike(mine, named, MUJOCO_SPACES)

    mine = _build(
        lambda: MyVectorAgent(ra.CategoricalLstmModel, VECTOR_LSTM_KWARGS), VECTOR_DISCRETE_SPACES
    )
    named = _build(
        lambda: ra.CategoricalLstmAgent(model_kwargs=VECTOR_LSTM_KWARGS), VECTOR_DISCRETE_SPACES
    )
    assert not mine.onehot_prev_action
    _assert_act_alike(mine, named, VECTOR_DISCRETE_SPACES)


def test_recurrent_agent_mixin_keeps_the_state_of_an_agent_of_ones_own():
    class Counter(ra.BaseAgent):
        """Its state counts the steps of each environment."""

        def __call__(self, *args):
            raise NotImplementedError

        def step(self, observation, prev_action, prev_reward):
            state = self.prev_rnn_state
            count = torch.zeros(1, len(observation), 1) if state is None else state.h
            self.advance_rnn_state(ra.RnnState(count + 1, count + 1))
            return count

    class RecurrentCounter(ra.RecurrentAgentMixin, Counter):
        pass

    agent = RecurrentCounter(torch.nn.Identity)
    agent.initialize(MUJOCO_SPACES)
    assert RecurrentCounter.recurrent and agent.recurrent and not agent.alternating
    agent.sample_mode(0)
    for _ in range(3):
        agent.step(torch.zeros(B, 5), None, None)
    agent.reset_one(1)
    assert agent.prev_rnn_state.h.flatten().tolist() == [3, 0, 3, 3]
    agent.train_mode(0)
    assert agent.prev_rnn_state is None
    agent.sample_mode(1)
    assert agent.step(torch.zeros(B, 5), None, None).flatten().tolist() == [3, 0, 3, 3]
    with pytest.raises(RuntimeError, match="not recurrent"):
        Counter().advance_rnn_state(None)


def test_rlpyt_base_names_are_aliases():
    assert ra.RecurrentCategoricalPgAgentBase is ra.RecurrentCategoricalPgAgent
    assert ra.RecurrentGaussianPgAgentBase is ra.RecurrentGaussianPgAgent
    assert ra.R2d1AgentBase is ra.R2d1Agent
    assert ra.EpsilonGreedyAgentMixin is ra.DqnAgent
    assert isinstance(ra.VectorR2d1Agent(), ra.EpsilonGreedyAgentMixin)
    assert isinstance(ra.AtariLstmAgent(), ra.RecurrentCategoricalPgAgent)
    assert isinstance(ra.MujocoFfAgent(), ra.GaussianPgAgent)


# -------------------------------------------------------------------- shape


def test_no_agent_sits_more_than_four_classes_under_base_agent():
    agents = [
        obj
        for obj in vars(ra).values()
        if inspect.isclass(obj) and issubclass(obj, ra.BaseAgent) and obj is not ra.BaseAgent
    ]
    assert len(agents) > 30
    for cls in agents:
        chain = cls.__mro__[: cls.__mro__.index(ra.BaseAgent) + 1]
        assert len(chain) <= 4, [c.__name__ for c in chain]
        assert all(issubclass(c, ra.BaseAgent) for c in chain)  # no mixin in the chain
