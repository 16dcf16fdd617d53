"""n-step discounted returns, computed where the rewards are stored (the replay buffers);
the algorithms import it from here."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rl_arrays import as_count

__all__ = ["discount_return_n_step"]


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
