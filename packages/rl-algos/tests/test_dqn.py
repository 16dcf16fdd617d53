"""DQN against hand-written loops, with a tiny agent written here (rl_agents is not a
dependency). test_cat_dqn and test_r2d1 import the agent and batch builders from here."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from rl_algos import DQN, DqnOptInfo, QAgentLike, huber_loss
from rl_arrays import (
    AgentInputs,
    AgentSamples,
    BatchSpec,
    EnvSamples,
    Samples,
    namedarraytuple,
    torchify_buffer,
)
from rl_replay import (
    PrioritizedReplayBuffer,
    SamplesFromReplay,
    SamplesFromReplayPri,
    SamplesFromReplayTL,
    SamplesToBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
)

EnvInfo = namedarraytuple("EnvInfo", ["timeout"])
GameInfo = namedarraytuple("GameInfo", ["game_score"])


class QAgent:
    """The DQN agent contract: online and target copies of ``model``."""

    recurrent = False

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.target_model = copy.deepcopy(model)
        self.device = torch.device("cpu")
        self.target_updates: list[float] = []
        self.epsilon_itr_min_max = None

    def __call__(self, observation, prev_action, prev_reward):
        return self.model(observation.float())

    def target(self, observation, prev_action, prev_reward):
        with torch.no_grad():
            return self.target_model(observation.float())

    def update_target(self, tau=1):
        self.target_updates.append(tau)
        with torch.no_grad():
            for target, online in zip(
                self.target_model.parameters(), self.model.parameters(), strict=True
            ):
                target.lerp_(online, tau)

    def set_epsilon_itr_min_max(self, itr_min, itr_max):
        self.epsilon_itr_min_max = (itr_min, itr_max)

    def parameters(self):
        return self.model.parameters()


def table_agent(q, target_q):
    """Q-values set by hand: observation s is one-hot, Q(s) = q[s], Q_target(s) = target_q[s]."""
    q, target_q = torch.tensor(q), torch.tensor(target_q)
    agent = QAgent(torch.nn.Linear(q.shape[0], q.shape[1], bias=False))
    with torch.no_grad():
        agent.model.weight.copy_(q.T)
        agent.target_model.weight.copy_(target_q.T)
    return agent


def examples(observation_shape=(2,), dtype=np.float32, env_info=None):
    return dict(
        observation=np.zeros(observation_shape, dtype),
        action=np.asarray(0, np.int64),
        reward=np.float32(0),
        done=np.bool_(False),
        env_info=EnvInfo(np.bool_(False)) if env_info is None else env_info,
        agent_info=None,
    )


def make_samples(observation, action, reward, done, timeout=None):
    T, B = reward.shape
    timeout = torch.zeros(T, B, dtype=torch.bool) if timeout is None else timeout
    return Samples(
        agent=AgentSamples(action=action, prev_action=torch.zeros_like(action), agent_info=None),
        env=EnvSamples(observation, reward, torch.zeros_like(reward), done, EnvInfo(timeout)),
    )


def indexed_samples(T, B, n_actions, seed=0, p_done=0.2):
    """Observations [t, b] (so a replayed transition says where it came from), random rest."""
    g = torch.Generator().manual_seed(seed)
    t, b = torch.meshgrid(torch.arange(T), torch.arange(B), indexing="ij")
    observation = torch.stack([t, b], dim=-1).float()
    action = torch.randint(n_actions, (T, B), generator=g)
    reward = torch.randn(T, B, generator=g)
    done = torch.rand(T, B, generator=g) < p_done
    return make_samples(observation, action, reward, done)


def one_hot(states, n=2):
    return torch.nn.functional.one_hot(torch.as_tensor(states), n).float()


def hand_batch(states, actions, returns, done_n, next_states, **extra):
    """A replayed batch of single transitions, with states given as indices."""
    fields = dict(
        agent_inputs=AgentInputs(
            one_hot(states), torch.zeros(len(states)), torch.zeros(len(states))
        ),
        action=torch.tensor(actions),
        return_=torch.tensor(returns),
        done=torch.tensor(done_n),
        done_n=torch.tensor(done_n),
        target_inputs=AgentInputs(
            one_hot(next_states), torch.zeros(len(states)), torch.zeros(len(states))
        ),
    )
    if "is_weights" in extra:
        return SamplesFromReplayPri(**fields, is_weights=torch.tensor(extra["is_weights"]))
    if "timeout_n" in extra:
        timeout_n = torch.tensor(extra["timeout_n"])
        return SamplesFromReplayTL(**fields, timeout=timeout_n, timeout_n=timeout_n)
    return SamplesFromReplay(**fields)


def initialized(algo, agent, T=4, B=2, example=None):
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(T, B), examples=example or examples())
    return algo


# ---------------------------------------------------------------- the TD target


@pytest.mark.parametrize("double_dqn", [False, True])
def test_n_step_target_matches_a_hand_loop(double_dqn):
    torch.manual_seed(0)
    T, B, A, n, discount = 12, 2, 3, 3, 0.9
    agent = QAgent(
        torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, A))
    )
    for p in agent.target_model.parameters():  # online and target nets disagree
        torch.nn.init.normal_(p)
    algo = DQN(
        discount=discount,
        n_step_return=n,
        delta_clip=None,
        double_dqn=double_dqn,
        batch_size=16,
        min_steps_learn=0,
    )
    initialized(algo, agent, T=T, B=B)
    samples = indexed_samples(T, B, A)
    algo.replay_buffer.append_samples(algo.samples_to_buffer(samples))
    batch = torchify_buffer(algo.replay_buffer.sample_batch(16))
    _, td_abs_errors = algo.loss(batch)

    obs, action = samples.env.observation, samples.agent.action
    reward, done = samples.env.reward, samples.env.done
    choice_differs = False
    for i, (t, b) in enumerate(batch.agent_inputs.observation.long().tolist()):
        return_, terminal = 0.0, False
        for k in range(n):
            return_ += discount**k * reward[t + k, b].item()
            if done[t + k, b]:
                terminal = True
                break
        with torch.no_grad():
            next_online = agent.model(obs[t + n, b])
            next_target = agent.target_model(obs[t + n, b])
            q = agent.model(obs[t, b])[action[t, b]].item()
        next_action = (next_online if double_dqn else next_target).argmax()
        choice_differs |= bool(next_online.argmax() != next_target.argmax())
        y = return_ + (0.0 if terminal else discount**n * next_target[next_action].item())
        assert td_abs_errors[i].item() == pytest.approx(abs(y - q), rel=1e-4, abs=1e-5)
    assert choice_differs  # the two rules were told apart


def test_double_dqn_picks_by_the_online_net_and_evaluates_by_the_target():
    # Next state 1: the online net prefers action 0, the target net action 1.
    agent = table_agent(q=[[0.0, 0.0], [5.0, 1.0]], target_q=[[0.0, 0.0], [2.0, 3.0]])
    batch = hand_batch([0], [0], [1.0], [False], [1])
    targets = {}
    for double_dqn in (False, True):
        algo = initialized(DQN(discount=0.5, double_dqn=double_dqn, delta_clip=None), agent)
        targets[double_dqn] = algo.loss(batch)[1].item()  # |y - Q(0, 0)| = y
    assert targets[False] == pytest.approx(1.0 + 0.5 * 3.0)  # max of the target net
    assert targets[True] == pytest.approx(1.0 + 0.5 * 2.0)  # target net at the online argmax


def test_done_n_stops_the_bootstrap():
    agent = table_agent(q=[[0.0, 0.0], [0.0, 0.0]], target_q=[[0.0, 0.0], [7.0, 7.0]])
    algo = initialized(DQN(discount=0.5, delta_clip=None), agent)
    _, errors = algo.loss(hand_batch([0, 0], [0, 1], [1.0, 1.0], [True, False], [1, 1]))
    assert errors.tolist() == pytest.approx([1.0, 1.0 + 0.5 * 7.0])


# ---------------------------------------------------------------- the loss


def test_huber_and_squared_error():
    delta = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0])
    assert huber_loss(delta, 1.0).tolist() == pytest.approx([2.5, 0.125, 0.0, 0.125, 2.5])
    assert huber_loss(delta, None).tolist() == pytest.approx([4.5, 0.125, 0.0, 0.125, 4.5])
    delta.requires_grad_()
    huber_loss(delta, 1.0).sum().backward()
    assert delta.grad.tolist() == pytest.approx([-1.0, -0.5, 0.0, 0.5, 1.0])  # bounded


@pytest.mark.parametrize("delta_clip", [None, 1.0])
def test_loss_is_the_mean_huber_loss_and_priorities_are_clipped(delta_clip):
    agent = table_agent(q=[[0.0, 0.5], [0.0, 0.0]], target_q=[[0.0, 0.0], [0.0, 0.0]])
    algo = initialized(DQN(delta_clip=delta_clip), agent)
    loss, errors = algo.loss(hand_batch([0, 0], [0, 1], [3.0, 0.75], [True, True], [1, 1]))
    deltas = torch.tensor([3.0, 0.25])
    assert loss.item() == pytest.approx(huber_loss(deltas, delta_clip).mean().item())
    expected = deltas if delta_clip is None else deltas.clamp(max=delta_clip)
    assert errors.tolist() == pytest.approx(expected.tolist())


def test_importance_weights_scale_each_transition():
    agent = table_agent(q=[[0.0, 0.0], [0.0, 0.0]], target_q=[[0.0, 0.0], [0.0, 0.0]])
    algo = initialized(DQN(delta_clip=None, prioritized_replay=True), agent)
    batch = hand_batch([0, 0], [0, 1], [2.0, 4.0], [True, True], [1, 1], is_weights=[0.5, 1.0])
    loss, _ = algo.loss(batch)
    assert loss.item() == pytest.approx((0.5 * 0.5 * 4 + 1.0 * 0.5 * 16) / 2)


def test_bootstrap_timelimit_leaves_truncated_transitions_out():
    agent = table_agent(q=[[0.0, 0.0], [0.0, 0.0]], target_q=[[0.0, 0.0], [1.0, 1.0]])
    algo = DQN(delta_clip=None, bootstrap_timelimit=True)
    initialized(algo, agent)
    assert type(algo.replay_buffer) is TlUniformReplayBuffer
    batch = hand_batch([0, 0], [0, 1], [2.0, 4.0], [True, False], [1, 1], timeout_n=[True, False])
    loss, errors = algo.loss(batch)
    y = 4.0 + 0.99 * 1.0  # the untruncated transition bootstraps as usual
    assert loss.item() == pytest.approx(0.5 * y**2)
    assert errors.tolist() == pytest.approx([0.0, y])


def test_bootstrap_timelimit_reads_the_timeout_from_env_info():
    agent = QAgent(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"env_info\.timeout"):
        initialized(DQN(bootstrap_timelimit=True), agent, example=examples(env_info=GameInfo(0)))
    algo = initialized(DQN(bootstrap_timelimit=True, min_steps_learn=0, batch_size=4), agent)
    samples = indexed_samples(4, 2, 2, p_done=0.5)
    samples.env.env_info.timeout[:] = samples.env.done
    algo.optimize_agent(0, samples)
    np.testing.assert_array_equal(algo.replay_buffer.samples.timeout[:4], samples.env.done)


# ---------------------------------------------------------------- the schedule


def test_updates_per_optimize_and_no_learning_before_min_itr_learn():
    agent = QAgent(torch.nn.Linear(2, 2))
    # 8 * (4 * 2) / 16 = 4 updates per iteration; learning starts at 24 // 8 = 3.
    algo = DQN(replay_ratio=8, batch_size=16, min_steps_learn=24, eps_steps=80)
    initialized(algo, agent, T=4, B=2)
    assert (algo.updates_per_optimize, algo.min_itr_learn, algo.sampler_bs) == (4, 3, 8)
    assert agent.epsilon_itr_min_max == (3, 10)
    for itr in range(6):
        opt_info = algo.optimize_agent(itr, indexed_samples(4, 2, 2, seed=itr))
        assert isinstance(opt_info, DqnOptInfo)
        expected = 0 if itr < 3 else 4
        assert all(len(values) == expected for values in opt_info)
        assert algo.update_counter == 4 * max(0, itr - 2)
    assert algo.batch_size == 16 and algo.replay_ratio == 8


def test_a_resume_without_the_replay_waits_for_min_steps_learn_new_steps():
    """Resumed at iteration 10 with an empty replay: no update until 3 iterations (24 steps)
    have filled it, as at the start of a run (it used to draw from the empty buffer)."""
    agent = QAgent(torch.nn.Linear(2, 2))
    algo = DQN(replay_ratio=8, batch_size=16, min_steps_learn=24, eps_steps=80)
    initialized(algo, agent, T=4, B=2)
    algo.replay_started_empty(10)
    counts = [
        len(algo.optimize_agent(itr, indexed_samples(4, 2, 2, seed=itr)).loss)
        for itr in range(10, 15)
    ]
    assert counts == [0, 0, 0, 4, 4]


def test_replay_ratio_rounds_and_gives_at_least_one_update():
    agent = QAgent(torch.nn.Linear(2, 2))
    assert initialized(DQN(replay_ratio=1, batch_size=32), agent).updates_per_optimize == 1
    assert initialized(DQN(replay_ratio=5, batch_size=8), agent).updates_per_optimize == 5


@pytest.mark.parametrize("tau", [1, 0.25])
def test_target_updates_every_target_update_interval_updates(tau):
    agent = QAgent(torch.nn.Linear(2, 2))
    algo = DQN(
        replay_ratio=3,
        batch_size=8,
        min_steps_learn=8,
        target_update_interval=4,
        target_update_tau=tau,
    )
    initialized(algo, agent)  # 3 updates per iteration, learning from iteration 1
    for itr in range(5):
        algo.optimize_agent(itr, indexed_samples(4, 2, 2, seed=itr))
    assert algo.update_counter == 12
    assert agent.target_updates == [tau] * 3  # after updates 4, 8 and 12


# ---------------------------------------------------------------- batches drawn together


def drawing_dqn(**kwargs):
    """A DQN of 8 updates of 4 per iteration of 4 x 2 steps, learning from iteration 1."""
    torch.manual_seed(0)
    agent = QAgent(
        torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    )
    algo = DQN(replay_ratio=4, batch_size=4, min_steps_learn=8, learning_rate=0.01, **kwargs)
    algo = initialized(algo, agent)
    draws = []
    sample_batches = algo.replay_buffer.sample_batches

    def counted(batch_B, n_batches):
        draws.append(n_batches)
        return sample_batches(batch_B, n_batches)

    algo.replay_buffer.sample_batches = counted
    return algo, agent, draws


def test_batches_are_drawn_together_up_to_each_target_update():
    algo, agent, draws = drawing_dqn(target_update_interval=3)
    assert algo.updates_per_optimize == 8
    for itr in range(3):
        algo.optimize_agent(itr, indexed_samples(4, 2, 2, seed=itr))
    # Updates 1-3, 4-6, 7-8 | 9, 10-12, 13-15, 16: the targets of a draw need one target net.
    assert draws == [3, 3, 2, 1, 3, 3, 1]
    assert len(agent.target_updates) == 16 // 3


def test_double_dqn_draws_all_batches_at_once(monkeypatch):
    algo, _, draws = drawing_dqn(target_update_interval=3, double_dqn=True)
    algo.optimize_agent(1, indexed_samples(4, 2, 2))
    assert draws == [8]  # the online net chooses a': nothing to compute ahead
    monkeypatch.setattr("rl_algos._replay_updates._DRAW_BYTES", 3 * 4 * (2 * 8))
    algo.optimize_agent(2, indexed_samples(4, 2, 2, seed=1))
    assert draws == [8, 3, 3, 2]  # 3 batches of 4 observations and next ones (8 bytes each)


@pytest.mark.parametrize("bootstrap_timelimit", [False, True])
@pytest.mark.parametrize("interval", [3, 8])
def test_targets_computed_per_draw_train_as_computed_per_update(interval, bootstrap_timelimit):
    runs = []
    for ahead in (True, False):
        algo, agent, _ = drawing_dqn(
            target_update_interval=interval,
            bootstrap_timelimit=bootstrap_timelimit,
            n_step_return=2,
        )
        if not ahead:  # the same draws, each batch's targets computed in its update
            algo._prepare_draw = lambda draw, batch_B: draw
        losses = []
        for itr in range(4):
            samples = indexed_samples(4, 2, 2, seed=itr)
            samples.env.env_info.timeout[:] = samples.env.done
            losses += algo.optimize_agent(itr, samples).loss
        runs.append((losses, [p.detach().clone() for p in agent.model.parameters()]))
    (losses, params), (losses_ref, params_ref) = runs
    assert len(losses) == 24 and losses == pytest.approx(losses_ref, rel=1e-5)
    for param, param_ref in zip(params, params_ref, strict=True):
        torch.testing.assert_close(param, param_ref)


def test_observation_bytes_counts_every_array_of_an_observation():
    from rl_algos._replay_feed import observation_bytes

    def buffer(observation):
        example = SamplesToBuffer(observation, np.int64(0), np.float32(0), np.bool_(False))
        return UniformReplayBuffer(example, size=8, B=1)

    Observation = namedarraytuple("Observation", ["image", "state", "unused"])
    image_and_state = Observation(np.zeros((2, 3), np.uint8), np.zeros(4, np.float32), None)
    assert observation_bytes(buffer(image_and_state)) == 6 + 16
    assert observation_bytes(buffer(np.float32(0))) == 4


# ---------------------------------------------------------------- prioritized replay


def test_priorities_follow_the_td_errors_and_beta_anneals():
    agent = QAgent(torch.nn.Linear(2, 2))
    algo = DQN(
        prioritized_replay=True,
        replay_ratio=2,
        batch_size=8,
        min_steps_learn=8,
        pri_alpha=0.5,
        pri_beta_init=0.4,
        pri_beta_final=1.0,
        pri_beta_steps=5 * 8,
        delta_clip=0.5,
    )
    initialized(algo, agent)
    buffer = algo.replay_buffer
    assert type(buffer) is PrioritizedReplayBuffer
    assert algo.default_priority == 0.5  # new samples enter at the largest clipped error
    updates = []
    original = buffer.update_batch_priorities
    buffer.update_batch_priorities = lambda p: (updates.append(np.array(p)), original(p))[1]
    losses = []
    original_loss = algo.loss
    algo.loss = lambda batch: (losses.append(original_loss(batch)), losses[-1])[1]
    betas = []
    for itr in range(7):
        algo.optimize_agent(itr, indexed_samples(4, 2, 2, seed=itr))
        betas.append(buffer.priorities.beta)
    assert len(updates) == len(losses) == 2 * 6
    for given, (_, errors) in zip(updates, losses, strict=True):
        np.testing.assert_allclose(given, errors.clamp(min=1e-6).numpy(), rtol=1e-6)
        assert given.max() <= 0.5
    # The last update set its batch's leaves to |TD| ** alpha.
    tree = buffer.priorities.tree
    leaves = tree.leaf_priorities().reshape(-1)[tree._sampled_leaves]
    np.testing.assert_allclose(leaves, updates[-1] ** 0.5, rtol=1e-6)
    # beta: pri_beta_init at min_itr_learn (1), pri_beta_final at pri_beta_steps (itr 5).
    assert betas[0] == 0.4
    assert betas[1:] == pytest.approx([0.4, 0.55, 0.7, 0.85, 1.0, 1.0])


# ---------------------------------------------------------------- learning


TWO_STATE_Q = [[0.5, 0.9], [1.0, 0.0]]  # Q* of two_state_batches with discount 0.9


def two_state_batches(T, B, seed=0):
    """Batches of a two-state problem under a uniformly random policy (resets at once).

    State 0: action 0 ends with reward 0.5, action 1 moves to state 1 with reward 0.
    State 1: action 0 ends with reward 1, action 1 ends with 0. With discount 0.9,
    Q*(0) = [0.5, 0.9] and Q*(1) = [1, 0]: the greedy action in state 0 needs the bootstrap.
    """
    rng = np.random.default_rng(seed)
    state = np.zeros(B, np.int64)
    while True:
        states, actions = np.zeros((T, B), np.int64), rng.integers(2, size=(T, B))
        rewards, dones = np.zeros((T, B), np.float32), np.zeros((T, B), bool)
        for t in range(T):
            states[t], a = state, actions[t]
            rewards[t] = np.where(state == 0, 0.5 * (a == 0), 1.0 * (a == 0))
            dones[t] = (state == 1) | (a == 0)
            state = np.where(dones[t], 0, 1)
        yield make_samples(
            one_hot(states),
            torch.from_numpy(actions),
            torch.from_numpy(rewards),
            torch.from_numpy(dones),
        )


def test_learns_a_two_state_problem():
    torch.manual_seed(0)
    T, B = 8, 4
    agent = QAgent(
        torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    )
    algo = DQN(
        discount=0.9,
        batch_size=32,
        min_steps_learn=64,
        replay_ratio=8,
        target_update_interval=20,
        learning_rate=0.01,
        replay_size=1000,
        double_dqn=True,
    )
    initialized(algo, agent, T=T, B=B)
    for itr, samples in zip(range(60), two_state_batches(T, B), strict=False):
        algo.optimize_agent(itr, samples)
    with torch.no_grad():
        q = agent.model(torch.eye(2))
    np.testing.assert_allclose(q.numpy(), TWO_STATE_Q, atol=0.05)


# ---------------------------------------------------------------- state


def test_optim_state_dict_and_replay_round_trip_resume_exactly(tmp_path):
    torch.manual_seed(0)

    def make():
        return DQN(
            prioritized_replay=True,
            replay_ratio=4,
            batch_size=8,
            min_steps_learn=8,
            pri_beta_steps=40,
            target_update_interval=3,
        )

    agent = QAgent(torch.nn.Linear(2, 3))
    algo = initialized(make(), agent)
    for itr in range(3):
        algo.optimize_agent(itr, indexed_samples(4, 2, 3, seed=itr))
    path = tmp_path / "state.pt"
    torch.save(algo.optim_state_dict(), path)
    algo.save_replay(tmp_path / "replay.npz")
    saved_agent = copy.deepcopy(agent)

    resumed = initialized(make(), saved_agent)
    resumed.load_optim_state_dict(torch.load(path, weights_only=True))
    resumed.load_replay(tmp_path / "replay.npz")
    assert resumed.update_counter == algo.update_counter == 8
    assert resumed.replay_buffer.priorities.beta == algo.replay_buffer.priorities.beta > 0.4
    for itr in range(3, 5):
        samples = indexed_samples(4, 2, 3, seed=itr)
        a, b = algo.optimize_agent(itr, samples), resumed.optimize_agent(itr, samples)
        assert a == b
    for p, q in zip(agent.parameters(), saved_agent.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert agent.target_updates == saved_agent.target_updates


def test_optim_state_dict_is_a_copy_and_a_bare_optimizer_state_loads():
    agent = QAgent(torch.nn.Linear(2, 2))
    algo = initialized(DQN(min_steps_learn=8, batch_size=8), agent)
    for itr in range(3):
        algo.optimize_agent(itr, indexed_samples(4, 2, 2, seed=itr))
    state = algo.optim_state_dict()
    step = state["optimizer"]["state"][0]["step"].clone()
    algo.optimize_agent(3, indexed_samples(4, 2, 2, seed=3))
    assert torch.equal(state["optimizer"]["state"][0]["step"], step)
    algo.load_optim_state_dict(state["optimizer"])  # rlpyt's form
    assert algo.update_counter > state["update_counter"]
    with pytest.raises(ValueError, match="update_counter"):
        algo.load_optim_state_dict({"optimizer": state["optimizer"]})


def test_frame_buffer_stores_frames_once():
    agent = QAgent(torch.nn.Sequential(torch.nn.Flatten(-3), torch.nn.Linear(4 * 3 * 3, 2)))
    algo = DQN(frame_buffer=True, min_steps_learn=8, batch_size=4)
    initialized(algo, agent, example=examples((4, 3, 3), np.uint8))
    assert type(algo.replay_buffer) is UniformReplayFrameBuffer
    T, B = 4, 2
    frames = torch.randint(256, (2 * T + 3, B, 3, 3), dtype=torch.uint8)
    for itr in range(2):  # each observation is the 4 latest frames of one stream
        first = itr * T
        observation = torch.stack(
            [frames[first + t : first + t + 4].transpose(0, 1) for t in range(T)]
        )
        action = torch.zeros(T, B, dtype=torch.long)
        done = torch.zeros(T, B, dtype=torch.bool)
        opt_info = algo.optimize_agent(
            itr, make_samples(observation, action, torch.ones(T, B), done)
        )
    assert len(opt_info.loss) == algo.updates_per_optimize
    assert algo.replay_buffer.samples_frames.shape[0] == algo.replay_buffer.T + 3


@pytest.mark.parametrize(
    "kwargs, shape, dtype, frames",
    [
        ({}, (4, 3, 3), np.uint8, True),  # stacked frames: once each, as rlpyt
        ({}, (1, 3, 3), np.uint8, False),  # one frame: nothing to save
        ({}, (2,), np.float32, False),  # vectors unaffected
        ({"frame_buffer": False}, (4, 3, 3), np.uint8, False),  # an explicit choice wins
        ({"bootstrap_timelimit": True}, (4, 3, 3), np.uint8, False),  # (no Tl frame buffer)
    ],
)
def test_frame_buffer_by_default_for_stacked_frames(kwargs, shape, dtype, frames):
    agent = QAgent(
        torch.nn.Sequential(torch.nn.Flatten(-len(shape)), torch.nn.Linear(math.prod(shape), 2))
    )
    algo = initialized(
        DQN(min_steps_learn=8, batch_size=4, **kwargs), agent, example=examples(shape, dtype)
    )
    assert algo.frame_buffer is frames
    assert isinstance(algo.replay_buffer, UniformReplayFrameBuffer) is frames


def test_a_replay_that_cannot_fit_is_refused_naming_replay_size(monkeypatch):
    monkeypatch.setattr("rl_arrays._memory.available_memory", lambda: 10**6)
    agent = QAgent(torch.nn.Sequential(torch.nn.Flatten(-3), torch.nn.Linear(4 * 3 * 3, 2)))
    with pytest.raises(MemoryError, match=r"replay_size=100000 .* size <= \d+ would fit"):
        initialized(
            DQN(replay_size=1e5, frame_buffer=False), agent, example=examples((4, 3, 3), np.uint8)
        )


# ---------------------------------------------------------------- settings and errors


def test_rlpyt_defaults():
    algo = DQN()
    assert (algo.discount, algo.batch_size, algo.min_steps_learn, algo.delta_clip) == (
        0.99,
        32,
        50000,
        1.0,
    )
    assert (algo.replay_size, algo.replay_ratio, algo.target_update_tau) == (int(1e6), 8, 1)
    assert (algo.target_update_interval, algo.n_step_return, algo.learning_rate) == (312, 1, 2.5e-4)
    assert (algo.clip_grad_norm, algo.eps_steps, algo.double_dqn) == (10.0, int(1e6), False)
    assert (algo.prioritized_replay, algo.pri_alpha, algo.pri_beta_init) == (False, 0.6, 0.4)
    assert (algo.pri_beta_final, algo.pri_beta_steps, algo.updates_per_sync) == (1.0, int(50e6), 1)
    assert algo.optim_kwargs == {"eps": 0.01 / 32, "fused": True}
    assert DQN(OptimCls=torch.optim.SGD).optim_kwargs == {}
    assert algo.opt_info_fields == ("loss", "gradNorm", "tdAbsErr") and not DQN.bootstrap_value
    assert isinstance(QAgent(torch.nn.Linear(2, 2)), QAgentLike)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"discount": 1.5}, "discount"),
        ({"batch_size": 0}, "batch_size"),
        ({"min_steps_learn": -1}, "min_steps_learn"),
        ({"delta_clip": 0}, "delta_clip"),
        ({"replay_size": 2.5}, "replay_size"),
        ({"replay_ratio": 0}, "replay_ratio"),
        ({"target_update_tau": 1.5}, "target_update_tau"),
        ({"target_update_tau": 0}, "target_update_tau"),
        ({"target_update_interval": 0}, "target_update_interval"),
        ({"n_step_return": 0}, "n_step_return"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"OptimCls": "adam"}, "OptimCls"),
        ({"optim_kwargs": [1]}, "optim_kwargs"),
        ({"clip_grad_norm": -1}, "clip_grad_norm"),
        ({"eps_steps": -1}, "eps_steps"),
        ({"pri_alpha": -0.1}, "pri_alpha"),
        ({"pri_beta_init": -1}, "pri_beta_init"),
        ({"pri_beta_steps": 0}, "pri_beta_steps"),
        ({"default_priority": 0}, "default_priority"),
        ({"ReplayBufferCls": 3}, "ReplayBufferCls"),
        ({"updates_per_sync": 0}, "updates_per_sync"),
        ({"frame_buffer": True, "bootstrap_timelimit": True}, "frame_buffer"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DQN(**kwargs)


def test_bad_use_gives_clear_errors():
    agent = QAgent(torch.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="initialize"):
        DQN().optimize_agent(0, None)
    with pytest.raises(TypeError, match="set_epsilon_itr_min_max"):
        DQN().initialize(
            torch.nn.Linear(2, 2), n_itr=1, batch_spec=BatchSpec(4, 2), examples=examples()
        )
    with pytest.raises(ValueError, match="examples"):
        DQN().initialize(agent, n_itr=1, batch_spec=BatchSpec(4, 2))
    with pytest.raises(ValueError, match="min_steps_learn at least 16"):
        initialized(DQN(min_steps_learn=0, batch_size=16), agent)
    algo = initialized(DQN(), agent)
    assert isinstance(algo.replay_buffer, UniformReplayBuffer)
