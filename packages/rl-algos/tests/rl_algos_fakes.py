"""Tiny agents that meet the rl-algos agent contract, and batches built by hand.

rl_agents is not a dependency of rl-algos, so the tests bring their own: a linear categorical
policy with a value head, and an LSTM one whose state follows the contract's layout
(``[N, B, H]`` for the model, ``[T, B, N, H]`` in ``agent_info.prev_rnn_state``).
"""

from __future__ import annotations

import torch

from rl_arrays import AgentSamplesBsv, EnvSamples, Samples, namedarraytuple, valid_mean

DistInfo = namedarraytuple("DistInfo", ["prob"])
AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])
AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["dist_info", "value", "prev_rnn_state"])
RnnState = namedarraytuple("RnnState", ["h", "c"])
EnvInfo = namedarraytuple("EnvInfo", ["timeout"])
NoTimeoutInfo = namedarraytuple("NoTimeoutInfo", ["game_score"])

EPS = 1e-8


class Categorical:
    """A categorical distribution over ``dim`` actions, parameterised by ``DistInfo(prob)``."""

    def __init__(self, dim: int):
        self.dim = dim

    def log_likelihood(self, x, dist_info):
        prob = dist_info.prob.gather(-1, x.long().unsqueeze(-1)).squeeze(-1)
        return torch.log(prob + EPS)

    def likelihood_ratio(self, x, old_dist_info, new_dist_info):
        pick = x.long().unsqueeze(-1)
        new = new_dist_info.prob.gather(-1, pick).squeeze(-1)
        old = old_dist_info.prob.gather(-1, pick).squeeze(-1)
        return (new + EPS) / (old + EPS)

    def entropy(self, dist_info):
        p = dist_info.prob
        return -(p * torch.log(p + EPS)).sum(-1)

    def perplexity(self, dist_info):
        return torch.exp(self.entropy(dist_info))

    def kl(self, old_dist_info, new_dist_info):
        p, q = old_dist_info.prob, new_dist_info.prob
        return (p * (torch.log(p + EPS) - torch.log(q + EPS))).sum(-1)

    def mean_kl(self, old_dist_info, new_dist_info, valid=None):
        return valid_mean(self.kl(old_dist_info, new_dist_info), valid)

    def mean_entropy(self, dist_info, valid=None):
        return valid_mean(self.entropy(dist_info), valid)

    def mean_perplexity(self, dist_info, valid=None):
        return valid_mean(self.perplexity(dist_info), valid)

    def sample(self, dist_info, generator=None):
        p = dist_info.prob
        flat = torch.multinomial(p.reshape(-1, self.dim), 1, generator=generator)
        return flat.reshape(p.shape[:-1])


class LinearAgent(torch.nn.Module):
    """Feed-forward: softmax(W obs) policy and a linear value head."""

    recurrent = False

    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.pi = torch.nn.Linear(obs_dim, n_actions)
        self.v = torch.nn.Linear(obs_dim, 1)
        self.distribution = Categorical(n_actions)
        self.device = torch.device("cpu")

    def forward(self, observation, prev_action, prev_reward):
        observation = observation.to(self.device).float()
        prob = torch.softmax(self.pi(observation), dim=-1)
        return DistInfo(prob=prob), self.v(observation).squeeze(-1)


class LstmAgent(torch.nn.Module):
    """Recurrent: an LSTM over [T, B] observations, then policy and value heads."""

    recurrent = True

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 8, num_layers: int = 2):
        super().__init__()
        self.lstm = torch.nn.LSTM(obs_dim, hidden, num_layers=num_layers)
        self.pi = torch.nn.Linear(hidden, n_actions)
        self.v = torch.nn.Linear(hidden, 1)
        self.distribution = Categorical(n_actions)
        self.device = torch.device("cpu")
        self.hidden, self.num_layers = hidden, num_layers

    def forward(self, observation, prev_action, prev_reward, init_rnn_state):
        observation = observation.to(self.device).float()
        h, c = init_rnn_state
        out, (h, c) = self.lstm(observation, (h, c))  # observation [T, B, obs_dim]
        prob = torch.softmax(self.pi(out), dim=-1)
        return DistInfo(prob=prob), self.v(out).squeeze(-1), RnnState(h=h, c=c)

    def random_state(self, B: int, generator: torch.Generator) -> RnnState:
        """A batch-first [B, N, H] state, as samples store it."""
        shape = (B, self.num_layers, self.hidden)
        return RnnState(
            h=torch.randn(shape, generator=generator), c=torch.randn(shape, generator=generator)
        )


def make_samples(
    agent,
    observation,
    reward,
    done,
    action=None,
    timeout=None,
    bootstrap_value=None,
    prev_rnn_state0=None,
    seed=0,
):
    """A Samples batch whose agent_info comes from ``agent`` itself on ``observation`` [T, B, D]
    (recurrent agents from ``prev_rnn_state0``, [B, N, H], at the first step)."""
    generator = torch.Generator().manual_seed(seed)
    T, B = reward.shape
    prev_action = torch.zeros(T, B, dtype=torch.long)
    prev_reward = torch.zeros(T, B)
    with torch.no_grad():
        if agent.recurrent:
            init = RnnState(*(s.transpose(0, 1).contiguous() for s in prev_rnn_state0))
            dist_info, value, _ = agent(observation, prev_action, prev_reward, init)
            # Only step 0's state is read by the algorithms; later steps hold it repeated.
            stored = RnnState(
                *(s.unsqueeze(0).expand(T, *s.shape).clone() for s in prev_rnn_state0)
            )
            agent_info = AgentInfoRnn(dist_info, value, stored)
        else:
            dist_info, value = agent(observation, prev_action, prev_reward)
            agent_info = AgentInfo(dist_info, value)
        if action is None:
            action = agent.distribution.sample(dist_info, generator)
        if bootstrap_value is None:
            bootstrap_value = torch.randn(B, generator=generator)
    env_info = EnvInfo(timeout) if timeout is not None else NoTimeoutInfo(torch.zeros(T, B))
    return Samples(
        agent=AgentSamplesBsv(action, prev_action, agent_info, bootstrap_value),
        env=EnvSamples(observation, reward, prev_reward, done, env_info),
    )


def random_batch(agent, T=5, B=4, p_done=0.2, seed=0, timeout=False, prev_rnn_state0=None, obs=4):
    """A seeded [T, B] batch of random observations and rewards, dones with probability
    ``p_done`` (half of them time-outs with ``timeout``), sampled by ``agent``."""
    g = torch.Generator().manual_seed(seed)
    observation = torch.randn(T, B, obs, generator=g)
    reward = torch.randn(T, B, generator=g)
    done = torch.rand(T, B, generator=g) < p_done
    timeouts = done & (torch.rand(T, B, generator=g) < 0.5) if timeout else None
    return make_samples(
        agent,
        observation,
        reward,
        done,
        timeout=timeouts,
        prev_rnn_state0=prev_rnn_state0,
        seed=seed,
    )
