"""A2C and PPO with tiny hand-written agents (rl_agents is not a dependency of rl-algos)."""

import io
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_algos_fakes import (
    EnvInfo,
    LinearAgent,
    LstmAgent,
    NoTimeoutInfo,
    RnnState,
    make_samples,
    random_batch,
)

from rl_algos import (
    A2C,
    PPO,
    LossInputs,
    OptInfo,
    PgAgentLike,
    PpoOptInfo,
    valid_from_done,
)
from rl_algos._pg import clip_grad_norm
from rl_algos._ppo_minibatches import _split_slices
from rl_arrays import AgentInputs, AgentSamples, BatchSpec, Samples, numpify_buffer

OBS, ACTIONS = 4, 3


def lstm_batch(agent, T=5, B=6, p_done=0.2, seed=0):
    g = torch.Generator().manual_seed(seed + 100)
    return random_batch(agent, T, B, p_done, seed, prev_rnn_state0=agent.random_state(B, g))


def params(agent):
    return [p.detach().clone() for p in agent.parameters()]


# ---------------------------------------------------------------- process_returns


def hand_batch(timeout):
    """T=3, B=2, with values set by hand (see the expected numbers in the tests)."""
    agent = LinearAgent(OBS, ACTIONS)
    reward = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 2.0]])
    done = torch.tensor([[False, True], [True, False], [False, False]])
    timeouts = torch.tensor([[False, True], [False, False], [False, False]]) if timeout else None
    samples = make_samples(
        agent,
        torch.randn(3, 2, OBS),
        reward,
        done,
        timeout=timeouts,
        bootstrap_value=torch.tensor([10.0, 20.0]),
    )
    samples.agent.agent_info.value[:] = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    return agent, samples


@pytest.mark.parametrize("timeout", [False, True])
@pytest.mark.parametrize("mid_batch_reset", [True, False])
def test_process_returns_discounted(timeout, mid_batch_reset):
    agent, samples = hand_batch(timeout)
    algo = A2C(discount=0.5)
    algo.initialize(agent, n_itr=1, mid_batch_reset=mid_batch_reset)
    return_, advantage, valid = algo.process_returns(samples)
    expected = torch.tensor([[2.0, 0.0], [2.0, 7.0], [8.0, 12.0]])
    if timeout:  # the time-out step's target is its own value; it is not trained on
        expected[0, 1] = 0.2
    torch.testing.assert_close(return_, expected)
    torch.testing.assert_close(advantage, expected - samples.agent.agent_info.value)
    if mid_batch_reset:
        expected_valid = torch.ones(3, 2)
    else:  # blanks after a done (wait-reset collectors)
        expected_valid = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    if timeout:
        expected_valid[0, 1] = 0
    torch.testing.assert_close(valid, expected_valid)


def test_process_returns_gae():
    agent, samples = hand_batch(timeout=False)
    algo = PPO(discount=0.5, gae_lambda=0.5)
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    return_, advantage, _ = algo.process_returns(samples)
    expected = torch.tensor([[1.475, -0.2], [1.7, 3.75], [7.5, 11.4]])
    torch.testing.assert_close(advantage, expected)
    torch.testing.assert_close(return_, expected + samples.agent.agent_info.value)


def test_process_returns_gae_with_a_timeout_bootstraps_from_its_value():
    agent, samples = hand_batch(timeout=True)
    samples.env.done[1, 1] = True  # env 1: reset at 0 (time-out), then a time-out at 1 too
    samples.env.env_info.timeout[1, 1] = True
    algo = PPO(discount=0.5, gae_lambda=0.5)
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    return_, advantage, valid = algo.process_returns(samples)
    assert advantage[0, 1] == 0 and advantage[1, 1] == 0
    torch.testing.assert_close(return_[:2, 1], torch.tensor([0.2, 0.4]))
    torch.testing.assert_close(valid[:, 1], torch.tensor([0.0, 0.0, 1.0]))


