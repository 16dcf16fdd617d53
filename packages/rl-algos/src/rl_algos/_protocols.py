"""What the algorithms need from an agent, declared here so that rl-algos never imports
rl-agents: any object with these members works (duck typing)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "CatQAgentLike",
    "DdpgAgentLike",
    "PgAgentLike",
    "PgDistributionLike",
    "QAgentLike",
    "R2d1AgentLike",
    "SacAgentLike",
    "Td3AgentLike",
]


@runtime_checkable
class PgDistributionLike(Protocol):
    """The action distribution of a policy-gradient agent (Categorical, Gaussian ...).

    ``dist_info`` is the agent's namedarraytuple of distribution parameters; ``valid`` an
    optional 0/1 mask over the leading dims that every ``mean_*`` respects. ``entropy``,
    ``perplexity`` and ``kl`` give one value per datum (PPO's diagnostics).
    """

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor: ...

    def likelihood_ratio(
        self, x: torch.Tensor, old_dist_info: Any, new_dist_info: Any
    ) -> torch.Tensor: ...

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor: ...

    def entropy(self, dist_info: Any) -> torch.Tensor: ...

    def perplexity(self, dist_info: Any) -> torch.Tensor: ...

    def mean_kl(
        self, old_dist_info: Any, new_dist_info: Any, valid: torch.Tensor | None = None
    ) -> torch.Tensor: ...

    def mean_entropy(self, dist_info: Any, valid: torch.Tensor | None = None) -> torch.Tensor: ...

    def mean_perplexity(
        self, dist_info: Any, valid: torch.Tensor | None = None
    ) -> torch.Tensor: ...


@runtime_checkable
class PgAgentLike(Protocol):
    """A policy-gradient agent, as A2C and PPO call it.

    ``agent(observation, prev_action, prev_reward)`` returns ``(dist_info, value)`` with grad,
    with the inputs' leading dims. A recurrent agent (``recurrent = True``) takes a fourth
    argument, ``init_rnn_state`` in ``[num_layers, B, H]`` layout, and returns
    ``(dist_info, value, next_rnn_state)``. Inputs are moved to ``device`` by the algorithm.
    An agent may also have ``update_obs_rms(observation)`` (observation normalisation): the
    algorithm then calls it once per ``optimize_agent``, before anything else.
    """

    recurrent: bool
    device: torch.device
    distribution: PgDistributionLike

    def __call__(
        self, observation: Any, prev_action: Any, prev_reward: Any, *init_rnn_state: Any
    ) -> tuple[Any, ...]: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


@runtime_checkable
class QAgentLike(Protocol):
    """A feed-forward Q-learning agent, as DQN calls it.

    ``agent(observation, prev_action, prev_reward)`` returns Q-values ``[lead..., A]`` with
    grad; ``agent.target(...)`` the target network's, without grad. ``update_target(tau)``
    moves the target towards the online network (``tau=1``: a hard copy).
    ``set_epsilon_itr_min_max(itr_min, itr_max)`` sets the epsilon-greedy annealing window,
    in sampler iterations. Inputs are moved to ``device`` by the algorithm.
    """

    device: torch.device

    def __call__(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor: ...

    def target(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor: ...

    def update_target(self, tau: float = 1) -> None: ...

    def set_epsilon_itr_min_max(self, itr_min: int, itr_max: int) -> None: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


@runtime_checkable
class CatQAgentLike(QAgentLike, Protocol):
    """A categorical (C51) agent: ``agent(...)`` and ``agent.target(...)`` return probabilities
    ``[lead..., A, n_atoms]`` over the fixed support ``linspace(V_min, V_max, n_atoms)``, which
    the algorithm tells it through ``give_V_min_max``."""

    def give_V_min_max(self, V_min: float, V_max: float) -> None: ...


@runtime_checkable
class R2d1AgentLike(Protocol):
    """A recurrent Q-learning agent, as R2D1 calls it.

    ``agent(observation, prev_action, prev_reward, init_rnn_state)`` takes ``[T, B]`` inputs
    and a state in ``[num_layers, B, H]`` layout (a namedarraytuple such as ``RnnState(h, c)``,
    or None for a zero state) and returns ``(q [T, B, A], next_rnn_state)``; ``target(...)``
    the same from the target network, without grad. Its samples carry
    ``agent_info.prev_rnn_state`` (``[T, B, num_layers, H]``, the state each step started
    from) and, for input priorities, ``agent_info.q``.
    """

    device: torch.device

    def __call__(
        self, observation: Any, prev_action: Any, prev_reward: Any, init_rnn_state: Any
    ) -> tuple[torch.Tensor, Any]: ...

    def target(
        self, observation: Any, prev_action: Any, prev_reward: Any, init_rnn_state: Any
    ) -> tuple[torch.Tensor, Any]: ...

    def update_target(self, tau: float = 1) -> None: ...

    def set_epsilon_itr_min_max(self, itr_min: int, itr_max: int) -> None: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


@runtime_checkable
class DdpgAgentLike(Protocol):
    """A DDPG agent: a deterministic policy mu and a critic Q(s, a), each with a target network.

    Actions: the replay buffer holds environment actions; ``normalize_action`` maps them to
    the agent's [-1, 1] units, the units of every other method. ``q(o, a_prev, r_prev,
    action)`` returns Q [lead...] with grad; ``q_at_mu(o, a_prev, r_prev)`` Q(s, mu(s)) with
    grad into the policy; ``target_q_at_mu`` the target networks' Q(s, mu(s)), without grad.
    ``mu_parameters()`` and ``q_parameters()`` feed the two optimizers; ``update_target(tau)``
    moves every target network (``tau=1``: a hard copy); ``give_min_itr_learn(itr)`` tells
    the first learning iteration (the agent may explore differently before it). Inputs are
    moved to ``device`` by the algorithm.
    """

    device: torch.device

    def q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> Any: ...

    def q_at_mu(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor: ...

    def target_q_at_mu(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any: ...

    def mu_parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def q_parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def normalize_action(self, action: Any) -> torch.Tensor: ...

    def update_target(self, tau: float = 1) -> None: ...

    def give_min_itr_learn(self, min_itr_learn: int) -> None: ...


@runtime_checkable
class Td3AgentLike(DdpgAgentLike, Protocol):
    """A TD3 agent: a ``DdpgAgentLike`` with twin critics. ``q(...)`` returns ``(q1, q2)``;
    ``target_q_at_mu(...)`` returns the twin target critics' values at the target policy's
    action with clipped noise added (target policy smoothing); ``q_at_mu`` uses the first
    critic; ``q_parameters()`` covers both critics."""

    def q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def target_q_at_mu(
        self, observation: Any, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class SacAgentLike(Protocol):
    """A SAC agent: a stochastic policy and twin critics with target networks.

    ``pi(o, a_prev, r_prev)`` returns ``(action, log_pi, dist_info)``: a new reparameterised
    action in [-1, 1] and its log-likelihood [lead...], with grad; ``dist_info`` has ``mean``
    and ``log_std``. ``q`` and ``target_q(o, a_prev, r_prev, action)`` return ``(q1, q2)``
    (target: no grad). ``pi_parameters()``, ``q_parameters()`` (both critics),
    ``normalize_action``, ``update_target`` and ``give_min_itr_learn`` as in
    ``DdpgAgentLike``.
    """

    device: torch.device

    def pi(
        self, observation: Any, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor, Any]: ...

    def q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def target_q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def pi_parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def q_parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def normalize_action(self, action: Any) -> torch.Tensor: ...

    def update_target(self, tau: float = 1) -> None: ...

    def give_min_itr_learn(self, min_itr_learn: int) -> None: ...
