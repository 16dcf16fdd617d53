"""DQN-family agents: the algorithm's interface (call / target / step layouts), epsilon
schedules and per-environment epsilons, target updates, state dicts and recurrent state."""

import io
import math
import multiprocessing as mp

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_agents_testkit import (
    ATARI_SPACES,
    LSTM_SIZE,
    MUJOCO_SPACES,
    N_ACTIONS,
    VECTOR_DISCRETE_SPACES,
    Box,
    Discrete,
    agent_inputs,
    make_agent,
)
from torch.testing import assert_close

import rl_agents as ra
from rl_arrays import AgentStep, EnvSpaces

B = 4
N_ATOMS = 5
ATARI_CONV = dict(channels=[4, 8, 8])

DQN_AGENTS = [
    (ra.AtariDqnAgent, ATARI_SPACES, dict(fc_sizes=16, **ATARI_CONV)),
    (ra.VectorDqnAgent, VECTOR_DISCRETE_SPACES, dict(hidden_sizes=[16], dueling=True)),
]
CAT_AGENTS = [
    (ra.AtariCatDqnAgent, ATARI_SPACES, dict(fc_sizes=16, n_atoms=N_ATOMS, **ATARI_CONV)),
    (ra.VectorCatDqnAgent, VECTOR_DISCRETE_SPACES, dict(hidden_sizes=[16], n_atoms=N_ATOMS)),
]
R2D1_AGENTS = [
    (
        ra.AtariR2d1Agent,
        ATARI_SPACES,
        dict(fc_size=16, lstm_size=LSTM_SIZE, head_size=16, **ATARI_CONV),
    ),
    (
        ra.VectorR2d1Agent,
        VECTOR_DISCRETE_SPACES,
        dict(hidden_sizes=[16], lstm_size=LSTM_SIZE, head_size=16, dueling=True),
    ),
]
ALL_AGENTS = DQN_AGENTS + CAT_AGENTS + R2D1_AGENTS


def _ids(cases):
    return [cls.__name__ for cls, _, _ in cases]


def _leaves(x):
    return [leaf for item in x for leaf in _leaves(item)] if isinstance(x, tuple) else [x]


def _is_cat(agent):
    return isinstance(agent, ra.CatDqnAgent)


def _q_shape(agent, lead):
    return (*lead, N_ACTIONS, N_ATOMS) if _is_cat(agent) else (*lead, N_ACTIONS)


def _call(agent, inputs, init=None, target=False):
    """The Q output of ``agent(...)`` or ``agent.target(...)``, with the rnn state when
    recurrent."""
    forward = agent.target if target else agent
    if agent.recurrent:
        return forward(*inputs, init)
    return forward(*inputs), None


def _zero_state(batch):
    return ra.RnnState(torch.zeros(1, batch, LSTM_SIZE), torch.zeros(1, batch, LSTM_SIZE))