def test_process_returns_normalizes_over_valid_steps():
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent, T=8, B=5, p_done=0.3, timeout=True)
    algo = A2C(normalize_advantage=True)
    algo.initialize(agent, n_itr=1, mid_batch_reset=False)
    _, advantage, valid = algo.process_returns(samples)
    selected = advantage[valid > 0]
    assert abs(selected.mean().item()) < 1e-5
    assert selected.std().item() == pytest.approx(1.0, rel=1e-4)


def test_recurrent_agents_mask_after_a_done_even_with_mid_batch_reset():
    agent = LstmAgent(OBS, ACTIONS)
    samples = lstm_batch(agent, p_done=0.4)
    algo = A2C()
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    _, _, valid = algo.process_returns(samples)
    done = samples.env.done.float()
    assert torch.equal(valid[1:], (done[:-1].cumsum(0) == 0).float())


def test_process_returns_needs_bootstrap_value():
    agent, samples = hand_batch(timeout=False)
    agent_samples = AgentSamples(
        samples.agent.action, samples.agent.prev_action, samples.agent.agent_info
    )
    no_bootstrap = Samples(agent_samples, samples.env)
    algo = A2C()
    algo.initialize(agent, n_itr=1)
    with pytest.raises(ValueError, match="bootstrap_value"):
        algo.process_returns(no_bootstrap)


# ---------------------------------------------------------------- A2C


def test_a2c_step_decreases_its_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent, T=6, B=8)
    algo = A2C(learning_rate=0.01)
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(6, 8), mid_batch_reset=True)
    before = algo.loss(samples)[0].item()
    opt_info = algo.optimize_agent(0, samples)
    after = algo.loss(samples)[0].item()
    assert after < before
    assert isinstance(opt_info, OptInfo) and A2C.opt_info_fields == OptInfo._fields
    assert all(len(values) == 1 for values in opt_info)
    assert opt_info.loss[0] == pytest.approx(before)
    assert opt_info.gradNorm[0] > 0 and 1 <= opt_info.perplexity[0] <= ACTIONS
    assert algo.update_counter == 1


def test_gradient_clipping_bounds_the_step_and_reports_the_norm_before_clipping():
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent, T=6, B=8)
    algo = A2C(OptimCls=torch.optim.SGD, learning_rate=1.0, clip_grad_norm=1e-3)
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    before = params(agent)
    opt_info = algo.optimize_agent(0, samples)
    moved = torch.sqrt(
        sum(((a - b) ** 2).sum() for a, b in zip(params(agent), before, strict=True))
    )
    assert moved.item() == pytest.approx(1e-3, rel=1e-4)
    assert opt_info.gradNorm[0] > 1e-2


def test_a2c_recurrent_starts_from_the_stored_state():
    agent = LstmAgent(OBS, ACTIONS)
    samples = lstm_batch(agent)
    seen = []
    forward = agent.forward
    agent.forward = lambda *args: seen.append(args[3]) or forward(*args)
    algo = A2C()
    algo.initialize(agent, n_itr=1, mid_batch_reset=False)
    algo.optimize_agent(0, samples)
    (state,) = seen
    stored = samples.agent.agent_info.prev_rnn_state[0]  # [B, N, H]
    assert torch.equal(state.h, stored.h.transpose(0, 1)) and state.h.is_contiguous()
    assert torch.equal(state.c, stored.c.transpose(0, 1))


@pytest.mark.parametrize(
    "make_agent", [lambda: LinearAgent(OBS, ACTIONS), lambda: LstmAgent(OBS, ACTIONS)]
)
def test_invalid_steps_do_not_change_the_loss(make_agent):
    agent = make_agent()
    kwargs = (
        {"prev_rnn_state0": agent.random_state(4, torch.Generator())} if agent.recurrent else {}
    )
    samples = random_batch(agent, T=6, B=4, p_done=0.3, timeout=True, **kwargs)
    samples.env.done[2] = True  # every env has a done by step 2
    a2c, ppo = A2C(), PPO()
    for algo in (a2c, ppo):
        algo.initialize(agent, n_itr=1, mid_batch_reset=False)
    clean_a2c = a2c.loss(samples)[0]
    clean_ppo = ppo_loss(ppo, samples)
    # Steps after an env's first done are blanks. A time-out step is masked too, but its value
    # is the bootstrap target of the step before it: only its observation and reward are unused.
    blank = valid_from_done(samples.env.done) == 0
    unused = blank | samples.env.env_info.timeout
    assert blank.any() and (unused & ~blank).any()
    samples.env.observation[unused] = 1e3
    samples.env.reward[unused] = 1e6
    samples.agent.agent_info.value[blank] = -1e6
    torch.testing.assert_close(a2c.loss(samples)[0], clean_a2c)
    torch.testing.assert_close(ppo_loss(ppo, samples), clean_ppo)


