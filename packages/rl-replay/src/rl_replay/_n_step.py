"""n-step discounted returns, computed where the rewards are stored (the replay buffers);
the algorithms import ``discount_return_n_step`` from here."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from rl_arrays import as_count

from . import _device

if TYPE_CHECKING:
    import torch

__all__ = ["discount_return_n_step", "discount_return_n_step_tensor", "timeout_n_step"]

Bools = TypeVar("Bools", np.ndarray, "torch.Tensor")


def discount_return_n_step(
    reward: npt.ArrayLike,
    done: npt.ArrayLike,
    n_step: int,
    discount: float,
    return_dest: np.ndarray | None = None,
    done_n_dest: np.ndarray | None = None,
    do_truncated: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """n-step returns and done signals from time-major ``[T, ...]`` rewards and dones.

    ``return_[t] = sum_k discount**k * reward[t + k]`` for k < n_step, stopping after the
    first done; ``done_n[t]`` says a done came within those steps (so the algorithm must
    not bootstrap).  Without ``do_truncated`` only the ``T - n_step + 1`` steps with a full
    n-step future are returned; with it, all T (the last ones use fewer rewards).
    Results are written into ``return_dest`` / ``done_n_dest`` when given.
    """
    reward, done = np.asarray(reward), np.asarray(done, dtype=bool)
    n_step = as_count("n_step", n_step, 1, expected=">= 1")
    if reward.shape != done.shape:
        raise ValueError(f"reward {reward.shape} and done {done.shape} shapes differ")
    T = reward.shape[0]
    length = T if do_truncated else T - n_step + 1
    if length < 1:
        raise ValueError(f"need at least n_step={n_step} time steps, got {T}")
    return_ = reward[:length].astype(np.result_type(reward.dtype, np.float32), copy=True)
    done_n = done[:length].copy()
    for k in range(1, n_step):
        stop = min(length, T - k)  # with do_truncated, the last steps have no reward k ahead
        return_[:stop] += discount**k * reward[k : k + stop] * ~done_n[:stop]
        done_n[:stop] |= done[k : k + stop]
    if return_dest is not None:
        return_dest[...] = return_
        return_ = return_dest
    if done_n_dest is not None:
        done_n_dest[...] = done_n
        done_n = done_n_dest
    return return_, done_n


def discount_return_n_step_tensor(
    reward: torch.Tensor, done: torch.Tensor, n_step: int, discount: float, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``discount_return_n_step`` of the first ``length`` steps, on torch tensors (each with
    its full n-step future): the same operations in the same order, so the same values."""
    torch = _device.torch_module()
    return_ = reward[:length].to(torch.promote_types(reward.dtype, torch.float32), copy=True)
    done_n = done[:length].clone()
    for k in range(1, n_step):
        return_ += discount**k * reward[k : k + length] * ~done_n
        done_n |= done[k : k + length]
    return return_, done_n


def timeout_n_step(timeout: Bools, done: Bools, n_step: int, length: int) -> Bools:
    """Whether the first ``length`` steps' n-step futures were truncated: the first done
    within ``n_step`` steps was a timeout, so the target still bootstraps.  numpy arrays or
    torch tensors of ``length + n_step - 1`` steps."""
    timeout_n = _copy(timeout[:length])
    done_before = _copy(done[:length])
    for k in range(1, n_step):
        timeout_n |= timeout[k : k + length] & ~done_before
        done_before |= done[k : k + length]
    return timeout_n


def _copy(x: Bools) -> Bools:
    return x.copy() if isinstance(x, np.ndarray) else x.clone()
