"""PPO's loss on a minibatch, given the agent's outputs: the clipped surrogate objective and
the (optionally clipped) value loss, as one weighted sum over the valid steps."""

from __future__ import annotations

import torch

__all__ = ["clipped_loss"]


def clipped_loss(
    ratio: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor,
    return_: torch.Tensor,
    valid: torch.Tensor,
    ratio_clip: float | torch.Tensor,
    value_loss_coeff: float,
    old_value: torch.Tensor | None = None,
    value_clip: float | None = None,
) -> torch.Tensor:
    """``mean(value_loss_coeff * 0.5 * (value - return)^2 - min(ratio * adv, clip(ratio, 1 -
    eps, 1 + eps) * adv))`` over the valid steps (``eps``: ``ratio_clip``, a float or a
    tensor). With ``value_clip`` and ``old_value`` (the values recorded when sampling),
    ``(value - return)^2`` becomes ``max((value - return)^2, (old_value + clip(value -
    old_value, -value_clip, value_clip) - return)^2)``."""
    eps = ratio_clip
    clipped_ratio = torch.clamp(ratio, 1.0 - eps, 1.0 + eps)  # type: ignore[arg-type]  # a float or a tensor
    surrogate = torch.min(ratio * advantage, clipped_ratio * advantage)
    # The policy and value losses as one weighted sum over the valid steps: a small
    # network's step costs about as much per operation as per flop.
    squared_error = (value - return_) ** 2
    if value_clip is not None and old_value is not None:  # (both or neither)
        clipped = old_value + (value - old_value).clamp(-value_clip, value_clip)
        squared_error = torch.max(squared_error, (clipped - return_) ** 2)
    value_error = (0.5 * value_loss_coeff) * squared_error
    return ((value_error - surrogate) * (valid / valid.sum())).sum()