def ppo_loss(ppo, samples):
    return_, advantage, valid = ppo.process_returns(samples)
    inputs = LossInputs(
        AgentInputs(samples.env.observation, samples.agent.prev_action, samples.env.prev_reward),
        samples.agent.action,
        return_,
        advantage,
        valid,
        samples.agent.agent_info.dist_info,
    )
    init = samples.agent.agent_info.prev_rnn_state[0] if ppo.agent.recurrent else None
    return ppo.loss(*inputs, init)[0]


# ---------------------------------------------------------------- PPO


def test_ppo_reports_kl_and_clip_fraction_per_step():
    torch.manual_seed(0)
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent, T=8, B=6)
    algo = PPO(learning_rate=0.05, epochs=3, minibatches=4, ratio_clip=0.1)
    algo.initialize(agent, n_itr=5, batch_spec=BatchSpec(8, 6), mid_batch_reset=True)
    opt_info = algo.optimize_agent(0, samples)
    assert isinstance(opt_info, PpoOptInfo) and PPO.opt_info_fields == PpoOptInfo._fields
    assert "kl" in PPO.opt_info_fields and "clipFraction" in PPO.opt_info_fields
    assert all(len(values) == 3 * 4 for values in opt_info)
    assert all(isinstance(v, float) for values in opt_info for v in values)
    # The first step sees the sampling policy itself: no divergence, nothing clipped.
    assert abs(opt_info.kl[0]) < 1e-6 and opt_info.clipFraction[0] == 0
    assert max(opt_info.kl) > 1e-4
    assert 0 < max(opt_info.clipFraction) <= 1
    assert algo.update_counter == 12


def test_ppo_linear_schedule_anneals_lr_and_ratio_clip_to_zero():
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent)
    n_itr = 4
    algo = PPO(learning_rate=0.01, ratio_clip=0.2, minibatches=2, epochs=1)
    algo.initialize(agent, n_itr=n_itr, mid_batch_reset=True)
    for itr in range(n_itr):
        factor = (n_itr - itr) / n_itr
        assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * factor)
        assert algo.ratio_clip == pytest.approx(0.2 * factor)
        algo.optimize_agent(itr, samples)
    assert algo.optimizer.param_groups[0]["lr"] == 0 and algo.ratio_clip == 0
    algo.optimize_agent(n_itr, samples)  # past n_itr it stays at zero, never negative
    assert algo.optimizer.param_groups[0]["lr"] == 0 and algo.ratio_clip == 0


def test_ppo_without_schedule_keeps_lr_and_ratio_clip():
    agent = LinearAgent(OBS, ACTIONS)
    algo = PPO(learning_rate=0.01, ratio_clip=0.2, linear_lr_schedule=False)
    algo.initialize(agent, n_itr=2, mid_batch_reset=True)
    for itr in range(3):
        algo.optimize_agent(itr, random_batch(agent, seed=itr))
    assert algo.optimizer.param_groups[0]["lr"] == 0.01 and algo.ratio_clip == 0.2
    assert "lr_scheduler" not in algo.optim_state_dict()


