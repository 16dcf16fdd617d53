"""PPO and A2C learn a contextual bandit: the context is shown one-hot, the action that
matches it pays 1, every other pays 0; every step is a one-step episode."""

import pytest
import torch
from rl_algos_fakes import LinearAgent, make_samples

from rl_algos import A2C, PPO
from rl_arrays import BatchSpec

N = 4  # contexts = actions
T, B = 8, 16


def expected_reward(agent):
    """The policy's exact expected reward, averaged over the (uniform) contexts."""
    with torch.no_grad():
        dist_info, _ = agent(torch.eye(N), None, None)
    return dist_info.prob.diagonal().mean().item()


def bandit_batch(agent, generator):
    context = torch.randint(N, (T, B), generator=generator)
    observation = torch.nn.functional.one_hot(context, N).float()
    with torch.no_grad():
        dist_info, _ = agent(observation, None, None)
    action = agent.distribution.sample(dist_info, generator)
    reward = (action == context).float()
    done = torch.ones(T, B, dtype=torch.bool)
    return make_samples(agent, observation, reward, done, action=action)


@pytest.mark.parametrize(
    ("make_algo", "target"),
    [  # PPO takes 16 steps per batch, A2C one: each clears its target over several seeds
        (lambda: PPO(learning_rate=0.05, gae_lambda=0.95, normalize_advantage=True), 0.95),
        (lambda: A2C(learning_rate=0.05), 0.85),
    ],
    ids=["PPO", "A2C"],
)
def test_learns_a_contextual_bandit(make_algo, target):
    torch.manual_seed(0)
    algo = make_algo()
    generator = torch.Generator().manual_seed(1)
    agent = LinearAgent(N, N)
    n_itr = 40
    algo.initialize(agent, n_itr=n_itr, batch_spec=BatchSpec(T, B), mid_batch_reset=True)
    start = expected_reward(agent)
    for itr in range(n_itr):
        algo.optimize_agent(itr, bandit_batch(agent, generator))
    assert start < 0.35
    assert expected_reward(agent) > target
