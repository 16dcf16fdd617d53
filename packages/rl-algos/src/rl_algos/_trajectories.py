"""Cutting a [T, B] batch into its episodes' pieces and back (rsl_rl's padded trajectories).

A recurrent network trained on whole ``[T, B]`` columns would carry its state across an
episode's reset. Cutting every column at its dones gives trajectories that each start from
their own initial state; left-aligned and padded to ``T`` they run as one ``[T, N]`` batch.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_arrays import buffer_func

__all__ = ["split_and_pad_trajectories", "unpad_trajectories"]


def trajectory_layout(done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(time, env, masks)``, each ``[T, N]``: where step ``t`` of trajectory ``n`` lies in
    the ``[T, B]`` batch, and whether it is a real step (past a trajectory's end, ``time`` and
    ``env`` repeat its last step, so that gathering with them never reads outside it).

    A trajectory ends at a step whose ``done`` is True, or at the batch's last step; they are
    numbered environment by environment, in time order within each.
    """
    if done.dim() != 2:
        raise ValueError(f"done must be [T, B], got shape {tuple(done.shape)}")
    T, B = done.shape
    starts = torch.ones(T, B, dtype=torch.bool, device=done.device)
    starts[1:] = done[:-1].bool()
    first = starts.t().reshape(-1).nonzero().squeeze(1)  # [N] env-major flat index (b * T + t)
    last = torch.cat([first[1:], first.new_tensor([B * T])]) - 1  # a column always restarts
    steps = torch.arange(T, device=done.device).unsqueeze(1)  # [T, 1]
    flat = torch.minimum(first + steps, last)  # [T, N]
    masks = steps <= last - first
    return flat % T, flat // T, masks


def split_and_pad_trajectories(tensor: Any, done: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """``(padded [T, N, ...], masks [T, N] bool)``: every environment's column of ``tensor``
    ``[T, B, ...]`` (or a namedarraytuple of such tensors) cut after each done into
    trajectories, left-aligned and zero-padded to length ``T``; ``N`` is the number of
    trajectories, environment 0's first. ``masks`` marks the real steps."""
    time, env, masks = trajectory_layout(done)

    def pad(x: torch.Tensor) -> torch.Tensor:
        gathered = x[time, env]
        return gathered.masked_fill(~masks.view(*masks.shape, *[1] * (x.dim() - 2)), 0)

    return buffer_func(tensor, pad), masks


def unpad_trajectories(padded: Any, masks: torch.Tensor) -> Any:
    """The inverse of :func:`split_and_pad_trajectories`: ``[T, B, ...]`` from ``padded``
    ``[T, N, ...]`` (or a namedarraytuple of such tensors) and its ``masks``."""
    T = masks.shape[0]
    total = int(masks.sum())
    if masks.dim() != 2 or total % T:
        raise ValueError(
            f"masks must be [T, N] with a multiple of T={T} real steps, got shape "
            f"{tuple(masks.shape)} with {total}"
        )
    B = total // T
    by_trajectory = masks.t()

    def unpad(x: torch.Tensor) -> torch.Tensor:
        steps = x.transpose(0, 1)[by_trajectory]  # [B * T, ...]: env-major, in time order
        return steps.reshape(B, T, *x.shape[2:]).transpose(0, 1)

    return buffer_func(padded, unpad)