def save_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("Algo", [A2C, PPO])
@pytest.mark.parametrize("recurrent", [False, True])
@pytest.mark.parametrize("normalize_reward", [False, True])
def test_optim_state_dict_round_trip_gives_identical_next_updates(
    Algo, recurrent, normalize_reward
):
    torch.manual_seed(0)

    def make_agent():
        return LstmAgent(OBS, ACTIONS) if recurrent else LinearAgent(OBS, ACTIONS)

    def batch(agent, seed):
        return lstm_batch(agent, seed=seed) if recurrent else random_batch(agent, seed=seed)

    kwargs = dict(learning_rate=0.01, normalize_reward=normalize_reward)
    if Algo is PPO:
        kwargs.update(minibatches=2, epochs=2, gae_lambda=0.9)
    agent = make_agent()
    algo = Algo(**kwargs)
    algo.initialize(agent, n_itr=10, mid_batch_reset=False)
    algo.optimize_agent(0, batch(agent, 0))
    checkpoint = save_load({"agent": agent.state_dict(), "optim": algo.optim_state_dict()})
    next_batch = batch(agent, 1)
    info_a = algo.optimize_agent(1, next_batch)

    torch.manual_seed(1234)  # a fresh process would have another global random state
    for resumed_kwargs in ({}, {"initial_optim_state_dict": checkpoint["optim"]}):
        agent_b = make_agent()
        agent_b.load_state_dict(checkpoint["agent"])
        algo_b = Algo(**kwargs, **resumed_kwargs)
        algo_b.initialize(agent_b, n_itr=10, mid_batch_reset=False)
        if not resumed_kwargs:
            algo_b.load_optim_state_dict(checkpoint["optim"])
        info_b = algo_b.optimize_agent(1, next_batch)
        assert info_b == info_a
        assert all(torch.equal(a, b) for a, b in zip(params(agent), params(agent_b), strict=True))
        assert algo_b.optimizer.param_groups[0]["lr"] == algo.optimizer.param_groups[0]["lr"]
        assert getattr(algo_b, "ratio_clip", None) == getattr(algo, "ratio_clip", None)
        assert algo_b.update_counter == algo.update_counter


