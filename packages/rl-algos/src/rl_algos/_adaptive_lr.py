"""rsl_rl's adaptive learning rate (PPO's ``desired_kl``): after each minibatch step, slower
when the policy moved too far from the sampling one, faster when it barely moved."""

from __future__ import annotations

import torch

__all__ = ["adapt_learning_rate", "process_mean", "shared_learning_rate"]

# rsl_rl's adaptive schedule: the factor and the bounds of the learning rate.
_LR_FACTOR, _MIN_LR, _MAX_LR = 1.5, 1e-5, 1e-2


def shared_learning_rate(
    optimizer: torch.optim.Optimizer, device: torch.device
) -> torch.Tensor | None:
    """With an optimizer that takes a learning rate on the device (fused or capturable:
    fused Adam, the default): every group's rate one tensor there, returned, which
    :func:`adapt_learning_rate` sets in place, so that no minibatch waits for its KL to
    reach the host. Otherwise None: the rate stays a float."""
    groups = optimizer.param_groups
    if not all(group.get("fused") or group.get("capturable") for group in groups):
        return None
    lr = torch.as_tensor(groups[0]["lr"], dtype=torch.float32).to(device, copy=True)
    for group in groups:
        group["lr"] = lr
    return lr


def process_mean(x: torch.Tensor) -> torch.Tensor:
    """``x`` averaged over the processes of a distributed run (itself in one process), so
    that every process decides on the same value."""
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        world_size = distributed.get_world_size()
        if world_size > 1:
            x = x.clone()
            distributed.all_reduce(x)
            x = x / world_size
    return x


def adapt_learning_rate(
    optimizer: torch.optim.Optimizer,
    kl: torch.Tensor,
    desired_kl: float,
    lr: torch.Tensor | None,
) -> None:
    """One step of the schedule on the mean ``kl`` (old || new) of a minibatch step: the rate
    divided by 1.5 above ``2 * desired_kl``, multiplied by 1.5 below ``desired_kl / 2`` (not
    at exactly 0: the policy has not moved yet), within [1e-5, 1e-2]. On the device when the
    rate lives there (``lr``, from :func:`shared_learning_rate`); else the KL is read."""
    if lr is None:  # (an optimizer that takes only a float: decided on the host)
        kl_value, rate = float(kl), float(optimizer.param_groups[0]["lr"])
        if kl_value > 2.0 * desired_kl:
            rate = max(_MIN_LR, rate / _LR_FACTOR)
        elif 0.0 < kl_value < desired_kl / 2.0:
            rate = min(_MAX_LR, rate * _LR_FACTOR)
        for group in optimizer.param_groups:
            group["lr"] = rate
        return
    slower = (lr / _LR_FACTOR).clamp(min=_MIN_LR)
    faster = (lr * _LR_FACTOR).clamp(max=_MAX_LR)
    barely_moved = (kl > 0) & (kl < desired_kl / 2.0)
    lr.copy_(torch.where(kl > 2.0 * desired_kl, slower, torch.where(barely_moved, faster, lr)))
    for group in optimizer.param_groups:  # (groups added since: the same rate)
        group["lr"] = lr
