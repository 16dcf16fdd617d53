"""Categorical (distributional, C51) DQN: a distribution over fixed return atoms per action,
trained by cross-entropy against the target distribution projected onto the same atoms."""

from __future__ import annotations

from typing import Any, cast

import torch

from rl_arrays import select_at_indexes

from ._dqn import DQN
from ._pg import check_number
from ._protocols import CatQAgentLike, QAgentLike

__all__ = ["CategoricalDQN", "categorical_projection"]

EPS = 1e-6  # floor of probabilities inside logarithms


def categorical_projection(
    probs: torch.Tensor,
    return_: torch.Tensor,
    done_n: torch.Tensor,
    discount_n: float,
    V_min: float,
    V_max: float,
) -> torch.Tensor:
    """The distribution of ``return_ + discount_n * (1 - done_n) * Z`` projected back onto the
    atoms ``z = linspace(V_min, V_max, n_atoms)``, where ``Z`` takes value ``z[j]`` with
    probability ``probs[..., j]``.

    Each shifted atom is clipped to ``[V_min, V_max]`` and its mass split between the two
    nearest atoms in proportion to closeness (all of it to one atom when it lands on it).
    ``probs`` is ``[..., n_atoms]``; ``return_`` and ``done_n`` are ``[...]``.
    """
    n_atoms = probs.shape[-1]
    if n_atoms < 2:
        raise ValueError(f"a categorical distribution needs at least 2 atoms, got {n_atoms}")
    z = torch.linspace(V_min, V_max, n_atoms, dtype=probs.dtype, device=probs.device)
    delta_z = (V_max - V_min) / (n_atoms - 1)
    not_done = 1 - done_n.to(probs.dtype)
    # Where each target atom lands: [..., n_atoms (source)].
    landed = return_.unsqueeze(-1) + (discount_n * not_done).unsqueeze(-1) * z
    landed = landed.clamp(V_min, V_max)
    # Share of source atom j given to atom i: 1 - |landed_j - z_i| / delta_z, floored at 0.
    share = (1 - (landed.unsqueeze(-2) - z.unsqueeze(-1)).abs() / delta_z).clamp(min=0)
    return (share * probs.unsqueeze(-2)).sum(dim=-1)  # [..., n_atoms (destination)]


class CategoricalDQN(DQN):
    """Distributional DQN with fixed atoms ``linspace(V_min, V_max, n_atoms)``; the agent's
    output decides ``n_atoms``. Takes DQN's arguments too (double DQN picks the next action
    by the online net's expected values; n-step returns; prioritized replay, whose priorities
    are the KL divergences of the targets from the predictions; ``tdAbsErr`` in the
    diagnostics holds their mean). ``delta_clip`` plays no part in the loss."""

    def __init__(self, V_min: float = -10, V_max: float = 10, **kwargs: Any):
        super().__init__(**kwargs)
        check_number("V_min", V_min)
        check_number("V_max", V_max)
        if not V_max > V_min:
            raise ValueError(f"V_max must be greater than V_min, got V_min={V_min}, V_max={V_max}")
        self.V_min = V_min
        self.V_max = V_max

    def _check_agent(self, agent: object) -> None:
        if not hasattr(agent, "give_V_min_max"):
            raise TypeError(
                "CategoricalDQN needs an agent with give_V_min_max (see rl_algos.CatQAgentLike)"
            )
        super()._check_agent(agent)

    def _tell_agent(self, agent: QAgentLike) -> None:
        """As DQN's, and the support of the return distributions (``give_V_min_max``)."""
        super()._tell_agent(agent)
        # A CatQAgentLike: _check_agent made sure that it has give_V_min_max.
        cast(CatQAgentLike, agent).give_V_min_max(self.V_min, self.V_max)

    def loss(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, KL(target || prediction) per transition)`` on a replayed batch: the
        cross-entropy of the predicted distribution of the taken action against the projected
        target distribution (importance-weighted with prioritized replay)."""
        agent = self._agent
        with torch.no_grad():
            target_ps = agent.target(*samples.target_inputs)  # [B, A, n_atoms]
            z = torch.linspace(
                self.V_min,
                self.V_max,
                target_ps.shape[-1],
                dtype=target_ps.dtype,
                device=target_ps.device,
            )
            chooser_ps = agent(*samples.target_inputs) if self.double_dqn else target_ps
            next_action = (chooser_ps * z).sum(dim=-1).argmax(dim=-1)  # greedy on expected value
            target_p = categorical_projection(
                select_at_indexes(next_action, target_ps),
                samples.return_,
                samples.done_n,
                self.discount**self.n_step_return,
                self.V_min,
                self.V_max,
            )
        p = select_at_indexes(samples.action, agent(*samples.agent_inputs)).clamp(EPS, 1)
        losses = -(target_p * p.log()).sum(dim=-1)  # cross-entropy
        with torch.no_grad():
            target_p = target_p.clamp(EPS, 1)
            kl = (target_p * (target_p.log() - p.log())).sum(dim=-1).clamp(EPS, 1 / EPS)
        return self._weighted_mean(losses, kl, samples)