def test_optim_state_dict_is_a_copy():
    agent = LinearAgent(OBS, ACTIONS)
    algo = PPO()
    algo.initialize(agent, n_itr=3, mid_batch_reset=True)
    algo.optimize_agent(0, random_batch(agent))
    state = algo.optim_state_dict()
    kept = save_load(state)
    algo.optimize_agent(1, random_batch(agent, seed=1))
    moments = state["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(moments, kept["optimizer"]["state"][0]["exp_avg"])
    assert state["lr_scheduler"]["last_epoch"] == 1


def test_a_bare_optimizer_state_dict_loads_too():
    agent = LinearAgent(OBS, ACTIONS)
    algo = A2C()
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    algo.optimize_agent(0, random_batch(agent))
    fresh = PPO(initial_optim_state_dict=algo.optimizer.state_dict())
    fresh.initialize(agent, n_itr=1, mid_batch_reset=True)
    assert fresh.optimizer.state_dict()["state"][0]["step"] == 1


def test_state_with_another_schedule_setting_is_refused():
    agent = LinearAgent(OBS, ACTIONS)
    with_schedule, without = PPO(), PPO(linear_lr_schedule=False)
    for algo in (with_schedule, without):
        algo.initialize(agent, n_itr=2, mid_batch_reset=True)
    with pytest.raises(ValueError, match="linear_lr_schedule"):
        without.load_optim_state_dict(with_schedule.optim_state_dict())
    with pytest.raises(ValueError, match="missing"):
        with_schedule.load_optim_state_dict({"optimizer": {}})


def test_recurrent_minibatches_are_whole_sequences_from_their_initial_state():
    torch.manual_seed(0)
    agent = LstmAgent(OBS, ACTIONS, hidden=5, num_layers=2)
    T, B = 5, 6
    samples = lstm_batch(agent, T=T, B=B, p_done=0.15)
    stored = samples.agent.agent_info.prev_rnn_state[0]  # [B, N, H]
    calls = []
    forward = agent.forward
    agent.forward = lambda *args: calls.append((args[0], args[3])) or forward(*args)
    # With lr = 0 nothing changes, so every minibatch forward must reproduce the sampler's
    # full-batch forward exactly: KL 0, nothing clipped.
    algo = PPO(learning_rate=0.0, minibatches=3, epochs=2)
    algo.initialize(agent, n_itr=2, batch_spec=BatchSpec(T, B), mid_batch_reset=False)
    opt_info = algo.optimize_agent(0, samples)
    assert max(abs(kl) for kl in opt_info.kl) < 1e-6
    assert max(opt_info.clipFraction) == 0
    assert len(calls) == 6
    for epoch in range(2):
        covered = []
        for observation, state in calls[3 * epoch : 3 * epoch + 3]:
            assert observation.shape == (T, 2, OBS)  # whole sequences of 2 envs each
            assert state.h.shape == (2, 2, 5) and state.h.is_contiguous()  # [N, B_mb, H]
            for j in range(2):
                (b,) = [
                    b
                    for b in range(B)
                    if torch.equal(observation[:, j], samples.env.observation[:, b])
                ]
                covered.append(b)
                assert torch.equal(state.h[:, j], stored.h[b]) and torch.equal(
                    state.c[:, j], stored.c[b]
                )
        assert sorted(covered) == list(range(B))
    # The check has teeth: from a zero state the policy differs.
    zero = RnnState(torch.zeros(2, B, 5), torch.zeros(2, B, 5))
    with torch.no_grad():
        dist_info, _, _ = forward(samples.env.observation, None, None, zero)
    assert not torch.allclose(dist_info.prob, samples.agent.agent_info.dist_info.prob)


@pytest.mark.parametrize("T, B, minibatches", [(5, 6, 3), (7, 5, 4), (3, 3, 9)])
def test_feed_forward_minibatches_are_the_epoch_orders_split(T, B, minibatches):
    """Each epoch gathers its permutation once and trains on contiguous slices of it: the
    minibatches are the rows of ``order.tensor_split(minibatches)``, in that order, with
    their own sampled values for the value clip."""
    torch.manual_seed(0)
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent, T=T, B=B, p_done=0.2)
    algo = PPO(learning_rate=0.0, minibatches=minibatches, epochs=2, value_clip=0.2)
    algo.initialize(agent, n_itr=1, batch_spec=BatchSpec(T, B), mid_batch_reset=True)
    generator = torch.Generator()
    generator.set_state(algo._generator.get_state())
    seen = []
    loss = algo._loss_fn  # (the loss each gradient step calls)
    algo._loss_fn = lambda *args, **kwargs: seen.append((args[0], kwargs)) or loss(*args, **kwargs)
    algo.optimize_agent(0, samples)
    observation = samples.env.observation.flatten(0, 1)
    old_value = samples.agent.agent_info.value.flatten(0, 1)
    expected = [
        idxs
        for _ in range(2)
        for idxs in torch.randperm(T * B, generator=generator).tensor_split(minibatches)
    ]
    assert len(seen) == len(expected)
    for (agent_inputs, kwargs), idxs in zip(seen, expected, strict=True):
        assert torch.equal(agent_inputs.observation, observation[idxs])
        assert torch.equal(kwargs["old_value"], old_value[idxs])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 200), parts=st.integers(1, 50))
def test_split_slices_size_as_tensor_split(n, parts):
    parts = min(parts, n)
    rows = torch.arange(n)
    pieces = [rows[where] for where in _split_slices(n, parts)]
    expected = rows.tensor_split(parts)
    assert len(pieces) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(pieces, expected, strict=True))


def test_obs_rms_is_updated_once_before_anything_else():
    events = []

    class NormalizingAgent(LinearAgent):
        def update_obs_rms(self, observation):
            events.append(("rms", observation.clone()))

        def forward(self, *args):
            events.append(("forward", None))
            return super().forward(*args)

    agent = NormalizingAgent(OBS, ACTIONS)
    samples = random_batch(agent)
    for algo in (A2C(), PPO(minibatches=2, epochs=2)):
        events.clear()
        algo.initialize(agent, n_itr=1, mid_batch_reset=True)
        algo.optimize_agent(0, samples)
        assert [e[0] for e in events] == ["rms"] + ["forward"] * (len(events) - 1)
        assert len(events) > 1 and torch.equal(events[0][1], samples.env.observation)


# ---------------------------------------------------------------- settings and errors


