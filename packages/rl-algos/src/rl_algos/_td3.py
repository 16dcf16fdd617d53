"""TD3: DDPG with twin critics, target policy smoothing and delayed policy updates."""

from __future__ import annotations

from typing import Any

import torch

from ._ddpg import DDPG

__all__ = ["TD3"]


class TD3(DDPG):
    """Twin delayed DDPG (rlpyt's defaults; every other argument as ``DDPG``'s).

    The agent (``Td3AgentLike``) has two critics: ``q`` returns both and both regress on the
    one target ``y = return_ + discount**n * (1 - done_n) * min(Q1_target, Q2_target)(s',
    a')`` (``q_loss`` sums their losses), where the agent's ``target_q_at_mu`` evaluates them
    at the smoothed target action ``a' = clip(mu_target(s') + clip(noise, +-c), -1, 1)``
    (the agent's ``target_noise_std`` and ``target_noise_clip``). The policy, trained on the
    first critic, and the targets update every second critic update (delayed updates).
    """

    agent_protocol = "Td3AgentLike"

    def __init__(
        self,
        batch_size: int = 100,
        replay_ratio: float = 100,
        target_update_tau: float = 0.005,
        target_update_interval: int = 2,
        policy_update_interval: int = 2,
        learning_rate: float = 1e-3,
        q_learning_rate: float = 1e-3,
        **kwargs: Any,
    ):
        super().__init__(
            batch_size=batch_size,
            replay_ratio=replay_ratio,
            target_update_tau=target_update_tau,
            target_update_interval=target_update_interval,
            policy_update_interval=policy_update_interval,
            learning_rate=learning_rate,
            q_learning_rate=q_learning_rate,
            **kwargs,
        )

    def critics(self, q: Any) -> tuple[torch.Tensor, ...]:
        """Both critics' values (the agent's ``q`` returns the pair)."""
        return tuple(q)

    def target_value(self, target_inputs: Any) -> torch.Tensor:
        """The smaller of the twin target critics at the smoothed target action (clipped
        double Q-learning, against over-estimation). Call without grad."""
        q1, q2 = self._agent.target_q_at_mu(*target_inputs)
        return torch.minimum(q1, q2)
