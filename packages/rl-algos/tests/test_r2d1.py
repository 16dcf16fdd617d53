"""R2D1 against hand-written loops, with a tiny LSTM agent written here: value rescaling,
burn-in, the sequence loss, sequence and input priorities."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_algos import (
    R2D1,
    R2d1AgentLike,
    R2d1OptInfo,
    inv_value_rescale,
    sequence_priorities,
    value_rescale,
)
from rl_arrays import AgentSamples, BatchSpec, EnvSamples, Samples, namedarraytuple
from rl_replay import (
    PrioritizedSequenceReplayBuffer,
    SequenceSamplesFromReplayPri,
    UniformSequenceReplayBuffer,
)

RnnState = namedarraytuple("RnnState", ["h", "c"])
AgentInfo = namedarraytuple("AgentInfo", ["q", "prev_rnn_state"])
EnvInfo = namedarraytuple("EnvInfo", ["timeout"])
OBS, A, H, N = 3, 2, 4, 1


class LstmQ(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(OBS, H, num_layers=N)
        self.head = torch.nn.Linear(H, A)

    def forward(self, observation, init_rnn_state):
        if init_rnn_state is None:
            zeros = torch.zeros(N, observation.shape[1], H)
            init_rnn_state = RnnState(zeros, zeros)
        out, (h, c) = self.lstm(observation.float(), tuple(init_rnn_state))
        return self.head(out), RnnState(h, c)


class R2d1Agent:
    """The R2D1 agent contract: [T, B] inputs, states [num_layers, B, H]."""

    def __init__(self):
        self.model = LstmQ()
        self.target_model = copy.deepcopy(self.model)
        with torch.no_grad():  # the target net ranks actions the other way round
            for p in self.target_model.head.parameters():
                p.neg_()
        self.device = torch.device("cpu")
        self.target_updates = 0

    def __call__(self, observation, prev_action, prev_reward, init_rnn_state):
        return self.model(observation, init_rnn_state)

    def target(self, observation, prev_action, prev_reward, init_rnn_state):
        with torch.no_grad():
            return self.target_model(observation, init_rnn_state)

    def update_target(self, tau=1):
        self.target_updates += 1
        self.target_model.load_state_dict(self.model.state_dict())

    def set_epsilon_itr_min_max(self, itr_min, itr_max):
        pass

    def parameters(self):
        return self.model.parameters()


def examples(with_q=True, with_state=True):
    state = RnnState(np.zeros((N, H), np.float32), np.zeros((N, H), np.float32))
    return dict(
        observation=np.zeros(OBS, np.float32),
        action=np.asarray(0, np.int64),
        reward=np.float32(0),
        done=np.bool_(False),
        env_info=EnvInfo(np.bool_(False)),
        agent_info=AgentInfo(
            q=np.zeros(A, np.float32) if with_q else None,
            prev_rnn_state=state if with_state else None,
        ),
    )


def rollout(agent, T, B, state=None, seed=0, p_done=0.15):
    """A [T, B] batch as a sampler records it: q and the state each step started from."""
    g = torch.Generator().manual_seed(seed)
    observation = torch.randn(T, B, OBS, generator=g)
    action = torch.randint(A, (T, B), generator=g)
    reward = torch.randn(T, B, generator=g)
    done = torch.rand(T, B, generator=g) < p_done
    if state is None:
        state = RnnState(torch.zeros(N, B, H), torch.zeros(N, B, H))
    qs, states = [], []
    with torch.no_grad():
        for t in range(T):
            states.append(RnnState(*(s.transpose(0, 1) for s in state)))  # [B, N, H]
            q, state = agent(observation[t : t + 1], None, None, state)
            qs.append(q[0])
    prev_rnn_state = RnnState(*(torch.stack(field) for field in zip(*states, strict=True)))
    samples = Samples(
        agent=AgentSamples(
            action, torch.zeros_like(action), AgentInfo(torch.stack(qs), prev_rnn_state)
        ),
        env=EnvSamples(
            observation, reward, torch.zeros_like(reward), done, EnvInfo(torch.zeros_like(done))
        ),
    )
    return samples, state


def small_r2d1(**kwargs):
    settings_ = dict(
        batch_T=2,
        batch_B=4,
        warmup_T=2,
        store_rnn_state_interval=2,
        n_step_return=1,
        min_steps_learn=16,
        replay_size=64,
        replay_ratio=2,
        target_update_interval=3,
    )
    return R2D1(**{**settings_, **kwargs})


# ---------------------------------------------------------------- value rescaling


@settings(max_examples=200, deadline=None)
@given(
    x=st.floats(-1e6, 1e6, allow_nan=False),
    eps=st.sampled_from([0.0, 1e-3, 1e-2]),
)
def test_value_rescale_then_its_inverse_gives_back_x(x, eps):
    x = torch.tensor(x, dtype=torch.float64)
    assert inv_value_rescale(value_rescale(x, eps), eps).item() == pytest.approx(
        x.item(), rel=1e-9, abs=1e-9
    )
    z = x / 1000  # and the other way round
    assert value_rescale(inv_value_rescale(z, eps), eps).item() == pytest.approx(
        z.item(), rel=1e-9, abs=1e-9
    )


def test_value_rescale_at_known_points():
    x = torch.tensor([0.0, 3.0, -8.0, 99.0], dtype=torch.float64)
    expected = [0.0, 1.0 + 3e-3, -2.0 - 8e-3, 9.0 + 99e-3]  # sqrt(|x| + 1) - 1 = 0, 1, 2, 9
    assert value_rescale(x, 1e-3).tolist() == pytest.approx(expected)
    assert value_rescale(x, 0.0).tolist() == pytest.approx([0.0, 1.0, -2.0, 9.0])
    assert inv_value_rescale(torch.tensor(expected, dtype=torch.float64), 1e-3).tolist() == (
        pytest.approx(x.tolist())
    )
    algo = R2D1(value_scale_eps=0.0)
    assert algo.value_scale(torch.tensor(3.0)).item() == 1.0
    assert algo.inv_value_scale(torch.tensor(1.0)).item() == 3.0


# ---------------------------------------------------------------- priorities


def test_sequence_priorities_mix_max_and_mean_over_valid_steps():
    td = torch.tensor([[1.0, 2.0], [3.0, 0.5], [2.0, 1.0]])
    valid = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    priorities = sequence_priorities(td * valid, valid, 0.9)
    assert priorities.tolist() == pytest.approx([0.9 * 3 + 0.1 * 2, 0.9 * 2 + 0.1 * 3.5 / 3])


def test_input_priorities_match_a_hand_loop_and_enter_the_buffer_shifted():
    torch.manual_seed(0)
    agent = R2d1Agent()
    algo = small_r2d1(n_step_return=2, discount=0.9, pri_eta=0.7, pri_alpha=0.5)
    T, B = 4, 2
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(T, B), examples=examples())
    samples, _ = rollout(agent, T, B, p_done=0.3, seed=3)
    assert samples.env.done.any()
    priorities = algo.compute_input_priorities(samples)

    q, action = samples.agent.agent_info.q, samples.agent.action
    reward, done = samples.env.reward, samples.env.done
    n, h, h_inv = 2, algo.value_scale, algo.inv_value_scale
    for b in range(B):
        errors = []
        for t in range(T - n):
            if done[:t, b].any():
                break  # after a done the batch holds another episode
            return_, terminal = 0.0, False
            for k in range(n):
                return_ += 0.9**k * reward[t + k, b].item()
                if done[t + k, b]:
                    terminal = True
                    break
            bootstrap = 0.0 if terminal else 0.9**n * h_inv(q[t + n, b].max()).item()
            y = h(torch.tensor(return_ + bootstrap)).item()
            errors.append(abs(y - q[t, b, action[t, b]].item()))
        expected = 0.7 * max(errors) + 0.3 * sum(errors) / len(errors)
        assert priorities[b] == pytest.approx(expected, rel=1e-5)

    algo.optimize_agent(0, samples)
    tree = algo.replay_buffer.priorities.tree
    # The batch's two stored states are rows 0 and 1; its priorities went one row earlier
    # (input_priority_shift = warmup_T // store_rnn_state_interval = 1), to rows -1 and 0.
    assert algo.input_priority_shift == 1
    np.testing.assert_allclose(tree.input_priorities[0], priorities**0.5, rtol=1e-6)
    np.testing.assert_allclose(tree.input_priorities[-1], priorities**0.5, rtol=1e-6)


# ---------------------------------------------------------------- the sequence loss


def hand_sequences(wT=2, bT=3, n=2, B=3, seed=0):
    """Column 0 ends an episode during warm-up, column 1 during training, column 2 never."""
    g = torch.Generator().manual_seed(seed)
    L = wT + bT
    done = torch.zeros(L, B, dtype=torch.bool)
    done[0, 0] = done[wT + 1, 1] = True
    done_n = done.clone()
    done_n[wT, 1] = True  # n = 2: the step before the done sees it too
    return SequenceSamplesFromReplayPri(
        all_observation=torch.randn(L + n, B, OBS, generator=g),
        all_action=torch.randint(A, (L + n, B), generator=g),
        all_reward=torch.randn(L + n, B, generator=g),
        return_=torch.randn(L, B, generator=g),
        done=done,
        done_n=done_n,
        init_rnn_state=RnnState(
            torch.randn(B, N, H, generator=g), torch.randn(B, N, H, generator=g)
        ),
        is_weights=torch.tensor([0.5, 1.0, 0.75]),
        action=torch.randint(A, (L, B), generator=g),  # the actions taken
    )


@pytest.mark.parametrize("double_dqn", [False, True])
def test_sequence_loss_matches_a_hand_loop(double_dqn):
    torch.manual_seed(0)
    agent = R2d1Agent()
    wT, bT, n, discount, eta = 2, 3, 2, 0.9, 0.8
    algo = R2D1(
        batch_T=bT,
        warmup_T=wT,
        n_step_return=n,
        discount=discount,
        pri_eta=eta,
        double_dqn=double_dqn,
        store_rnn_state_interval=1,
        min_steps_learn=40,
        batch_B=3,
        replay_size=1000,
    )
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(4, 3), examples=examples())
    batch = hand_sequences(wT, bT, n)
    loss, td_abs_errors, priorities = algo.loss(batch)

    obs = batch.all_observation
    init = RnnState(*(s.transpose(0, 1).contiguous() for s in batch.init_rnn_state))
    with torch.no_grad():
        _, state = agent.model(obs[:wT], init)
        _, target_state = agent.target_model(obs[:wT], init)
        # Column 0's episode ended in the warm-up: its training part starts from zeros.
        state = RnnState(*(s * torch.tensor([0.0, 1, 1]).view(1, 3, 1) for s in state))
        target_state = RnnState(
            *(s * torch.tensor([0.0, 1, 1]).view(1, 3, 1) for s in target_state)
        )
        qs, _ = agent.model(obs[wT:], state)
        target_qs, _ = agent.target_model(obs[wT:], target_state)
    h, h_inv = algo.value_scale, algo.inv_value_scale
    total, count, errors = 0.0, 0, [[] for _ in range(3)]
    for b in range(3):
        for t in range(bT):
            if batch.done[wT : wT + t, b].any():
                break  # the state ran on past a done
            taken = batch.action[wT + t, b]
            chooser = qs if double_dqn else target_qs
            bootstrap = target_qs[t + n, b, chooser[t + n, b].argmax()]
            not_done = 0.0 if batch.done_n[wT + t, b] else 1.0
            y = h(batch.return_[wT + t, b] + not_done * discount**n * h_inv(bootstrap))
            delta = (y - qs[t, b, taken]).item()
            total += batch.is_weights[b].item() * 0.5 * delta**2
            count += 1
            errors[b].append(abs(delta))
    assert loss.item() == pytest.approx(total / count, rel=1e-5)
    expected = [eta * max(e) + (1 - eta) * sum(e) / len(e) for e in errors]
    assert priorities.tolist() == pytest.approx(expected, rel=1e-5)
    assert td_abs_errors[2:, 1].tolist() == [0.0]  # after column 1's done
    assert len(errors[1]) == 2


def test_no_gradient_flows_from_the_warmup_and_only_batch_T_steps_count():
    torch.manual_seed(0)
    agent = R2d1Agent()
    wT, bT, n = 2, 3, 2
    algo = R2D1(
        batch_T=bT,
        warmup_T=wT,
        n_step_return=n,
        store_rnn_state_interval=1,
        batch_B=3,
        replay_size=1000,
    )
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(4, 3), examples=examples())
    batch = hand_sequences(wT, bT, n)
    batch.all_observation.requires_grad_()
    loss, _, _ = algo.loss(batch)
    loss.backward()
    grad = batch.all_observation.grad
    assert (grad[:wT] == 0).all()
    assert (grad[wT : wT + bT].abs().sum(dim=(0, 2)) > 0).all()
    assert (grad[wT + bT :] == 0).all()  # the bootstrap steps give targets only
    # Returns and done flags of warm-up steps are not in the loss.
    changed = batch._replace(all_observation=batch.all_observation.detach())
    changed.return_[:wT] += 100.0
    changed.done_n[:wT] = True
    torch.testing.assert_close(algo.loss(changed)[0], loss.detach())


# ---------------------------------------------------------------- training


@pytest.mark.parametrize("prioritized_replay", [True, False])
def test_training_runs_updates_priorities_and_targets(prioritized_replay):
    torch.manual_seed(0)
    agent = R2d1Agent()
    algo = small_r2d1(prioritized_replay=prioritized_replay)
    T, B = 4, 2
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(T, B), examples=examples())
    buffer_cls = (
        PrioritizedSequenceReplayBuffer if prioritized_replay else UniformSequenceReplayBuffer
    )
    assert type(algo.replay_buffer) is buffer_cls
    # (warmup_T + batch_T) * batch_B = 16 samples per update; 2 * 8 / 16 = 1 update per itr.
    assert (algo.batch_size, algo.updates_per_optimize, algo.min_itr_learn) == (16, 1, 2)
    given = []
    if prioritized_replay:
        original = algo.replay_buffer.update_batch_priorities
        algo.replay_buffer.update_batch_priorities = lambda p: (given.append(p), original(p))[1]
    state = None
    for itr in range(8):
        samples, state = rollout(agent, T, B, state, seed=itr)
        opt_info = algo.optimize_agent(itr, samples)
        assert isinstance(opt_info, R2d1OptInfo)
        assert all(len(values) == (itr >= 2) for values in opt_info)
    assert algo.update_counter == 6 and agent.target_updates == 2
    if prioritized_replay:
        assert len(given) == 6 and given[-1].shape == (4,)
        assert opt_info.priority == [pytest.approx(float(given[-1].mean()), rel=1e-5)]


def test_optim_state_dict_round_trip_resumes_exactly(tmp_path):
    torch.manual_seed(0)
    agent = R2d1Agent()
    # A state stored every step: rl-replay cannot yet reload the separately stored states
    # of store_rnn_state_interval > 1 when they are a namedtuple (h, c).
    algo = small_r2d1(store_rnn_state_interval=1)
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(4, 2), examples=examples())
    batches, state = [], None
    for itr in range(6):
        samples, state = rollout(agent, 4, 2, state, seed=itr)
        batches.append(samples)
    for itr in range(4):
        algo.optimize_agent(itr, batches[itr])
    torch.save(algo.optim_state_dict(), tmp_path / "algo.pt")
    algo.save_replay(tmp_path / "replay.npz")
    saved = copy.deepcopy(agent)
    resumed = small_r2d1(store_rnn_state_interval=1)
    resumed.initialize(saved, n_itr=10, batch_spec=BatchSpec(4, 2), examples=examples())
    resumed.load_optim_state_dict(torch.load(tmp_path / "algo.pt", weights_only=True))
    resumed.load_replay(tmp_path / "replay.npz")
    for itr in range(4, 6):
        assert algo.optimize_agent(itr, batches[itr]) == resumed.optimize_agent(itr, batches[itr])
    for p, q in zip(agent.parameters(), saved.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


# ---------------------------------------------------------------- settings and errors


def test_rlpyt_defaults():
    algo = R2D1()
    assert (algo.discount, algo.batch_T, algo.batch_B, algo.warmup_T) == (0.997, 80, 64, 40)
    assert (algo.store_rnn_state_interval, algo.min_steps_learn, algo.delta_clip) == (
        40,
        100000,
        None,
    )
    assert (algo.replay_size, algo.replay_ratio, algo.target_update_interval) == (int(1e6), 1, 2500)
    assert (algo.n_step_return, algo.learning_rate, algo.clip_grad_norm) == (5, 1e-4, 80.0)
    assert (algo.double_dqn, algo.prioritized_replay, algo.pri_alpha) == (True, True, 0.6)
    assert (algo.pri_beta_init, algo.pri_beta_final, algo.pri_eta) == (0.9, 0.9, 0.9)
    assert (algo.input_priorities, algo.input_priority_shift, algo.value_scale_eps) == (
        True,
        1,
        1e-3,
    )
    assert algo.default_priority == 1.0 and algo.batch_size == (80 + 40) * 64
    assert algo.optim_kwargs == {"eps": 1e-3, "fused": True}
    assert algo.opt_info_fields == ("loss", "gradNorm", "tdAbsErr", "priority")
    assert not R2D1(
        prioritized_replay=False
    ).input_priorities  # only a prioritized buffer takes them
    assert isinstance(R2d1Agent(), R2d1AgentLike)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"batch_T": 0}, "batch_T"),
        ({"batch_B": 1.5}, "batch_B"),
        ({"warmup_T": -1}, "warmup_T"),
        ({"store_rnn_state_interval": -1}, "store_rnn_state_interval"),
        ({"pri_eta": 1.5}, "pri_eta"),
        ({"value_scale_eps": -1e-3}, "value_scale_eps"),
        ({"input_priority_shift": -1}, "input_priority_shift"),
        ({"discount": -0.1}, "discount"),
        ({"target_update_interval": 0}, "target_update_interval"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        R2D1(**kwargs)


def test_bad_set_ups_are_refused_before_training():
    agent = R2d1Agent()

    def initialize(algo, T=4, example=None):
        algo.initialize(agent, n_itr=1, batch_spec=BatchSpec(T, 2), examples=example or examples())

    with pytest.raises(ValueError, match="store_rnn_state_interval=2 must divide"):
        initialize(small_r2d1(), T=3)
    with pytest.raises(ValueError, match=r"agent_info\.q"):
        initialize(small_r2d1(), example=examples(with_q=False))
    initialize(small_r2d1(input_priorities=False), example=examples(with_q=False))
    with pytest.raises(ValueError, match="prev_rnn_state"):
        initialize(small_r2d1(), example=examples(with_state=False))
    with pytest.raises(ValueError, match="longer than n_step_return=4"):
        initialize(small_r2d1(n_step_return=4, store_rnn_state_interval=4, warmup_T=4), T=4)
    with pytest.raises(ValueError, match="min_steps_learn"):
        initialize(small_r2d1(min_steps_learn=0))
    with pytest.raises(TypeError, match="R2d1AgentLike"):
        R2D1().initialize(
            torch.nn.LSTM(2, 2), n_itr=1, batch_spec=BatchSpec(40, 2), examples=examples()
        )
