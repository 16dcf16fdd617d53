"""PPO's rsl_rl options: adaptive learning rate, value clipping, per-minibatch advantage
normalisation, padded recurrent minibatches; and the trajectory padding functions."""

import copy
import io

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_algos_fakes import AgentInfoRnn, DistInfo, LinearAgent, LstmAgent, RnnState, make_samples
from rl_algos_fakes import random_batch as make_random_batch

from rl_algos import (
    A2C,
    PPO,
    LossInputs,
    PpoOptInfo,
    split_and_pad_trajectories,
    unpad_trajectories,
)
from rl_arrays import AgentInputs, AgentSamplesBsv, namedarraytuple

OBS, ACTIONS = 4, 3


def random_batch(agent, T=6, **kwargs):
    return make_random_batch(agent, T=T, **kwargs)


def save_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def params(agent):
    return [p.detach().clone() for p in agent.parameters()]


# ---------------------------------------------------------------- trajectories


def test_split_and_pad_by_hand():
    done = torch.tensor([[False, False], [True, False], [False, True], [False, False]])
    x = torch.arange(8.0).reshape(4, 2)  # x[t, b] = 2 t + b
    padded, masks = split_and_pad_trajectories(x, done)
    # env 0: steps 0-1, 2-3; env 1: steps 0-2, 3 (cut by the batch's end)
    expected = torch.tensor(
        [[0.0, 4.0, 1.0, 7.0], [2.0, 6.0, 3.0, 0.0], [0.0, 0.0, 5.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    )
    torch.testing.assert_close(padded, expected)
    expected_masks = torch.tensor(
        [[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.bool
    )
    assert torch.equal(masks, expected_masks)
    assert torch.equal(unpad_trajectories(padded, masks), x)


def test_a_done_in_the_last_row_starts_nothing_and_no_done_keeps_the_column():
    done = torch.tensor([[False, False], [False, False], [True, False]])
    x = torch.arange(6).reshape(3, 2)
    padded, masks = split_and_pad_trajectories(x, done)
    assert torch.equal(padded, x) and masks.all()


def test_split_and_pad_takes_trailing_dims_and_namedarraytuples():
    Pair = namedarraytuple("Pair", ["a", "b"])
    g = torch.Generator().manual_seed(0)
    T, B = 5, 3
    done = torch.rand(T, B, generator=g) < 0.4
    pair = Pair(torch.randn(T, B, 2, 3, generator=g), torch.randint(0, 9, (T, B), generator=g))
    padded, masks = split_and_pad_trajectories(pair, done)
    assert isinstance(padded, Pair)
    N = masks.shape[1]
    assert padded.a.shape == (T, N, 2, 3) and padded.b.shape == (T, N)
    assert (padded.a[~masks] == 0).all() and (padded.b[~masks] == 0).all()
    back = unpad_trajectories(padded, masks)
    assert torch.equal(back.a, pair.a) and torch.equal(back.b, pair.b)


@settings(max_examples=60, deadline=None)
@given(
    T=st.integers(1, 7),
    B=st.integers(1, 4),
    extra=st.lists(st.integers(1, 3), max_size=2),
    seed=st.integers(0, 2**31 - 1),
    p_done=st.floats(0, 1),
)
def test_split_and_pad_round_trip(T, B, extra, seed, p_done):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(T, B, generator=g) < p_done
    x = torch.randn(T, B, *extra, generator=g)
    padded, masks = split_and_pad_trajectories(x, done)
    N = B + int(done[:-1].sum())
    assert padded.shape == (T, N, *extra) and masks.shape == (T, N) and masks.dtype == torch.bool
    assert torch.equal(unpad_trajectories(padded, masks), x)
    assert (padded[~masks] == 0).all()
    lengths = masks.sum(0)
    assert (lengths >= 1).all() and int(lengths.sum()) == T * B
    assert torch.equal(masks, torch.arange(T).unsqueeze(1) < lengths)  # left-aligned
    # Each trajectory is a run of its column ending at a done or at the batch's end.
    n = 0
    for b in range(B):
        t = 0
        while t < T:
            length = int(lengths[n])
            assert torch.equal(padded[:length, n], x[t : t + length, b])
            end = t + length - 1
            assert bool(done[end, b]) or end == T - 1
            assert not done[t:end, b].any()
            t, n = end + 1, n + 1
    assert n == N


def test_unpad_refuses_masks_that_do_not_fill_whole_columns():
    with pytest.raises(ValueError, match="masks"):
        unpad_trajectories(torch.zeros(3, 2), torch.tensor([[1, 1], [1, 1], [0, 0]]).bool())


# ---------------------------------------------------------------- value clipping


class TableAgent(torch.nn.Module):
    """Feed-forward: one value parameter per step and a fixed uniform policy."""

    recurrent = False

    def __init__(self, values):
        super().__init__()
        self.value = torch.nn.Parameter(torch.tensor(values))
        self.distribution = LinearAgent(OBS, ACTIONS).distribution
        self.device = torch.device("cpu")

    def forward(self, observation, prev_action, prev_reward):
        prob = torch.full((*observation.shape[:-1], ACTIONS), 1.0 / ACTIONS)
        return DistInfo(prob=prob), self.value


def table_loss(algo, agent, return_, old_value, valid):
    n = len(return_)
    inputs = LossInputs(
        AgentInputs(torch.zeros(n, OBS), torch.zeros(n), torch.zeros(n)),
        torch.zeros(n, dtype=torch.long),
        torch.tensor(return_),
        torch.zeros(n),  # no advantage: the surrogate is 0
        torch.tensor(valid),
        DistInfo(prob=torch.full((n, ACTIONS), 1.0 / ACTIONS)),
    )
    agent.zero_grad()
    old = None if old_value is None else torch.tensor(old_value)
    loss = algo.loss(*inputs, old_value=old)[0]
    loss.backward()
    return loss.item(), agent.value.grad.clone()


@pytest.mark.parametrize("valid", [[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
def test_value_clip_loss_by_hand(valid):
    V, V_old, R = [1.0, 0.0, 2.0], [0.5, 0.5, 0.5], [1.2, 0.0, 0.0]
    agent = TableAgent(V)
    algo = PPO(value_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.0)
    algo.initialize(agent, n_itr=1)
    loss, grad = table_loss(algo, agent, R, V_old, valid)
    # Squared errors: unclipped 0.04, 0, 4; clipped values 0.7, 0.3, 0.7 give 0.25, 0.09, 0.49.
    largest = torch.tensor([0.25, 0.09, 4.0])
    w = torch.tensor(valid) / sum(valid)
    assert loss == pytest.approx(0.5 * 0.5 * float((largest * w).sum()))
    # Steps 0 and 1 take their clipped error, flat in V there; step 2 its unclipped one.
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, 0.5 * 2.0 * float(w[2])]))
    plain = PPO(value_loss_coeff=0.5, entropy_loss_coeff=0.0)
    plain.initialize(agent, n_itr=1)
    loss, grad = table_loss(plain, agent, R, None, valid)
    unclipped = torch.tensor([0.04, 0.0, 4.0])
    assert loss == pytest.approx(0.5 * 0.5 * float((unclipped * w).sum()))
    torch.testing.assert_close(grad, 0.5 * torch.tensor([-0.2, 0.0, 2.0]) * w)


def test_value_clip_uses_the_sampled_values():
    torch.manual_seed(0)
    agent = LinearAgent(OBS, ACTIONS)
    samples = random_batch(agent)
    samples.agent.agent_info.value[:] += 0.5  # sampled values away from the current ones
    algo = PPO(value_clip=0.1, minibatches=1, epochs=1, linear_lr_schedule=False)
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    return_, advantage, valid = algo.process_returns(samples)
    inputs = LossInputs(
        AgentInputs(samples.env.observation, samples.agent.prev_action, samples.env.prev_reward),
        samples.agent.action,
        return_,
        advantage,
        valid,
        samples.agent.agent_info.dist_info,
    )
    expected = algo.loss(*inputs, old_value=samples.agent.agent_info.value)[0].item()
    assert expected != pytest.approx(algo.loss(*inputs, old_value=return_)[0].item())
    with pytest.raises(ValueError, match="old_value"):
        algo.loss(*inputs)
    assert algo.optimize_agent(0, samples).loss[0] == pytest.approx(expected)


# ---------------------------------------------------------------- advantage per minibatch


def record_advantages(algo):
    seen = []
    loss = algo._loss_fn  # (the loss each gradient step calls)

    def recording(*args, **kwargs):
        seen.append((args[3].clone(), args[4].clone()))  # advantage, valid
        return loss(*args, **kwargs)

    algo._loss_fn = recording
    return seen


@pytest.mark.parametrize("recurrent", [False, True])
def test_minibatch_advantage_normalisation(recurrent):
    torch.manual_seed(0)
    agent = LstmAgent(OBS, ACTIONS) if recurrent else LinearAgent(OBS, ACTIONS)
    B = 6
    state = agent.random_state(B, torch.Generator()) if recurrent else None
    samples = random_batch(agent, T=8, B=B, p_done=0.15, prev_rnn_state0=state, timeout=True)
    algo = PPO(normalize_advantage="minibatch", minibatches=3, epochs=2, gae_lambda=0.9)
    algo.initialize(agent, n_itr=2, mid_batch_reset=False)
    raw = algo.process_returns(samples)[1]
    whole = PPO(gae_lambda=0.9)
    whole.initialize(agent, n_itr=1, mid_batch_reset=False)
    assert torch.equal(raw, whole.process_returns(samples)[1])  # not normalised over the batch
    seen = record_advantages(algo)
    algo.optimize_agent(0, samples)
    assert len(seen) == 6
    for advantage, valid in seen:
        selected = advantage[valid > 0]
        assert selected.numel() > 2
        assert abs(selected.mean().item()) < 1e-5
        assert selected.std().item() == pytest.approx(1.0, rel=1e-4)


def test_normalize_advantage_values_are_checked():
    assert PPO(normalize_advantage=1).normalize_advantage is True
    assert PPO(normalize_advantage="minibatch").normalize_advantage == "minibatch"
    for bad in ("batch", None, 2):
        with pytest.raises(ValueError, match="normalize_advantage"):
            PPO(normalize_advantage=bad)
    with pytest.raises(ValueError, match="normalize_advantage"):
        A2C(normalize_advantage="minibatch")  # A2C has one minibatch: the batch


# ---------------------------------------------------------------- adaptive learning rate


def kl_algo(desired_kl=0.01, learning_rate=1e-3):
    algo = PPO(desired_kl=desired_kl, learning_rate=learning_rate, linear_lr_schedule=False)
    algo.initialize(LinearAgent(OBS, ACTIONS), n_itr=1)
    return algo


def adapt(algo, new_prob, old_prob=(0.5, 0.5, 0.0)):
    old = DistInfo(prob=torch.tensor([old_prob]))
    new = DistInfo(prob=torch.tensor([new_prob]))
    algo._adapt_learning_rate(old, new, torch.ones(1))
    lrs = {group["lr"] for group in algo.optimizer.param_groups}
    assert len(lrs) == 1  # one rate for every group: a float32 tensor on the agent's device
    (lr,) = lrs
    assert isinstance(lr, torch.Tensor) and lr.dtype == torch.float32
    return float(lr)


def f32(x):
    """``x`` as the float32 learning rate holds it."""
    return pytest.approx(x, rel=1e-6)


def test_adaptive_learning_rate_by_hand():
    big = (0.9, 0.1, 0.0)  # KL(old || new) = 0.5 ln(5/9) + 0.5 ln 5 = 0.511
    small = (0.51, 0.49, 0.0)  # KL = 2.0e-4
    algo = kl_algo(desired_kl=0.01, learning_rate=1e-3)
    algo.optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})
    assert adapt(algo, big) == pytest.approx(1e-3 / 1.5)
    assert adapt(algo, small) == pytest.approx(1e-3)
    assert adapt(algo, small) == pytest.approx(1.5e-3)
    assert adapt(algo, (0.5, 0.5, 0.0)) == pytest.approx(1.5e-3)  # KL 0: nothing moved yet
    medium = kl_algo(desired_kl=0.3)  # 0.15 <= 0.511 <= 0.6: left alone
    assert adapt(medium, big) == f32(1e-3)
    low = kl_algo(learning_rate=1.2e-5)
    assert adapt(low, big) == f32(1e-5) and adapt(low, big) == f32(1e-5)  # floor
    high = kl_algo(learning_rate=9e-3)
    assert adapt(high, small) == f32(1e-2) and adapt(high, small) == f32(1e-2)  # ceiling


@pytest.mark.parametrize("optim_kwargs", [{"foreach": True}, {"fused": False}])
def test_adaptive_learning_rate_stays_a_float_for_an_optimizer_that_needs_one(optim_kwargs):
    """Adam with foreach and not capturable refuses a tensor learning rate: the rule then
    decides on the host, as before, with the same rates."""
    torch.manual_seed(0)
    agent = LinearAgent(OBS, ACTIONS)
    algo = PPO(
        desired_kl=1e-4, learning_rate=3e-3, linear_lr_schedule=False, optim_kwargs=optim_kwargs
    )
    algo.initialize(agent, n_itr=2, mid_batch_reset=True)
    lrs = algo.optimize_agent(0, random_batch(agent, T=8, B=6)).learningRate
    assert all(isinstance(lr, float) for lr in lrs) and len(set(lrs)) > 1
    assert algo.optimizer.param_groups[0]["lr"] == lrs[-1]


def test_adaptive_learning_rate_refusals():
    with pytest.raises(ValueError, match="desired_kl and linear_lr_schedule"):
        PPO(desired_kl=0.01)
    for bad in (0, -0.1, float("inf")):
        with pytest.raises(ValueError, match="desired_kl"):
            PPO(desired_kl=bad, linear_lr_schedule=False)


def test_adaptive_learning_rate_in_training_is_logged_and_restored():
    torch.manual_seed(0)
    agent = LinearAgent(OBS, ACTIONS)
    kwargs = dict(desired_kl=1e-4, learning_rate=3e-3, linear_lr_schedule=False, epochs=3)
    algo = PPO(**kwargs)
    algo.initialize(agent, n_itr=10, mid_batch_reset=True)
    opt_info = algo.optimize_agent(0, random_batch(agent, T=8, B=6))
    lrs, kls = opt_info.learningRate, opt_info.kl
    assert len(lrs) == 12 and all(isinstance(lr, float) for lr in lrs)
    previous = 3e-3
    for lr, kl in zip(lrs, kls, strict=True):  # the step's own KL set its learning rate
        if kl > 2e-4:
            previous = max(1e-5, previous / 1.5)
        elif 0 < kl < 5e-5:
            previous = min(1e-2, previous * 1.5)
        assert lr == pytest.approx(previous)
    assert lrs[-1] < 3e-3 and algo.optimizer.param_groups[0]["lr"] == lrs[-1]

    checkpoint = save_load({"agent": agent.state_dict(), "optim": algo.optim_state_dict()})
    next_batch = random_batch(agent, T=8, B=6, seed=1)
    info_a = algo.optimize_agent(1, next_batch)
    for resumed_kwargs in ({}, {"initial_optim_state_dict": checkpoint["optim"]}):
        agent_b = LinearAgent(OBS, ACTIONS)
        agent_b.load_state_dict(checkpoint["agent"])
        algo_b = PPO(**kwargs, **resumed_kwargs)
        algo_b.initialize(agent_b, n_itr=10, mid_batch_reset=True)
        if not resumed_kwargs:
            algo_b.load_optim_state_dict(checkpoint["optim"])
        assert algo_b.optimizer.param_groups[0]["lr"] == lrs[-1]
        assert algo_b.optimize_agent(1, next_batch) == info_a
        assert all(torch.equal(a, b) for a, b in zip(params(agent), params(agent_b), strict=True))


def test_adaptive_learning_rate_averages_the_kl_over_processes(monkeypatch):
    distributed = torch.distributed
    reduced = []

    def all_reduce(tensor):  # the other process saw KL 0.1
        reduced.append(tensor.item())
        tensor += 0.1

    monkeypatch.setattr(distributed, "is_available", lambda: True)
    monkeypatch.setattr(distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed, "get_world_size", lambda: 2)
    monkeypatch.setattr(distributed, "all_reduce", all_reduce)
    algo = kl_algo(desired_kl=0.2)
    # Alone, 0.511 > 2 * 0.2 would lower the rate; the mean (0.511 + 0.1) / 2 = 0.31 does not.
    assert adapt(algo, (0.9, 0.1, 0.0)) == f32(1e-3)
    assert reduced == [pytest.approx(0.5108, abs=1e-4)]


def _adapt_in_process(rank, store, results):
    distributed = torch.distributed
    distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        algo = kl_algo(desired_kl=0.2)
        big, same = (0.9, 0.1, 0.0), (0.5, 0.5, 0.0)
        # KLs 0.511 and 0: the mean 0.255 lies within [0.1, 0.4]; then 0.511 on both.
        first = adapt(algo, big if rank == 0 else same)
        results.put((rank, first, adapt(algo, big)))
    except Exception as error:  # reported to the test rather than lost in the worker
        results.put((rank, repr(error), None))
    finally:
        distributed.destroy_process_group()


def test_adaptive_learning_rate_agrees_across_real_processes(tmp_path):
    # fork: the per-package test session imports this module as tests.test_ppo_options, a
    # name a spawned child could not import.
    context = torch.multiprocessing.get_context("fork")
    results = context.Queue()
    store = tmp_path / "store"
    workers = [
        context.Process(target=_adapt_in_process, args=(rank, store, results)) for rank in (0, 1)
    ]
    for worker in workers:
        worker.start()
    got = sorted(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert got == [(0, f32(1e-3), f32(1e-3 / 1.5)), (1, f32(1e-3), f32(1e-3 / 1.5))]


def test_learning_rate_is_logged_with_the_linear_schedule_too():
    agent = LinearAgent(OBS, ACTIONS)
    algo = PPO(learning_rate=0.01, minibatches=2, epochs=2)
    algo.initialize(agent, n_itr=4, mid_batch_reset=True)
    assert "learningRate" in PPO.opt_info_fields == PpoOptInfo._fields
    for itr in range(2):
        opt_info = algo.optimize_agent(itr, random_batch(agent, seed=itr))
        assert opt_info.learningRate == [pytest.approx(0.01 * (4 - itr) / 4)] * 4


# ---------------------------------------------------------------- padded recurrent minibatches


def sampled_like_a_sampler(agent, T, B, p_done, seed, timeout=False, done=None):
    """A batch whose agent_info comes from stepping ``agent`` one step at a time, its state
    zeroed after each done (as the samplers' agents do), starting from a random state."""
    g = torch.Generator().manual_seed(seed)
    observation = torch.randn(T, B, OBS, generator=g)
    reward = torch.randn(T, B, generator=g)
    if done is None:
        done = torch.rand(T, B, generator=g) < p_done
    timeouts = done & (torch.rand(T, B, generator=g) < 0.5) if timeout else None
    state = agent.random_state(B, g)  # [B, N, H]
    probs, values, stored = [], [], []
    with torch.no_grad():
        for t in range(T):
            stored.append(state)
            init = RnnState(*(s.transpose(0, 1).contiguous() for s in state))
            dist_info, value, next_state = agent(observation[t : t + 1], None, None, init)
            probs.append(dist_info.prob[0])
            values.append(value[0])
            keep = (~done[t]).float().view(B, 1, 1)
            state = RnnState(*(s.transpose(0, 1) * keep for s in next_state))
    samples = make_samples(
        agent, observation, reward, done, timeout=timeouts, prev_rnn_state0=stored[0], seed=seed
    )
    prev_rnn_state = RnnState(*(torch.stack(parts) for parts in zip(*stored, strict=True)))
    agent_info = AgentInfoRnn(DistInfo(torch.stack(probs)), torch.stack(values), prev_rnn_state)
    a = samples.agent
    return samples._replace(
        agent=AgentSamplesBsv(a.action, a.prev_action, agent_info, a.bootstrap_value)
    )


def run_both(samples, make_agent, **kwargs):
    results = []
    for form in ("sequence", "padded"):
        torch.manual_seed(0)
        agent = make_agent()
        algo = PPO(recurrent_minibatch=form, **kwargs)
        algo.initialize(agent, n_itr=3, mid_batch_reset=True)
        infos = [algo.optimize_agent(itr, samples) for itr in range(2)]
        results.append((infos, params(agent)))
    return results


@pytest.mark.parametrize("last_row_done", [False, True])
def test_padded_equals_sequence_without_dones_mid_batch(last_row_done):
    torch.manual_seed(0)
    agent = LstmAgent(OBS, ACTIONS)
    samples = sampled_like_a_sampler(agent, T=6, B=6, p_done=0.0, seed=3)
    samples.env.done[-1] = last_row_done
    state = copy.deepcopy(agent.state_dict())

    def make_agent():
        fresh = LstmAgent(OBS, ACTIONS)
        fresh.load_state_dict(state)
        return fresh

    kwargs = dict(learning_rate=0.01, minibatches=3, epochs=2, gae_lambda=0.9, value_clip=0.2)
    (seq_infos, seq_params), (pad_infos, pad_params) = run_both(samples, make_agent, **kwargs)
    assert seq_infos == pad_infos
    assert all(torch.equal(a, b) for a, b in zip(seq_params, pad_params, strict=True))


def test_padded_feed_forward_is_unchanged():
    samples = random_batch(LinearAgent(OBS, ACTIONS), p_done=0.4)
    kwargs = dict(learning_rate=0.01, minibatches=2, epochs=2)
    (seq_infos, seq_params), (pad_infos, pad_params) = run_both(
        samples, lambda: LinearAgent(OBS, ACTIONS), **kwargs
    )
    assert seq_infos == pad_infos
    assert all(torch.equal(a, b) for a, b in zip(seq_params, pad_params, strict=True))


def test_padded_loss_and_gradient_equal_a_per_trajectory_computation():
    torch.manual_seed(0)
    T, B = 7, 4
    agent = LstmAgent(OBS, ACTIONS, hidden=5)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[[0, 2, 3, 5, 6], [0, 0, 1, 2, 3]] = True  # envs 0-2 restart mid-batch; env 0 at once
    done[1, 3] = done[4, 1] = True
    samples = sampled_like_a_sampler(agent, T, B, p_done=None, seed=1, timeout=True, done=done)
    assert samples.env.env_info.timeout[:-1].any()
    agent.load_state_dict({k: v + 0.1 for k, v in agent.state_dict().items()})  # policy moved
    algo = PPO(
        recurrent_minibatch="padded",
        minibatches=1,
        epochs=1,
        OptimCls=torch.optim.SGD,
        learning_rate=1.0,
        clip_grad_norm=None,
        ratio_clip=0.1,
        value_clip=0.05,
        gae_lambda=0.8,
        entropy_loss_coeff=0.01,
    )
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    return_, advantage, valid = algo.process_returns(samples)
    timeout = samples.env.env_info.timeout
    assert torch.equal(valid, (~timeout).float())  # steps after a done are trained on

    # By hand: each trajectory on its own, from its stored state (batch start) or from zeros.
    dist = agent.distribution
    stored = samples.agent.agent_info.prev_rnn_state
    terms, entropies = [], []
    for b in range(B):
        t = 0
        while t < T:
            end = t
            while not done[end, b] and end < T - 1:
                end += 1
            steps = slice(t, end + 1)
            if t == 0:
                init = RnnState(*(s[0, b].unsqueeze(1) for s in stored))
            else:
                init = RnnState(torch.zeros(2, 1, 5), torch.zeros(2, 1, 5))
                assert torch.equal(stored.h[t, b], torch.zeros(2, 5))  # what the sampler used
            obs = samples.env.observation[steps, b : b + 1]
            dist_info, value, _ = agent(obs, None, None, init)
            old = DistInfo(samples.agent.agent_info.dist_info.prob[steps, b : b + 1])
            ratio = dist.likelihood_ratio(samples.agent.action[steps, b : b + 1], old, dist_info)
            adv, ret = advantage[steps, b : b + 1], return_[steps, b : b + 1]
            old_value = samples.agent.agent_info.value[steps, b : b + 1]
            surrogate = torch.min(ratio * adv, ratio.clamp(0.9, 1.1) * adv)
            clipped = old_value + (value - old_value).clamp(-0.05, 0.05)
            value_loss = 0.5 * torch.max((value - ret) ** 2, (clipped - ret) ** 2)
            mask = valid[steps, b : b + 1] > 0
            terms.append((value_loss - surrogate)[mask])
            entropies.append(dist.entropy(dist_info)[mask])
            t = end + 1
    expected = torch.cat(terms).mean() - 0.01 * torch.cat(entropies).mean()
    agent.zero_grad()
    expected.backward()
    grads = [p.grad.clone() for p in agent.parameters()]
    before = params(agent)

    opt_info = algo.optimize_agent(0, samples)
    assert opt_info.loss[0] == pytest.approx(expected.item(), rel=1e-5)
    for g, a, b in zip(grads, before, params(agent), strict=True):  # SGD, lr 1: a - b = grad
        torch.testing.assert_close(a - b, g, rtol=1e-4, atol=1e-6)


def test_padded_minibatches_reproduce_the_sampler_and_cover_every_trajectory():
    torch.manual_seed(0)
    T, B = 8, 6
    agent = LstmAgent(OBS, ACTIONS)
    samples = sampled_like_a_sampler(agent, T, B, p_done=0.25, seed=2)
    _, masks = split_and_pad_trajectories(samples.env.reward, samples.env.done)
    calls = []
    forward = agent.forward
    agent.forward = lambda *args: calls.append(args[0].shape[1]) or forward(*args)
    # With lr = 0 every minibatch must reproduce the sampler's own step-by-step forward,
    # resets included: KL 0 and nothing clipped at every step.
    algo = PPO(learning_rate=0.0, minibatches=3, epochs=2, recurrent_minibatch="padded")
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    opt_info = algo.optimize_agent(0, samples)
    assert max(abs(kl) for kl in opt_info.kl) < 1e-6 and max(opt_info.clipFraction) == 0
    N = masks.shape[1]
    assert N > B and sum(calls[:3]) == N and sum(calls[3:]) == N
    # The sequence form on the same batch leaves out the steps after each env's first done.
    algo_seq = PPO(learning_rate=0.0, minibatches=3, epochs=2)
    algo_seq.initialize(agent, n_itr=1, mid_batch_reset=True)
    assert algo_seq.process_returns(samples)[2].sum() < T * B


def test_recurrent_minibatch_values_are_checked():
    assert PPO().recurrent_minibatch == "sequence"
    with pytest.raises(ValueError, match="recurrent_minibatch"):
        PPO(recurrent_minibatch="trajectories")
    with pytest.raises(ValueError, match="value_clip"):
        PPO(value_clip=-0.1)


def test_defaults_leave_the_options_off():
    ppo = PPO()
    assert ppo.desired_kl is None and ppo.value_clip is None
    assert ppo.normalize_advantage is False and ppo.recurrent_minibatch == "sequence"


def test_samples_are_not_modified():
    agent = LstmAgent(OBS, ACTIONS)
    samples = sampled_like_a_sampler(agent, 5, 4, p_done=0.3, seed=0)
    kept = copy.deepcopy(samples)
    algo = PPO(recurrent_minibatch="padded", normalize_advantage="minibatch", value_clip=0.1)
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    algo.optimize_agent(0, samples)
    assert torch.equal(samples.env.observation, kept.env.observation)
    assert torch.equal(samples.agent.agent_info.value, kept.agent.agent_info.value)
