"""Discounted returns, generalized advantage estimation and valid masks for [T, ...] data.

Every function takes time-major data, ``[T]``, ``[T, B]`` or ``[T, B, ...]``, as numpy arrays or
torch tensors (the result is of the kind of ``reward`` / ``done``, on its device), vectorised over
everything after T. The ``_tl`` forms treat a ``timeout`` step (which must also be ``done``) as
rlpyt does: its return is its own value and its advantage 0, and the steps before it bootstrap
through it, also in the last row. Details: the package README, "Time limits".
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch

__all__ = [
    "discount_return",
    "discount_return_tl",
    "generalized_advantage_estimation",
    "generalized_advantage_estimation_tl",
    "valid_from_done",
]


# The kind of the result: that of ``reward`` (``done`` for valid_from_done).
ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)
# Other inputs may be of either kind: they are converted to the result's.
Data = np.ndarray | torch.Tensor


def _is_torch(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _as_kind(x: Any, like: Any) -> Any:
    """``x`` as the same kind of array as ``like`` (a torch tensor on its device, or numpy)."""
    if _is_torch(like):
        return torch.as_tensor(x, device=like.device)
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _float_dtype(reward: Any) -> Any:
    """The result dtype: reward's when it is floating, float32 otherwise."""
    if _is_torch(reward):
        return reward.dtype if reward.is_floating_point() else torch.float32
    return reward.dtype if np.issubdtype(reward.dtype, np.floating) else np.dtype(np.float32)


def _cast(x: Any, dtype: Any) -> Any:
    return x.to(dtype) if _is_torch(x) else x.astype(dtype, copy=False)


def _as_bool(x: Any) -> Any:
    return x.bool() if _is_torch(x) else x.astype(bool, copy=False)


def _empty_like(x: Any) -> Any:
    return torch.empty_like(x) if _is_torch(x) else np.empty_like(x)


def _concat_time(x: Any, last: Any) -> Any:
    """``x[1:]`` followed by ``last`` (one more row) along the time dim."""
    if _is_torch(x):
        return torch.cat([x[1:], last[None]])
    return np.concatenate([x[1:], last[None]])


def _where(mask: Any, a: Any, b: Any) -> Any:
    """``a`` where ``mask``, else ``b`` (a selection, not a boolean index: on a GPU a boolean
    index reads the mask on the host)."""
    return torch.where(mask, a, b) if _is_torch(mask) else np.where(mask, a, b).astype(b.dtype)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _inputs(
    reward: Any, done: Any, bootstrap_value: Any, value: Any = None, timeout: Any = None
) -> tuple[Any, Any, Any, Any, Any]:
    """Check shapes; return reward, not-done, bootstrap_value and value as floats of reward's
    kind (bootstrap_value broadcast to one row) and timeout as bool."""
    if value is None and timeout is not None:
        raise ValueError("value is required with timeout (time-out steps bootstrap from it)")
    reward = _as_kind(reward, reward)
    shape = _shape(reward)
    if len(shape) < 1 or shape[0] < 1:
        raise ValueError(f"reward must have a leading time dim of length >= 1, got shape {shape}")
    dtype = _float_dtype(reward)

    def conform(name: str, x: Any) -> Any:
        x = _as_kind(x, reward)
        if _shape(x) != shape:
            raise ValueError(f"{name} must have reward's shape {shape}, got {_shape(x)}")
        return x

    done = _as_bool(conform("done", done))
    if value is not None:
        value = _cast(conform("value", value), dtype)
    if timeout is not None:
        timeout = _as_bool(conform("timeout", timeout))
        if bool((timeout & ~done).any()):
            raise ValueError(
                "timeout is True at a step where done is False; a time-out must be done"
            )
    bootstrap_value = _cast(_as_kind(bootstrap_value, reward), dtype)
    if _shape(bootstrap_value) not in (shape[1:], ()):
        raise ValueError(
            f"bootstrap_value must have shape {shape[1:]} (reward's shape after the time dim) "
            f"or be a scalar, got {_shape(bootstrap_value)}"
        )
    if _is_torch(bootstrap_value):
        bootstrap_value = bootstrap_value.expand(shape[1:])
    else:
        bootstrap_value = np.broadcast_to(bootstrap_value, shape[1:])
    return _cast(reward, dtype), 1 - _cast(done, dtype), bootstrap_value, value, timeout


def _backward_scan(x: Any, coef: Any, last: Any, out: Any) -> Any:
    """``out[t] = x[t] + coef[t] * out[t + 1]`` for t = T-1 ... 0, with ``out[T] = last``."""
    out[-1] = x[-1] + coef[-1] * last
    for t in range(len(x) - 2, -1, -1):
        out[t] = x[t] + coef[t] * out[t + 1]
    return out


def _write(result: Any, dest: Any) -> Any:
    if dest is None:
        return result
    dest[...] = result
    return dest


