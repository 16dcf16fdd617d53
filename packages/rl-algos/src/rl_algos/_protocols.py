"""What the policy-gradient algorithms need from an agent, declared here so that rl-algos never
imports rl-agents: any object with these members works (duck typing)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["PgAgentLike", "PgDistributionLike"]


@runtime_checkable
class PgDistributionLike(Protocol):
    """The action distribution of a policy-gradient agent (Categorical, Gaussian ...).

    ``dist_info`` is the agent's namedarraytuple of distribution parameters; ``valid`` an
    optional 0/1 mask over the leading dims that every ``mean_*`` respects.
    """

    def log_likelihood(self, x: Any, dist_info: Any) -> torch.Tensor: ...

    def likelihood_ratio(self, x: Any, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor: ...

    def mean_kl(
        self, old_dist_info: Any, new_dist_info: Any, valid: Any = None
    ) -> torch.Tensor: ...

    def mean_entropy(self, dist_info: Any, valid: Any = None) -> torch.Tensor: ...

    def mean_perplexity(self, dist_info: Any, valid: Any = None) -> torch.Tensor: ...


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
