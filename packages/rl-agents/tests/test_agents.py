"""Policy-gradient agents: step / call / value layouts, recurrent state keeping, modes,
state dicts, observation normalisation and parameter sharing (in one process)."""

import pytest
import torch
from rl_agents_testkit import (
    ACTION_SIZE,
    ALL_AGENTS,
    ALTERNATING_AGENTS,
    ATARI_FF_KWARGS,
    ATARI_SPACES,
    FF_AGENTS,
    LSTM_SIZE,
    MUJOCO_FF_KWARGS,
    MUJOCO_SPACES,
    N_ACTIONS,
    RECURRENT_AGENTS,
    VECTOR_DISCRETE_SPACES,
    Box,
    Discrete,
    agent_inputs,
    is_discrete,
    make_agent,
)
from torch.testing import assert_close

import rl_agents as ra
from rl_arrays import AgentStep, EnvSpaces

B = 4


def _ids(cases):
    return [cls.__name__ for cls, _, _ in cases]


def _action_shape(spaces):
    return () if is_discrete(spaces) else (ACTION_SIZE,)


def _assert_dist_info(dist_info, spaces, lead):
    if is_discrete(spaces):
        assert isinstance(dist_info, ra.DistInfo)
        assert dist_info.prob.shape == (*lead, N_ACTIONS)
    else:
        assert isinstance(dist_info, ra.DistInfoStd)
        assert dist_info.mean.shape == dist_info.log_std.shape == (*lead, ACTION_SIZE)


def _leaves(x):
    """The tensors of nested namedarraytuples, in order."""
    return [leaf for item in x for leaf in _leaves(item)] if isinstance(x, tuple) else [x]