# ------------------------------------------------------------------------- layouts


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_step_returns_agent_step_with_q_values(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    step = agent.step(*agent_inputs(spaces, (B,)))
    assert isinstance(step, AgentStep)
    assert step.action.shape == (B,) and step.action.dtype == torch.long
    info = step.agent_info
    if _is_cat(agent):
        assert isinstance(info, ra.AgentInfoCatDqn)
        assert info.p.shape == _q_shape(agent, (B,))
        assert_close(info.p.sum(-1), torch.ones(B, N_ACTIONS))
    elif agent.recurrent:
        assert isinstance(info, ra.AgentInfoR2d1) and isinstance(info.prev_rnn_state, ra.RnnState)
        assert info.q.shape == (B, N_ACTIONS)
        assert info.prev_rnn_state.h.shape == info.prev_rnn_state.c.shape == (B, 1, LSTM_SIZE)
        assert not info.prev_rnn_state.h.any()
    else:
        assert isinstance(info, ra.AgentInfoDqn) and info.q.shape == (B, N_ACTIONS)
    assert all(leaf.device.type == "cpu" for leaf in _leaves(step))


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_step_without_leading_dims_gives_one_example_of_each_field(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.reset()
    step = agent.step(*agent_inputs(spaces, ()))
    agent.reset()
    batched = agent.step(*agent_inputs(spaces, (B,)))
    for one, many in zip(_leaves(step), _leaves(batched), strict=True):
        assert (B, *one.shape) == tuple(many.shape)


@pytest.mark.parametrize("lead", [(), (B,), (3, B)])
@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_call_and_target_take_every_leading_dims_case(cls, spaces, kwargs, lead):
    agent = make_agent(cls, spaces, kwargs)
    agent.train_mode(0)
    inputs = agent_inputs(spaces, lead)
    batch = lead[-1] if lead else 1
    q, state = _call(agent, inputs, _zero_state(batch))
    target_q, target_state = _call(agent, inputs, _zero_state(batch), target=True)
    assert q.shape == target_q.shape == _q_shape(agent, lead)
    assert q.requires_grad and not target_q.requires_grad
    assert_close(q.detach(), target_q)  # the target starts as a copy
    if _is_cat(agent):
        assert_close(q.sum(-1), torch.ones(*lead, N_ACTIONS))
        assert (q >= 0).all()
    if agent.recurrent:
        assert state.h.shape == target_state.h.shape == (1, batch, LSTM_SIZE)
    assert all(not p.requires_grad for p in agent.target_model.parameters())
    assert list(agent.parameters()) == list(agent.model.parameters())


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_continuous_actions_are_refused(cls, spaces, kwargs):
    observation = ATARI_SPACES.observation if spaces is ATARI_SPACES else MUJOCO_SPACES.observation
    agent = cls(model_kwargs=kwargs)
    with pytest.raises(ValueError, match=r"env_spaces\.action=.*Box"):
        agent.initialize(EnvSpaces(observation, MUJOCO_SPACES.action))
    assert agent.model is None


def test_dqn_agent_gives_a_custom_model_the_previous_action_one_hot():
    class Tiny(torch.nn.Module):
        def __init__(self, size, n):
            super().__init__()
            self.q = torch.nn.Linear(size + n, n)

        def forward(self, observation, prev_action, prev_reward):
            assert prev_action.dtype == torch.float32 and prev_action.shape[-1] == 2
            return self.q(torch.cat([observation, prev_action], -1))

    agent = ra.DqnAgent(ModelCls=Tiny, model_kwargs=dict(size=3, n=2))
    agent.initialize(EnvSpaces(Box((3,)), Discrete(2)))
    step = agent.step(torch.randn(B, 3), torch.zeros(B, dtype=torch.long), torch.zeros(B))
    assert step.action.shape == (B,) and step.agent_info.q.shape == (B, 2)


# ------------------------------------------------------------------- exploration


def _vector_dqn(**kwargs):
    return make_agent(ra.VectorDqnAgent, VECTOR_DISCRETE_SPACES, dict(hidden_sizes=[16]), **kwargs)


def test_epsilon_schedule_is_linear_between_itr_min_and_itr_max():
    agent = _vector_dqn(eps_init=1.0, eps_final=0.1, eps_itr_min=3, eps_itr_max=9)
    agent.set_epsilon_itr_min_max(10, 20)  # what the algorithm does in initialize
    assert (agent.eps_itr_min, agent.eps_itr_max) == (10, 20)
    for itr, expected in [(0, 1.0), (10, 1.0), (15, 0.55), (20, 0.1), (1000, 0.1)]:
        agent.sample_mode(itr)
        assert agent.distribution.epsilon == pytest.approx(expected)
        assert agent.eps_sample == pytest.approx(expected)
    with pytest.raises(ValueError, match="itr_min"):
        agent.set_epsilon_itr_min_max(20, 10)


@settings(max_examples=60, deadline=None)
@given(
    eps=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    itrs=st.tuples(st.integers(0, 50), st.integers(0, 50)).map(sorted),
    itr=st.integers(0, 120),
)
def test_epsilon_schedule_property(eps, itrs, itr):
    """Any schedule: eps_init up to itr_min, eps_final from itr_max, linear and between the
    two in the middle."""
    agent = _vector_dqn(eps_init=eps[0], eps_final=eps[1])
    agent.set_epsilon_itr_min_max(*itrs)
    agent.sample_mode(itr)
    got, (low, high) = agent.distribution.epsilon, itrs
    if itr <= low:
        assert got == pytest.approx(eps[0])
    elif itr >= high:
        assert got == pytest.approx(eps[1])
    else:
        progress = (itr - low) / (high - low)
        assert got == pytest.approx(eps[0] + progress * (eps[1] - eps[0]))
    assert min(eps) - 1e-9 <= got <= max(eps) + 1e-9


def test_eval_epsilon_and_back_to_the_schedule():
    agent = _vector_dqn(eps_eval=0.05, eps_itr_min=0, eps_itr_max=10)
    for itr in (0, 7):
        agent.eval_mode(itr)
        assert agent.distribution.epsilon == pytest.approx(0.05)
    agent.sample_mode(5)
    assert agent.distribution.epsilon == pytest.approx(0.5 * 0.01 + 0.5 * 1.0)
    agent.set_sample_epsilon_greedy(0.3)
    assert agent.distribution.epsilon == 0.3


def test_per_environment_epsilons_are_log_spaced_over_all_environments():
    global_B, ranks = 8, [2, 3, 4, 5]
    torch.manual_seed(0)
    agent = ra.VectorDqnAgent(
        model_kwargs=dict(hidden_sizes=[16]),
        eps_init=1.0,
        eps_final=0.1,
        eps_final_min=0.001,
        eps_itr_min=0,
        eps_itr_max=10,
    )
    agent.initialize(VECTOR_DISCRETE_SPACES, global_B=global_B, env_ranks=ranks)
    all_eps = [0.001 * (0.1 / 0.001) ** (i / (global_B - 1)) for i in range(global_B)]
    agent.sample_mode(10)
    eps = agent.distribution.epsilon
    assert_close(eps, torch.tensor([all_eps[r] for r in ranks]))
    steps = torch.log(eps[1:]) - torch.log(eps[:-1])
    assert_close(steps, torch.full((3,), math.log(100) / 7))  # equal ratios between neighbours
    agent.sample_mode(0)
    assert_close(agent.distribution.epsilon, torch.ones(4))
    agent.sample_mode(5)
    assert_close(agent.distribution.epsilon, 0.5 + 0.5 * torch.tensor([all_eps[r] for r in ranks]))
    assert agent.step(*agent_inputs(VECTOR_DISCRETE_SPACES, (4,))).action.shape == (4,)
    agent.eval_mode(1)
    assert agent.distribution.epsilon == pytest.approx(0.001)  # evaluation: one scalar

    # A sampler worker stepping some of the environments takes theirs.
    agent.collector_initialize(global_B, [7, 0])
    agent.sample_mode(10)
    assert_close(agent.distribution.epsilon, torch.tensor([all_eps[7], all_eps[0]]))
    # Alternating samplers: the two environments of a pair share an epsilon.
    agent.alternating = True
    agent.make_vec_eps(global_B, list(range(global_B)))
    agent.sample_mode(10)
    pairs = [0.001 * 100 ** (i / 3) for i in range(4)]
    assert_close(agent.distribution.epsilon, torch.tensor(pairs))


def test_epsilon_zero_is_greedy_and_one_is_uniform():
    agent = _vector_dqn()
    agent.set_sample_epsilon_greedy(0.0)
    inputs = agent_inputs(VECTOR_DISCRETE_SPACES, (64,))
    step = agent.step(*inputs)
    assert torch.equal(step.action, step.agent_info.q.argmax(-1))

    n = 6000
    agent.set_sample_epsilon_greedy(1.0)
    torch.manual_seed(0)
    counts = torch.bincount(agent.step(*agent_inputs(VECTOR_DISCRETE_SPACES, (n,))).action)
    expected = n / N_ACTIONS
    # Each count is binomial(n, 1/3): 5 standard deviations is about 180.
    assert (counts - expected).abs().max() < 5 * math.sqrt(n * (1 / 3) * (2 / 3))


def test_categorical_agent_is_greedy_in_the_expected_value():
    agent = make_agent(
        ra.VectorCatDqnAgent, VECTOR_DISCRETE_SPACES, dict(hidden_sizes=[16], n_atoms=N_ATOMS)
    )
    assert_close(agent.distribution.z, torch.linspace(-10, 10, N_ATOMS))  # until given
    agent.give_V_min_max(-2.0, 6.0)
    z = torch.linspace(-2.0, 6.0, N_ATOMS)
    assert_close(agent.distribution.z, z)
    assert (agent.V_min, agent.V_max) == (-2.0, 6.0)
    agent.set_sample_epsilon_greedy(0.0)
    step = agent.step(*agent_inputs(VECTOR_DISCRETE_SPACES, (64,)))
    assert torch.equal(step.action, (step.agent_info.p * z).sum(-1).argmax(-1))


def test_n_atoms_goes_to_the_model():
    default = ra.VectorCatDqnAgent()
    assert default.n_atoms == 51 == default.model_kwargs["n_atoms"]
    agent = make_agent(
        ra.VectorCatDqnAgent, VECTOR_DISCRETE_SPACES, dict(hidden_sizes=[16]), n_atoms=9
    )
    assert agent.n_atoms == 9 and agent.model.head.n_atoms == 9
    with pytest.raises(ValueError, match="n_atoms"):
        ra.VectorCatDqnAgent(model_kwargs=dict(n_atoms=9), n_atoms=11)


def test_bad_epsilon_settings_are_refused():
    with pytest.raises(ValueError, match="eps_final"):
        ra.VectorDqnAgent(eps_final=1.5)
    with pytest.raises(ValueError, match="eps_final_min"):
        ra.VectorDqnAgent(eps_final_min=0.0)
    with pytest.raises(ValueError, match="itr_min"):
        ra.VectorDqnAgent(eps_itr_min=-1)


def _read_itrs(agent, ready, results):
    ready.wait(30)
    results.put((agent.eps_itr_min, agent.eps_itr_max))


def test_schedule_set_after_workers_started_reaches_them():
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("fork is not available here")
    ctx = mp.get_context("fork")
    agent = ra.VectorDqnAgent(model_kwargs=dict(hidden_sizes=[16]))
    agent.initialize(VECTOR_DISCRETE_SPACES, share_memory=True)
    ready, results = ctx.Event(), ctx.Queue()
    process = ctx.Process(target=_read_itrs, args=(agent, ready, results))
    process.start()
    try:
        agent.set_epsilon_itr_min_max(7, 70)
        ready.set()
        assert results.get(timeout=30) == (7, 70)
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()


# -------------------------------------------------------- target and state dicts


def _perturb(model, amount=0.5):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(amount * torch.randn_like(p))


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_update_target_hard_and_soft(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    _perturb(agent.model)
    old = {k: v.clone() for k, v in agent.target_model.state_dict().items()}
    new = agent.model.state_dict()
    agent.update_target(tau=0.25)
    for key, value in agent.target_model.state_dict().items():
        assert_close(value, 0.25 * new[key] + 0.75 * old[key])
    agent.update_target()
    for key, value in agent.target_model.state_dict().items():
        assert torch.equal(value, new[key])
    assert all(not p.requires_grad for p in agent.target_model.parameters())


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_state_dict_round_trip_with_target_and_schedule(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs, seed=1, eps_itr_min=0, eps_itr_max=10)
    _perturb(agent.model)  # model and target now differ
    agent.set_epsilon_itr_min_max(40, 80)
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert set(state) == {"model", "target", "epsilon"}

    other = make_agent(cls, spaces, kwargs, seed=2, eps_itr_min=0, eps_itr_max=10)
    other.load_state_dict(state)
    assert (other.eps_itr_min, other.eps_itr_max) == (40, 80)
    other.sample_mode(60)
    assert other.distribution.epsilon == pytest.approx(0.5 * 1 + 0.5 * 0.01)
    inputs = agent_inputs(spaces, (B,))
    init = _zero_state(B)
    for target in (False, True):
        assert_close(_call(other, inputs, init, target)[0], _call(agent, inputs, init, target)[0])
    assert not torch.allclose(_call(other, inputs, init)[0], _call(other, inputs, init, True)[0])

    bare = make_agent(cls, spaces, kwargs, seed=3)
    bare.load_state_dict({"module." + k: v for k, v in state["model"].items()})
    for target in (False, True):  # a bare model state dict loads into model and target
        assert_close(_call(bare, inputs, init, target)[0], _call(agent, inputs, init)[0].detach())
    from_initial = make_agent(cls, spaces, kwargs, seed=4, initial_model_state_dict=state["model"])
    assert_close(_call(from_initial, inputs, init, True)[0], _call(agent, inputs, init)[0].detach())


def test_to_device_cpu_keeps_model_and_target_on_the_cpu():
    agent = _vector_dqn()
    agent.to_device(None)
    assert agent.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in agent.target_model.parameters())
    assert agent(*agent_inputs(VECTOR_DISCRETE_SPACES, (B,))).device.type == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_to_device_cuda_moves_model_and_target(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.to_device(0)
    inputs = agent_inputs(spaces, (B,))
    init = _zero_state(B)
    for target in (False, True):
        assert _call(agent, inputs, init, target)[0].device.type == "cuda"
    agent.update_target(0.5)
    agent.sample_mode(0)
    step = agent.step(*inputs)
    assert all(leaf.device.type == "cpu" for leaf in _leaves(step))


# ---------------------------------------------------------------- recurrent state


def _step_sequence(agent, spaces, T, resets=()):
    inputs = agent_inputs(spaces, (T, B), seed=3)
    steps = []
    for t in range(T):
        steps.append(agent.step(*(x[t] for x in inputs)))
        for reset_t, idx in resets:
            if reset_t == t:
                agent.reset_one(idx)
    return inputs, steps


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), R2D1_AGENTS, ids=_ids(R2D1_AGENTS))
def test_stepping_equals_a_sequence_call_from_the_stored_state(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    agent.step(*agent_inputs(spaces, (B,), seed=9))  # a non-zero state to start from
    T = 5
    inputs, steps = _step_sequence(agent, spaces, T)
    stored = ra.RnnState(
        *(torch.stack([getattr(s.agent_info.prev_rnn_state, f) for s in steps]) for f in "hc")
    )
    assert stored.h[0].abs().sum() > 0
    init = ra.RnnState(*(x[0].transpose(0, 1) for x in stored))  # [B,N,H] -> [N,B,H]
    agent.train_mode(1)
    q, _ = agent(*inputs, init)
    target_q, _ = agent.target(*inputs, init)
    for t in range(T):
        assert_close(q[t].detach(), steps[t].agent_info.q, atol=1e-5, rtol=1e-5)
        assert_close(target_q[t], steps[t].agent_info.q, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), R2D1_AGENTS, ids=_ids(R2D1_AGENTS))
def test_reset_one_zeroes_only_that_environment(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    inputs, steps = _step_sequence(agent, spaces, 4, resets=[(1, 2)])
    after_reset = steps[2].agent_info.prev_rnn_state
    for field in after_reset:
        assert not field[2].any()
        assert field[[0, 1, 3]].abs().sum(-1).gt(0).all()
    agent.train_mode(1)
    init = ra.RnnState(*(x.transpose(0, 1) for x in after_reset))
    q, _ = agent(*(x[2:] for x in inputs), init)
    for t in (2, 3):
        assert_close(q[t - 2].detach(), steps[t].agent_info.q, atol=1e-5, rtol=1e-5)
    agent.sample_mode(2)
    agent.reset()
    assert agent.prev_rnn_state is None


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), R2D1_AGENTS, ids=_ids(R2D1_AGENTS))
def test_evaluation_leaves_the_sampling_state_and_epsilon_alone(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs, eps_itr_min=0, eps_itr_max=10)
    agent.sample_mode(5)
    agent.step(*agent_inputs(spaces, (B,)))
    state = agent.prev_rnn_state
    agent.eval_mode(5)
    assert agent.prev_rnn_state is None and agent.distribution.epsilon == pytest.approx(0.001)
    agent.step(*agent_inputs(spaces, (2,)))
    agent.sample_mode(5)
    assert agent.prev_rnn_state is state
    assert agent.distribution.epsilon == pytest.approx(0.5 + 0.5 * 0.01)
