"""MLP models for the Q-value policy-gradient agents (DDPG, TD3, SAC) on vector observations.

Actions are in the model's units, [-1, 1] per dim: the agents scale them to the action
space's bounds. Every model takes ``(observation, prev_action, prev_reward[, action])`` with
``[]``, ``[B]`` or ``[T, B]`` leading dims and returns the same leading dims;
``prev_action`` and ``prev_reward`` are not read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from rl_arrays import infer_leading_dims, restore_leading_dims

from ._model_components import MlpModel

__all__ = ["MuMlpModel", "PiMlpModel", "QofMuMlpModel"]

# The log-std range of PiMlpModel (as in rlpyt and Stable-Baselines3): wide enough never to
# bind in practice, narrow enough that exp() neither underflows nor explodes.
LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0


class _FlatObservationMlp(torch.nn.Module):
    """An MLP on the flattened observation (with extra inputs appended for Q models);
    ``hidden_sizes`` may be empty or None for a linear model."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        output_size: int,
        extra_input_size: int = 0,
    ):
        super().__init__()
        self.observation_shape = tuple(int(s) for s in observation_shape)
        self._obs_ndim = len(self.observation_shape)
        input_size = math.prod(self.observation_shape) + extra_input_size
        self.mlp = MlpModel(input_size, hidden_sizes, output_size)

    def _features(self, observation: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
        """``([T * B, obs_size] float observations, lead_dim, T, B)``."""
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        dtype = next(self.mlp.parameters()).dtype
        return observation.reshape(T * B, -1).to(dtype), lead_dim, T, B


def _check_action_size(action_size: Any) -> int:
    if isinstance(action_size, bool) or not isinstance(action_size, int) or action_size < 1:
        raise ValueError(f"action_size must be a positive int, got {action_size!r}")
    return action_size


class MuMlpModel(_FlatObservationMlp):
    """DDPG's deterministic policy: ``output_max * tanh(mlp(observation))``, [..., action_size].

    The agents scale [-1, 1] to the action space, so ``output_max`` stays 1 with them.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        action_size: int,
        output_max: float = 1,
    ):
        super().__init__(observation_shape, hidden_sizes, _check_action_size(action_size))
        self.output_max = output_max

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> torch.Tensor:
        x, lead_dim, T, B = self._features(observation)
        mu = self.output_max * torch.tanh(self.mlp(x))
        return restore_leading_dims(mu, lead_dim, T, B)


class QofMuMlpModel(_FlatObservationMlp):
    """Q(s, a): an MLP on the observation and the action concatenated; returns [...]."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        action_size: int,
    ):
        action_size = _check_action_size(action_size)
        super().__init__(observation_shape, hidden_sizes, 1, extra_input_size=action_size)
        self.action_size = action_size

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> torch.Tensor:
        x, lead_dim, T, B = self._features(observation)
        action = action.reshape(T * B, self.action_size).to(x.dtype)
        q = self.mlp(torch.cat([x, action], dim=1)).squeeze(-1)
        return restore_leading_dims(q, lead_dim, T, B)


class PiMlpModel(_FlatObservationMlp):
    """SAC's Gaussian policy before the tanh squash: ``(mean, log_std)``, each
    [..., action_size], log_std clamped to [LOG_STD_MIN, LOG_STD_MAX]."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        action_size: int,
    ):
        action_size = _check_action_size(action_size)
        super().__init__(observation_shape, hidden_sizes, 2 * action_size)
        self.action_size = action_size

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, lead_dim, T, B = self._features(observation)
        mean, log_std = self.mlp(x).chunk(2, dim=-1)
        log_std = torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
        return restore_leading_dims((mean, log_std), lead_dim, T, B)