def _same(a, b):
    """Namedarraytuples / tensors equal leaf by leaf."""
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert_close(a, b, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------- layouts


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_step_returns_agent_step_with_the_contract_layout(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    step = agent.step(*agent_inputs(spaces, (B,)))
    assert isinstance(step, AgentStep)
    assert step.action.shape == (B, *_action_shape(spaces))
    assert step.action.dtype == (torch.long if is_discrete(spaces) else torch.float32)
    info = step.agent_info
    _assert_dist_info(info.dist_info, spaces, (B,))
    assert info.value.shape == (B,)
    if agent.recurrent:
        assert isinstance(info, ra.AgentInfoRnn) and isinstance(info.prev_rnn_state, ra.RnnState)
        assert info.prev_rnn_state.h.shape == info.prev_rnn_state.c.shape == (B, 1, LSTM_SIZE)
        assert not info.prev_rnn_state.h.any()  # zeros: nothing before the first step
    else:
        assert isinstance(info, ra.AgentInfo)
    assert agent.value(*agent_inputs(spaces, (B,))).shape == (B,)


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_step_and_value_put_their_outputs_on_output_device(cls, spaces, kwargs):
    """The CPU by default (where most samplers write); a batched sampler on a GPU sets its
    device, and nothing then visits the host ("meta" stands in for a device here)."""
    agent = make_agent(cls, spaces, kwargs)
    inputs = agent_inputs(spaces, (B,))
    assert all(x.device.type == "cpu" for x in _leaves(agent.step(*inputs)))
    agent.output_device = torch.device("meta")
    assert all(x.device.type == "meta" for x in _leaves(agent.step(*inputs)))
    assert agent.value(*inputs).device.type == "meta"


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_step_without_leading_dims_gives_one_example_of_each_field(cls, spaces, kwargs):
    """What a sampler steps once, unbatched, to size its [T, B] buffers: every field as one
    environment's step (the recurrent state [N, H])."""
    agent = make_agent(cls, spaces, kwargs)
    agent.reset()
    step = agent.step(*agent_inputs(spaces, ()))
    agent.reset()
    batched = agent.step(*agent_inputs(spaces, (B,)))
    for one, many in zip(_leaves(step), _leaves(batched), strict=True):
        assert (B, *one.shape) == tuple(many.shape)


@pytest.mark.parametrize("lead", [(), (B,), (3, B)])
@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_call_takes_every_leading_dims_case(cls, spaces, kwargs, lead):
    agent = make_agent(cls, spaces, kwargs)
    agent.train_mode(0)
    inputs = agent_inputs(spaces, lead)
    if agent.recurrent:
        batch = lead[-1] if lead else 1
        init = ra.RnnState(torch.zeros(1, batch, LSTM_SIZE), torch.zeros(1, batch, LSTM_SIZE))
        dist_info, value, next_state = agent(*inputs, init)
        assert next_state.h.shape == (1, batch, LSTM_SIZE)
    else:
        dist_info, value = agent(*inputs)
    _assert_dist_info(dist_info, spaces, lead)
    assert value.shape == lead and value.requires_grad


# ---------------------------------------------------------------- recurrent state


def _step_sequence(agent, spaces, T, resets=()):
    """Step T times on fixed inputs; ``resets``: (t, idx) reset_one calls after step t."""
    inputs = agent_inputs(spaces, (T, B), seed=3)
    steps = []
    for t in range(T):
        steps.append(agent.step(*(x[t] for x in inputs)))
        for reset_t, idx in resets:
            if reset_t == t:
                agent.reset_one(idx)
    return inputs, steps


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), RECURRENT_AGENTS, ids=_ids(RECURRENT_AGENTS))
def test_stepping_equals_a_sequence_call_from_the_stored_state(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    agent.step(*agent_inputs(spaces, (B,), seed=9))  # a non-zero state to start from
    T = 5
    inputs, steps = _step_sequence(agent, spaces, T)
    # What a sampler stores: [T, B, N, H]; the algorithm starts from [0], transposed.
    stored = ra.RnnState(
        *(torch.stack([getattr(s.agent_info.prev_rnn_state, f) for s in steps]) for f in "hc")
    )
    assert stored.h[0].abs().sum() > 0
    init = ra.RnnState(*(x[0].transpose(0, 1) for x in stored))  # [B,N,H] -> [N,B,H]
    agent.train_mode(1)
    dist_info, value, _ = agent(*inputs, init)
    for t in range(T):
        _same(dist_info[t], steps[t].agent_info.dist_info)
        _same(value[t], steps[t].agent_info.value)


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), RECURRENT_AGENTS, ids=_ids(RECURRENT_AGENTS))
def test_reset_done_is_reset_one_for_every_done_environment(cls, spaces, kwargs):
    one_by_one, masked = (make_agent(cls, spaces, kwargs) for _ in range(2))
    masked.load_state_dict(one_by_one.state_dict())
    done = torch.zeros(B, dtype=torch.bool)
    done[[0, 2]] = True
    for agent in (one_by_one, masked):
        agent.sample_mode(0)
        agent.reset_done(done)  # no state yet: nothing to do
        _step_sequence(agent, spaces, 2)
    for idx in (0, 2):
        one_by_one.reset_one(idx)
    masked.reset_done(done)
    for a, b in zip(one_by_one.prev_rnn_state, masked.prev_rnn_state, strict=True):
        assert torch.equal(a, b) and not a[:, [0, 2]].any() and a[:, 1].any()


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), RECURRENT_AGENTS, ids=_ids(RECURRENT_AGENTS))
def test_reset_one_zeroes_only_that_environment(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    inputs, steps = _step_sequence(agent, spaces, 4, resets=[(1, 2)])
    after_reset = steps[2].agent_info.prev_rnn_state
    for field in after_reset:
        assert not field[2].any()  # env 2 starts over from zeros
        assert field[[0, 1, 3]].abs().sum(-1).gt(0).all()
    # The stored state is the one the step used: a sequence from it reproduces the steps.
    agent.train_mode(1)
    init = ra.RnnState(*(x.transpose(0, 1) for x in after_reset))
    dist_info = agent(*(x[2:] for x in inputs), init)[0]
    for t in (2, 3):
        _same(dist_info[t - 2], steps[t].agent_info.dist_info)
    agent.sample_mode(2)
    agent.reset()
    assert agent.prev_rnn_state is None
    assert not agent.step(*(x[0] for x in inputs)).agent_info.prev_rnn_state.h.any()


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), RECURRENT_AGENTS, ids=_ids(RECURRENT_AGENTS))
def test_value_uses_the_current_state_without_advancing_it(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    agent.step(*agent_inputs(spaces, (B,), seed=4))
    state = agent.prev_rnn_state
    inputs = agent_inputs(spaces, (B,), seed=5)
    first = agent.value(*inputs)
    assert agent.prev_rnn_state is state
    assert_close(agent.value(*inputs), first)
    assert_close(agent.step(*inputs).agent_info.value, first)  # the step's value, same state


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), RECURRENT_AGENTS, ids=_ids(RECURRENT_AGENTS))
def test_training_and_evaluation_leave_the_sampling_state_alone(cls, spaces, kwargs):
    agent = make_agent(cls, spaces, kwargs)
    agent.sample_mode(0)
    agent.step(*agent_inputs(spaces, (B,)))
    state = agent.prev_rnn_state
    saved = [x.clone() for x in state]
    agent.train_mode(0)
    assert agent.prev_rnn_state is None
    agent(*agent_inputs(spaces, (3, B)), None)
    agent.eval_mode(0)
    assert agent.prev_rnn_state is None
    agent.step(*agent_inputs(spaces, (2,)))  # evaluation with its own envs and state
    agent.reset_one(0)
    agent.sample_mode(1)
    assert agent.prev_rnn_state is state
    for x, y in zip(state, saved, strict=True):
        assert torch.equal(x, y)