def discount_return(
    reward: ArrayT,
    done: Data,
    bootstrap_value: Data | float,
    discount: float,
    return_dest: ArrayT | None = None,
) -> ArrayT:
    """Discounted sum of future rewards from each step to the end of the batch.

    ``return_[t] = reward[t] + discount * (1 - done[t]) * return_[t + 1]``, with
    ``bootstrap_value`` (the value of the state after the last step, shape ``reward.shape[1:]``)
    standing in for ``return_[T]``: the sum restarts after every done. Written into
    ``return_dest`` when given (and that is returned).
    """
    reward, not_done, bootstrap_value, _, _ = _inputs(reward, done, bootstrap_value)
    out = return_dest if return_dest is not None else _empty_like(reward)
    return _backward_scan(reward, discount * not_done, bootstrap_value, out)


def generalized_advantage_estimation(
    reward: ArrayT,
    value: Data,
    done: Data,
    bootstrap_value: Data | float,
    discount: float,
    gae_lambda: float,
    advantage_dest: ArrayT | None = None,
    return_dest: ArrayT | None = None,
) -> tuple[ArrayT, ArrayT]:
    """Advantages by generalized advantage estimation, and the returns ``advantage + value``.

    ``delta[t] = reward[t] + discount * (1 - done[t]) * value[t + 1] - value[t]`` (with
    ``value[T] = bootstrap_value``) and ``advantage[t] = delta[t] + discount * gae_lambda *
    (1 - done[t]) * advantage[t + 1]``. ``gae_lambda = 1`` gives the discounted return minus the
    value; ``0`` the one-step TD error. Returns ``(advantage, return_)``.
    """
    reward, not_done, bootstrap_value, value, _ = _inputs(reward, done, bootstrap_value, value)
    if value is None:
        raise ValueError("value is required")
    delta = reward + discount * not_done * _concat_time(value, bootstrap_value) - value
    advantage = advantage_dest if advantage_dest is not None else _empty_like(reward)
    advantage = _backward_scan(delta, discount * gae_lambda * not_done, 0.0, advantage)
    return advantage, _write(advantage + value, return_dest)


def discount_return_tl(
    reward: ArrayT,
    done: Data,
    bootstrap_value: Data | float,
    discount: float,
    timeout: Data,
    value: Data,
    return_dest: ArrayT | None = None,
) -> ArrayT:
    """:func:`discount_return` that bootstraps through time limits.

    Where ``timeout[t]`` (which requires ``done[t]``), ``return_[t] = value[t]``, so the steps
    before it in the same episode bootstrap from ``value[t]`` instead of treating the episode as
    terminated. The time-out step's own return is only its value estimate: do not train on it
    (the full convention: the package README, "Time limits").
    """
    reward, not_done, bootstrap_value, value, timeout = _inputs(
        reward, done, bootstrap_value, value, timeout
    )
    out = return_dest if return_dest is not None else _empty_like(reward)
    target = _where(timeout, value, reward)  # done at a time-out, so nothing is added to it
    return _backward_scan(target, discount * not_done, bootstrap_value, out)


def generalized_advantage_estimation_tl(
    reward: ArrayT,
    value: Data,
    done: Data,
    bootstrap_value: Data | float,
    discount: float,
    gae_lambda: float,
    timeout: Data,
    advantage_dest: ArrayT | None = None,
    return_dest: ArrayT | None = None,
) -> tuple[ArrayT, ArrayT]:
    """:func:`generalized_advantage_estimation` that bootstraps through time limits.

    Where ``timeout[t]`` (which requires ``done[t]``), ``advantage[t] = 0`` and
    ``return_[t] = value[t]``; the step before it then has ``delta = reward + discount *
    value[t] - value`` and its GAE chain stops there. Do not train on time-out steps (see the
    module docstring). Returns ``(advantage, return_)``.
    """
    reward, not_done, bootstrap_value, value, timeout = _inputs(
        reward, done, bootstrap_value, value, timeout
    )
    delta = reward + discount * not_done * _concat_time(value, bootstrap_value) - value
    delta = _where(timeout, 0.0, delta)
    advantage = advantage_dest if advantage_dest is not None else _empty_like(reward)
    advantage = _backward_scan(delta, discount * gae_lambda * not_done, 0.0, advantage)
    return advantage, _write(advantage + value, return_dest)


def valid_from_done(done: ArrayT) -> ArrayT:
    """A 0/1 mask over the leading (time) dim: 1 up to and including the first done, 0 after.

    For batches whose environments are not reset until the batch ends (wait-reset collectors,
    recurrent training), where the steps after a done are blanks. The mask is float: done's
    dtype when that is floating, float32 otherwise.
    """
    done = _as_kind(done, done)
    shape = _shape(done)
    if len(shape) < 1:
        raise ValueError(f"done must have a leading time dim, got shape {shape}")
    dtype = _float_dtype(done)
    done_b = _as_bool(done)
    if isinstance(done, torch.Tensor):
        valid = torch.ones(shape, dtype=dtype, device=done.device)
        valid[1:] = (done_b[:-1].cumsum(dim=0) == 0).to(dtype)
        return valid
    valid_np = np.ones(shape, dtype=dtype)
    valid_np[1:] = done_b[:-1].cumsum(axis=0) == 0
    return valid_np