def test_rlpyt_defaults_and_attributes():
    a2c, ppo = A2C(), PPO()
    assert (a2c.discount, a2c.learning_rate, a2c.value_loss_coeff) == (0.99, 0.001, 0.5)
    assert (a2c.entropy_loss_coeff, a2c.clip_grad_norm, a2c.gae_lambda) == (0.01, 1.0, 1)
    assert a2c.OptimCls is torch.optim.Adam and not a2c.normalize_advantage
    assert a2c.optim_kwargs == {"fused": True}  # Adam's fused implementation unless told
    assert (
        A2C(optim_kwargs={}).optim_kwargs == {} and A2C(OptimCls=torch.optim.SGD).optim_kwargs == {}
    )
    assert (ppo.value_loss_coeff, ppo.minibatches, ppo.epochs, ppo.ratio_clip) == (1.0, 4, 4, 0.1)
    assert ppo.linear_lr_schedule and A2C.bootstrap_value and PPO.bootstrap_value
    assert isinstance(LinearAgent(OBS, ACTIONS), PgAgentLike)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"discount": 1.5}, "discount"),
        ({"gae_lambda": -0.1}, "gae_lambda"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"minibatches": 0}, "minibatches"),
        ({"epochs": 2.5}, "epochs"),
        ({"ratio_clip": -1}, "ratio_clip"),
        ({"clip_grad_norm": -1}, "clip_grad_norm"),
    ],
)
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PPO(**kwargs)


def test_bad_use_gives_clear_errors():
    with pytest.raises(RuntimeError, match="initialize"):
        A2C().optimize_agent(0, None)
    with pytest.raises(TypeError, match="distribution"):
        A2C().initialize(torch.nn.Linear(2, 2), n_itr=1)
    with pytest.raises(ValueError, match="n_itr"):
        A2C().initialize(LinearAgent(OBS, ACTIONS), n_itr=0)
    with pytest.raises(ValueError, match="minibatches=4 is more than the batch's B=3"):
        PPO().initialize(LstmAgent(OBS, ACTIONS), n_itr=1, batch_spec=BatchSpec(10, 3))
    agent = LinearAgent(OBS, ACTIONS)
    ppo = PPO(minibatches=64)
    ppo.initialize(agent, n_itr=1)
    with pytest.raises(ValueError, match="T\\*B=20"):
        ppo.optimize_agent(0, random_batch(agent, T=5, B=4))


def test_env_info_without_timeout_uses_the_plain_forms():
    agent, samples = hand_batch(timeout=False)
    assert isinstance(samples.env.env_info, NoTimeoutInfo)
    algo = A2C(discount=0.5)
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    plain = algo.process_returns(samples)
    with_timeouts = samples._replace(
        env=samples.env._replace(env_info=EnvInfo(torch.zeros(3, 2, dtype=torch.bool)))
    )
    for a, b in zip(plain, algo.process_returns(with_timeouts), strict=True):
        assert torch.equal(a, b)
    none_info = samples._replace(env=samples.env._replace(env_info=None))
    assert torch.equal(algo.process_returns(none_info)[0], plain[0])


def test_numpy_samples_are_accepted():
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent)
    algo = A2C()
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    expected = algo.loss(samples)[0]
    np_samples = numpify_buffer(samples)
    assert isinstance(np_samples.env.reward, np.ndarray)
    torch.testing.assert_close(algo.loss(np_samples)[0], expected)


def test_gradient_clipping_matches_torch():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 2)) for _ in range(3)]
    for max_norm in (0.5, 1e3, None):
        grads = [torch.randn(3, 2) * 2, torch.randn(3, 2), None]
        for param, grad in zip(params, grads, strict=True):
            param.grad = None if grad is None else grad.clone()
        norm = clip_grad_norm(params, max_norm)
        clipped = [None if p.grad is None else p.grad.clone() for p in params]
        for param, grad in zip(params, grads, strict=True):
            param.grad = None if grad is None else grad.clone()
        expected = torch.nn.utils.clip_grad_norm_(params, max_norm or math.inf)
        assert norm.item() == pytest.approx(expected.item())
        for mine, torchs in zip(clipped, [p.grad for p in params], strict=True):
            assert (mine is None and torchs is None) or torch.equal(mine, torchs)