# ------------------------------------------------------------------- alternating


@pytest.mark.parametrize(
    ("cls", "spaces", "kwargs"), ALTERNATING_AGENTS, ids=_ids(ALTERNATING_AGENTS)
)
def test_alternating_agent_keeps_one_state_per_group(cls, spaces, kwargs):
    plain_cls = ra.AtariLstmAgent if is_discrete(spaces) else ra.MujocoLstmAgent
    agent = make_agent(cls, spaces, kwargs)
    first, second = (make_agent(plain_cls, spaces, kwargs) for _ in range(2))
    for other in (first, second):
        other.load_state_dict(agent.state_dict())
        other.sample_mode(0)
    agent.sample_mode(0)
    T, groups = 3, [slice(0, 2), slice(2, 5)]  # groups of unequal size
    inputs = agent_inputs(spaces, (T, 5), seed=6)
    for t in range(T):
        for group, plain in zip(groups, (first, second), strict=True):
            x = [i[t, group] for i in inputs]
            torch.manual_seed(t)
            got = agent.step(*x)
            torch.manual_seed(t)
            _same(got.agent_info, plain.step(*x).agent_info)
        if t == 0:
            agent.reset_one(3)  # env 3 is env 1 of the second group
            second.reset_one(1)
    # The bootstrap value on all environments uses both groups' states side by side.
    last = [i[-1] for i in inputs]
    expected = torch.cat(
        [first.value(*(x[:2] for x in last)), second.value(*(x[2:] for x in last))]
    )
    assert_close(agent.value(*last), expected)
    assert_close(agent.value(*(x[:2] for x in last)), expected[:2])  # the group whose turn it is


@pytest.mark.parametrize(
    ("cls", "spaces", "kwargs"), ALTERNATING_AGENTS, ids=_ids(ALTERNATING_AGENTS)
)
def test_alternating_agent_does_not_alternate_in_eval_mode(cls, spaces, kwargs):
    plain_cls = ra.AtariLstmAgent if is_discrete(spaces) else ra.MujocoLstmAgent
    agent, plain = make_agent(cls, spaces, kwargs), make_agent(plain_cls, spaces, kwargs)
    plain.load_state_dict(agent.state_dict())
    agent.sample_mode(0)
    agent.step(*agent_inputs(spaces, (2,)))
    sampling = agent.prev_rnn_state, agent.rnn_states.turn
    agent.eval_mode(0)
    plain.eval_mode(0)
    inputs = agent_inputs(spaces, (3, B), seed=7)
    for t in range(3):
        torch.manual_seed(t)
        got = agent.step(*(x[t] for x in inputs))
        torch.manual_seed(t)
        _same(got.agent_info, plain.step(*(x[t] for x in inputs)).agent_info)
    agent.sample_mode(1)
    assert (agent.prev_rnn_state, agent.rnn_states.turn) == sampling


