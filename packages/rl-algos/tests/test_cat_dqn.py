"""CategoricalDQN: the C51 projection against hand-computed examples, the loss and its
priorities, and a small learning check (agents and batches from test_dqn)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dqn import (
    TWO_STATE_Q,
    QAgent,
    hand_batch,
    initialized,
    two_state_batches,
)

from rl_algos import CategoricalDQN, CatQAgentLike, categorical_projection


class CatAgent(QAgent):
    """``model`` outputs ``A * n_atoms`` logits; the agent returns probabilities."""

    def __init__(self, model, n_actions, n_atoms):
        super().__init__(model)
        self.shape = (n_actions, n_atoms)
        self.V_min_max = None

    def __call__(self, observation, prev_action, prev_reward):
        return self._probs(super().__call__(observation, prev_action, prev_reward))

    def target(self, observation, prev_action, prev_reward):
        return self._probs(super().target(observation, prev_action, prev_reward))

    def _probs(self, logits):
        return torch.softmax(logits.reshape(*logits.shape[:-1], *self.shape), dim=-1)

    def give_V_min_max(self, V_min, V_max):
        self.V_min_max = (V_min, V_max)


def table_cat_agent(probs, target_probs):
    """Distributions set by hand: ``probs[s][a]`` for one-hot state s (online and target)."""
    probs, target_probs = torch.tensor(probs), torch.tensor(target_probs)
    S, A, P = probs.shape
    agent = CatAgent(torch.nn.Linear(S, A * P, bias=False), A, P)
    with torch.no_grad():
        agent.model.weight.copy_(probs.log().reshape(S, A * P).T)
        agent.target_model.weight.copy_(target_probs.log().reshape(S, A * P).T)
    return agent


# ---------------------------------------------------------------- the projection


def test_projection_by_hand_three_atoms():
    # Atoms -1, 0, 1; target distribution 0.2, 0.3, 0.5; discount 0.5.
    probs = torch.tensor([[0.2, 0.3, 0.5]] * 3)
    return_ = torch.tensor([0.25, 0.9, 0.5])
    done_n = torch.tensor([False, False, True])
    projected = categorical_projection(probs, return_, done_n, 0.5, -1.0, 1.0)
    expected = [
        # 0.25 + 0.5 z lands at -0.25, 0.25, 0.75: each splits between its two neighbours.
        [0.2 * 0.25, 0.2 * 0.75 + 0.3 * 0.75 + 0.5 * 0.25, 0.3 * 0.25 + 0.5 * 0.75],
        # 0.9 + 0.5 z lands at 0.4, 0.9 and 1.4, which clips to V_max = 1.
        [0.0, 0.2 * 0.6 + 0.3 * 0.1, 0.2 * 0.4 + 0.3 * 0.9 + 0.5],
        # done: all the mass at the return, 0.5, halfway between atoms 0 and 1.
        [0.0, 0.5, 0.5],
    ]
    torch.testing.assert_close(projected, torch.tensor(expected))


def test_projection_by_hand_five_atoms():
    # Atoms -2, -1, 0, 1, 2; all the mass on atom 1; discount 1.
    probs = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]] * 3)
    projected = categorical_projection(
        probs, torch.tensor([0.5, -0.25, -5.0]), torch.tensor([False] * 3), 1.0, -2.0, 2.0
    )
    expected = [
        [0.0, 0.0, 0.0, 0.5, 0.5],  # 1.5: between atoms 1 and 2
        [0.0, 0.0, 0.25, 0.75, 0.0],  # 0.75: a quarter to atom 0
        [1.0, 0.0, 0.0, 0.0, 0.0],  # -4: clipped at V_min
    ]
    torch.testing.assert_close(projected, torch.tensor(expected))


@settings(max_examples=50, deadline=None)
@given(
    logits=st.lists(st.floats(-5, 5), min_size=7, max_size=7),
    return_=st.floats(-0.5, 0.5),
    discount=st.floats(0, 0.5),
)
def test_projection_keeps_the_mass_and_the_mean_inside_the_support(logits, return_, discount):
    probs = torch.softmax(torch.tensor(logits, dtype=torch.float64), dim=0)
    z = torch.linspace(-1, 1, 7, dtype=torch.float64)
    projected = categorical_projection(
        probs, torch.tensor(return_, dtype=torch.float64), torch.tensor(False), discount, -1, 1
    )
    assert (projected >= 0).all()
    assert projected.sum().item() == pytest.approx(1.0)
    # Nothing clips here, and splitting linearly between neighbours keeps the mean.
    assert (projected * z).sum().item() == pytest.approx(
        return_ + discount * (probs * z).sum().item()
    )


# ---------------------------------------------------------------- the loss


@pytest.mark.parametrize("double_dqn", [False, True])
def test_loss_is_the_cross_entropy_against_the_projected_target(double_dqn):
    # Next state 1: by expected value the online net prefers action 0, the target net action 1.
    eps = 1e-4
    online = [
        [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]],
        [[eps, eps, 1 - 2 * eps], [1 - 2 * eps, eps, eps]],
    ]
    target = [[[0.3, 0.4, 0.3], [0.3, 0.4, 0.3]], [[0.6, 0.4 - eps, eps], [eps, 0.2, 0.8 - eps]]]
    agent = table_cat_agent(online, target)
    algo = CategoricalDQN(V_min=-1, V_max=1, discount=0.5, double_dqn=double_dqn)
    initialized(algo, agent)
    assert agent.V_min_max == (-1, 1)
    batch = hand_batch([0, 0], [0, 1], [0.25, 0.0], [False, True], [1, 1])
    loss, kl = algo.loss(batch)

    target_ps = agent.target(batch.target_inputs.observation, None, None)
    chosen = 0 if double_dqn else 1
    target_p = categorical_projection(
        target_ps[:, chosen], batch.return_, batch.done_n, 0.5, -1.0, 1.0
    )
    p = agent(batch.agent_inputs.observation, None, None)[[0, 1], [0, 1]].detach()
    cross_entropy = -(target_p * p.log()).sum(-1)
    assert loss.item() == pytest.approx(cross_entropy.mean().item(), rel=1e-5)
    clamped = target_p.clamp(min=1e-6)
    expected_kl = (clamped * (clamped.log() - p.log())).sum(-1)
    torch.testing.assert_close(kl, expected_kl, rtol=1e-4, atol=1e-6)
    other = categorical_projection(
        target_ps[:, 1 - chosen], batch.return_, batch.done_n, 0.5, -1, 1
    )
    assert not torch.allclose(other[0], target_p[0])  # the two rules were told apart


def test_importance_weights_and_kl_priorities():
    probs = [[[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]], [[0.3, 0.3, 0.4], [0.1, 0.1, 0.8]]]
    agent = table_cat_agent(probs, probs)
    plain = initialized(CategoricalDQN(V_min=-1, V_max=1), agent)
    weighted = initialized(CategoricalDQN(V_min=-1, V_max=1, prioritized_replay=True), agent)
    batch = hand_batch([0, 1], [0, 1], [0.25, -0.5], [True, False], [1, 0])
    weights = torch.tensor([0.25, 1.0])
    batch_w = hand_batch(
        [0, 1], [0, 1], [0.25, -0.5], [True, False], [1, 0], is_weights=weights.tolist()
    )
    loss, kl = plain.loss(batch)
    loss_w, kl_w = weighted.loss(batch_w)
    torch.testing.assert_close(kl, kl_w)
    assert (kl > 0).all()
    # Per-transition cross-entropies, from batches of one.
    singles = [
        plain.loss(hand_batch([0], [0], [0.25], [True], [1]))[0],
        plain.loss(hand_batch([1], [1], [-0.5], [False], [0]))[0],
    ]
    assert loss.item() == pytest.approx((singles[0] + singles[1]).item() / 2, rel=1e-5)
    assert loss_w.item() == pytest.approx((0.25 * singles[0] + singles[1]).item() / 2, rel=1e-5)


def test_training_updates_priorities_with_the_kl():
    agent = CatAgent(torch.nn.Linear(2, 2 * 5), 2, 5)
    algo = CategoricalDQN(
        V_min=-1, V_max=1, prioritized_replay=True, min_steps_learn=8, batch_size=8, replay_ratio=1
    )
    initialized(algo, agent)
    given = []
    original = algo.replay_buffer.update_batch_priorities
    algo.replay_buffer.update_batch_priorities = lambda p: (given.append(p), original(p))[1]
    batches = two_state_batches(4, 2)
    for itr in range(3):
        opt_info = algo.optimize_agent(itr, next(batches))
    assert len(given) == 2 and given[-1].shape == (8,)
    assert opt_info.tdAbsErr == [pytest.approx(float(given[-1].mean()), rel=1e-5)]


# ---------------------------------------------------------------- learning


def test_learns_a_two_state_problem():
    torch.manual_seed(0)
    T, B, atoms = 8, 4, 21
    agent = CatAgent(
        torch.nn.Sequential(
            torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2 * atoms)
        ),
        2,
        atoms,
    )
    algo = CategoricalDQN(
        V_min=-0.5,
        V_max=1.5,
        discount=0.9,
        batch_size=32,
        min_steps_learn=64,
        replay_ratio=8,
        target_update_interval=20,
        learning_rate=0.01,
        replay_size=1000,
    )
    initialized(algo, agent, T=T, B=B)
    for itr, samples in zip(range(60), two_state_batches(T, B), strict=False):
        algo.optimize_agent(itr, samples)
    with torch.no_grad():
        q = (agent(torch.eye(2), None, None) * torch.linspace(-0.5, 1.5, atoms)).sum(-1)
    np.testing.assert_allclose(q.numpy(), TWO_STATE_Q, atol=0.05)


# ---------------------------------------------------------------- settings


def test_defaults_and_errors():
    algo = CategoricalDQN()
    assert (algo.V_min, algo.V_max) == (-10, 10)
    assert algo.optim_kwargs == {"eps": 0.01 / 32, "fused": True}
    assert isinstance(CatAgent(torch.nn.Linear(2, 6), 2, 3), CatQAgentLike)
    with pytest.raises(ValueError, match="V_max"):
        CategoricalDQN(V_min=1, V_max=1)
    with pytest.raises(ValueError, match="V_min"):
        CategoricalDQN(V_min=float("inf"))
    with pytest.raises(ValueError, match="n_step_return"):
        CategoricalDQN(n_step_return=0)
    with pytest.raises(TypeError, match="give_V_min_max"):
        initialized(CategoricalDQN(), QAgent(torch.nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="2 atoms"):
        categorical_projection(torch.ones(3, 1), torch.zeros(3), torch.zeros(3), 0.9, -1, 1)
