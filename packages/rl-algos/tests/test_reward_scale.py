"""Reward scaling by the running spread of the discounted return (``normalize_reward``)."""

import numpy as np
import pytest
import torch
from rl_algos_fakes import LinearAgent, random_batch

from rl_algos import A2C, PPO
from rl_algos._reward_scale import ReturnScaler


def reference_scaled(batches, discount, clip, epsilon=1e-8):
    """Step by step in numpy: the running returns, their variance over every one so far,
    and each batch scaled by the deviation after it."""
    seen, out, ret = [], [], None
    for reward, done in batches:
        ret = np.zeros(reward.shape[1]) if ret is None else ret
        for r, d in zip(reward, done, strict=True):
            ret = ret * discount + r
            seen.extend(ret)
            ret = ret * (1 - d)
        out.append(np.clip(reward / np.sqrt(np.var(seen) + epsilon), -clip, clip))
    return out


def test_scaled_rewards_follow_the_running_returns_across_batches():
    rng = np.random.default_rng(0)
    batches = [(rng.normal(3, 5, (7, 3)), rng.random((7, 3)) < 0.2) for _ in range(4)]
    scaler = ReturnScaler(discount=0.9, clip=0.5)
    got = [scaler(torch.tensor(r), torch.tensor(d)).numpy() for r, d in batches]
    for g, want in zip(got, reference_scaled(batches, 0.9, 0.5), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-10)
    assert np.abs(got[-1]).max() == 0.5  # clipped


def test_a_done_restarts_the_running_return():
    scaler = ReturnScaler(discount=1.0)
    reward = torch.ones(4, 1)
    scaler(reward, torch.tensor([[False], [True], [False], [False]]))
    assert scaler.running_return.tolist() == [2.0]  # 1 + 1 after the done at step 1


def test_state_round_trip_scales_the_next_batch_identically():
    rng = np.random.default_rng(1)
    first, second = ((torch.tensor(rng.normal(0, 3, (5, 2))), torch.zeros(5, 2)) for _ in "ab")
    scaler = ReturnScaler(discount=0.99)
    scaler(*first)
    restored = ReturnScaler(discount=0.99)
    restored.load_state_dict(torch.load(_saved(scaler.state_dict()), weights_only=True))
    assert torch.equal(restored(*second), scaler(*second))


def _saved(state):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("Algo", [A2C, PPO])
def test_algorithms_learn_from_scaled_rewards_only_when_asked(Algo):
    seen = {}

    class Spy(Algo):
        def process_returns(self, samples):
            seen[self.normalize_reward] = samples.env.reward.clone()
            return super().process_returns(samples)

    agent = LinearAgent(4, 3)
    samples = random_batch(agent)
    samples.env.reward[:] *= 1000.0
    for normalize in (False, True):
        algo = Spy(normalize_reward=normalize)
        algo.initialize(agent, n_itr=1, mid_batch_reset=True)
        algo.optimize_agent(0, samples)
    assert torch.equal(seen[False], samples.env.reward)
    assert seen[True].abs().max() < 10.0 < samples.env.reward.abs().max()
    assert "reward_scaler" in algo.optim_state_dict()


def test_reward_clip_must_be_positive():
    with pytest.raises(ValueError, match="reward_clip"):
        PPO(normalize_reward=True, reward_clip=-1.0)