# ----------------------------------------------------------------- state dicts


@pytest.mark.parametrize(("cls", "spaces", "kwargs"), ALL_AGENTS, ids=_ids(ALL_AGENTS))
def test_state_dict_round_trip(cls, spaces, kwargs):
    agent, other = make_agent(cls, spaces, kwargs, seed=1), make_agent(cls, spaces, kwargs, seed=2)
    inputs = agent_inputs(spaces, (B,))
    extra = (None,) if agent.recurrent else ()
    assert not torch.allclose(agent(*inputs, *extra)[1], other(*inputs, *extra)[1])
    other.load_state_dict(agent.state_dict())
    _same(agent(*inputs, *extra)[:2], other(*inputs, *extra)[:2])
    prefixed = {"module." + k: v for k, v in agent.state_dict().items()}
    from_initial = make_agent(cls, spaces, kwargs, seed=3, initial_model_state_dict=prefixed)
    _same(agent(*inputs, *extra)[:2], from_initial(*inputs, *extra)[:2])


# --------------------------------------------------------- observation normalisation


@pytest.mark.parametrize("cls", [ra.MujocoFfAgent, ra.MujocoLstmAgent])
def test_obs_rms_is_updated_only_through_update_obs_rms(cls):
    kwargs = dict(hidden_sizes=[16], normalize_observation=True)
    if cls is ra.MujocoLstmAgent:
        kwargs["lstm_size"] = LSTM_SIZE
    assert not hasattr(cls(model_kwargs=kwargs), "update_obs_rms")  # no model yet
    agent = make_agent(cls, MUJOCO_SPACES, kwargs)
    assert hasattr(agent, "update_obs_rms")
    plain = {k: v for k, v in kwargs.items() if k != "normalize_observation"}
    assert not hasattr(make_agent(cls, MUJOCO_SPACES, plain), "update_obs_rms")

    extra = (None,) if agent.recurrent else ()
    before = {k: v.clone() for k, v in agent.state_dict().items() if k.startswith("obs_rms")}
    agent.sample_mode(0)
    agent.step(*agent_inputs(MUJOCO_SPACES, (B,)))
    agent.train_mode(0)
    agent(*agent_inputs(MUJOCO_SPACES, (3, B)), *extra)
    for key, value in before.items():
        assert torch.equal(agent.state_dict()[key], value)

    observation = agent_inputs(MUJOCO_SPACES, (6, B), seed=8)[0] * 3 + 1
    agent.update_obs_rms(observation)
    flat = observation.reshape(-1, observation.shape[-1])
    state = agent.state_dict()
    assert_close(state["obs_rms.mean"], flat.mean(0))
    assert_close(state["obs_rms.var"], flat.var(0, unbiased=False))
    assert float(state["obs_rms.count"]) == flat.shape[0]

    restored = make_agent(cls, MUJOCO_SPACES, kwargs, seed=5)
    restored.load_state_dict(state)
    for key in before:
        assert torch.equal(restored.state_dict()[key], state[key])
    inputs = agent_inputs(MUJOCO_SPACES, (B,))
    _same(agent(*inputs, *extra)[:2], restored(*inputs, *extra)[:2])


def test_atari_agents_have_no_update_obs_rms():
    assert not hasattr(make_agent(ra.AtariFfAgent, ATARI_SPACES, ATARI_FF_KWARGS), "update_obs_rms")


# ------------------------------------------------------------ Gaussian eval mode


def test_gaussian_agents_sample_in_eval_mode_unless_deterministic_eval():
    inputs = agent_inputs(MUJOCO_SPACES, (B,))
    default = make_agent(ra.MujocoFfAgent, MUJOCO_SPACES, MUJOCO_FF_KWARGS)
    default.eval_mode(0)
    step = default.step(*inputs)
    assert not torch.equal(step.action, step.agent_info.dist_info.mean)

    agent = make_agent(ra.MujocoFfAgent, MUJOCO_SPACES, MUJOCO_FF_KWARGS, deterministic_eval=True)
    agent.eval_mode(0)
    step = agent.step(*inputs)
    assert torch.equal(step.action, step.agent_info.dist_info.mean)
    agent.sample_mode(1)
    step = agent.step(*inputs)
    assert not torch.equal(step.action, step.agent_info.dist_info.mean)
    agent.train_mode(1)
    assert agent.distribution.std is None  # training scores with the model's log_std


@pytest.mark.parametrize("cls", [ra.CategoricalFfAgent, ra.CategoricalLstmAgent])
def test_categorical_agents_act_greedily_in_eval_mode_only_when_asked(cls):
    kwargs = dict(hidden_sizes=[16], lstm_size=LSTM_SIZE) if cls.recurrent else {}
    inputs = agent_inputs(VECTOR_DISCRETE_SPACES, (64,))
    for deterministic_eval in (False, True):
        agent = make_agent(
            cls, VECTOR_DISCRETE_SPACES, kwargs, deterministic_eval=deterministic_eval
        )
        agent.eval_mode(0)
        step = agent.step(*inputs)
        greedy = torch.equal(step.action, step.agent_info.dist_info.prob.argmax(-1))
        assert greedy == deterministic_eval
        agent.sample_mode(1)
        step = agent.step(*inputs)
        assert not torch.equal(step.action, step.agent_info.dist_info.prob.argmax(-1))


def test_gaussian_actions_are_not_clipped_to_the_box():
    spaces = EnvSpaces(Box((5,)), Box((ACTION_SIZE,), low=-0.01, high=0.01))
    agent = make_agent(ra.MujocoFfAgent, spaces, MUJOCO_FF_KWARGS)
    agent.sample_mode(0)
    action = agent.step(*agent_inputs(spaces, (64,))).action
    assert action.abs().max() > 0.01


# -------------------------------------------------------------------------- errors


def test_bad_configuration_is_reported_before_building_anything():
    with pytest.raises(ValueError, match="discrete action space"):
        ra.CategoricalPgAgent(ModelCls=ra.MujocoFfModel).initialize(MUJOCO_SPACES)
    with pytest.raises(ValueError, match="1-D shape"):
        ra.GaussianPgAgent(ModelCls=ra.MujocoFfModel).initialize(ATARI_SPACES)
    with pytest.raises(ValueError, match="image observations"):
        ra.AtariFfAgent().initialize(EnvSpaces(Box((5,)), Discrete(2)))
    with pytest.raises(ValueError, match="output_size"):
        ra.AtariFfAgent(model_kwargs=dict(output_size=4)).initialize(ATARI_SPACES)
    with pytest.raises(ValueError, match="ModelCls"):
        ra.CategoricalPgAgent().initialize(ATARI_SPACES)
    with pytest.raises(RuntimeError, match="initialize"):
        ra.AtariFfAgent().step(*agent_inputs(ATARI_SPACES, (B,)))
    with pytest.raises(TypeError):
        ra.BaseAgent()


def test_categorical_pg_agent_with_a_custom_model():
    class Tiny(torch.nn.Module):
        def __init__(self, size):
            super().__init__()
            self.pi, self.v = torch.nn.Linear(size, 2), torch.nn.Linear(size, 1)

        def forward(self, observation, prev_action, prev_reward):
            assert prev_action.shape[-1] == 2  # one-hot
            return torch.softmax(self.pi(observation), -1), self.v(observation).squeeze(-1)

    agent = ra.CategoricalPgAgent(ModelCls=Tiny, model_kwargs=dict(size=3))
    agent.initialize(EnvSpaces(Box((3,)), Discrete(2)))
    step = agent.step(torch.randn(B, 3), torch.zeros(B, dtype=torch.long), torch.zeros(B))
    assert step.action.shape == (B,) and agent.distribution.dim == 2


# ----------------------------------------------------------- devices and sharing


def test_to_device_none_stays_on_cpu_and_data_parallel_needs_a_process_group():
    agent = make_agent(*FF_AGENTS[1])
    agent.to_device(None)
    assert agent.device == torch.device("cpu")
    with pytest.raises(RuntimeError, match="init_process_group"):
        agent.data_parallel()


def test_data_parallel_on_cpu(tmp_path):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        agent = make_agent(
            ra.MujocoFfAgent, MUJOCO_SPACES, dict(hidden_sizes=[16], normalize_observation=True)
        )
        plain = agent.state_dict()
        assert agent.data_parallel() is None
        assert isinstance(agent.model, torch.nn.parallel.DistributedDataParallel)
        assert agent.state_dict().keys() == plain.keys()  # no "module." prefix
        dist_info, value = agent(*agent_inputs(MUJOCO_SPACES, (3, B)))
        (value.sum() + dist_info.mean.sum() + dist_info.log_std.sum()).backward()
        assert all(p.grad is not None for p in agent.parameters())
        agent.update_obs_rms(torch.randn(10, 5))  # all-reduced over the one process
        assert float(agent.state_dict()["obs_rms.count"]) == 10
        wrapped = agent.model.module
        agent.leave_data_parallel()
        assert agent.model is wrapped
        assert agent.state_dict().keys() == plain.keys()
        agent.leave_data_parallel()  # (not wrapped: nothing to do)
        assert agent.model is wrapped
    finally:
        dist.destroy_process_group()


def test_shared_memory_send_and_receive_in_one_process():
    agent = make_agent(ra.MujocoFfAgent, MUJOCO_SPACES, MUJOCO_FF_KWARGS)
    with pytest.raises(RuntimeError, match="share_memory=True"):
        agent.send_shared_memory()
    agent.sync_shared_memory()  # nothing shared: nothing to do

    torch.manual_seed(0)
    trainer = ra.MujocoFfAgent(model_kwargs=MUJOCO_FF_KWARGS)
    trainer.initialize(MUJOCO_SPACES, share_memory=True)
    shared = trainer.shared_model
    assert trainer.model is shared and all(p.is_shared() for p in shared.parameters())
    trainer.sync_shared_memory()  # training on the shared model itself: nothing to copy

    sampler = trainer  # the same object plays the sampler after async_cpu (own model)
    sampler.async_cpu(share_memory=True)
    assert sampler.model is not shared and all(p.is_shared() for p in sampler.model.parameters())
    with torch.no_grad():
        for p in shared.parameters():
            p.add_(1.0)
    before = sampler.state_dict()["log_std"].clone()
    sampler.recv_shared_memory()  # nothing sent
    assert torch.equal(sampler.state_dict()["log_std"], before)
    # send_shared_memory from a trainer training the shared model only counts the update.
    sampler._send_count += 1
    sampler.recv_shared_memory()
    assert torch.equal(sampler.state_dict()["log_std"], shared.log_std.detach())
    # A separate model publishes with sync_shared_memory / send_shared_memory.
    with torch.no_grad():
        sampler.model.log_std.fill_(-3.0)
    sampler.sync_shared_memory()
    assert torch.equal(shared.log_std.detach(), torch.full((ACTION_SIZE,), -3.0))
    with torch.no_grad():
        sampler.model.log_std.fill_(-4.0)
    count = int(sampler._send_count)
    sampler.send_shared_memory()
    assert int(sampler._send_count) == count + 1
    assert torch.equal(shared.log_std.detach(), torch.full((ACTION_SIZE,), -4.0))
