"""Check that an environment keeps the promises samplers rely on.

Samplers pre-allocate ``[T, B]`` buffers from one example step and write every later
step into them, so an environment whose values leave its spaces, change dtype or shape,
or whose ``env_info`` changes fields, corrupts data silently.  ``check_env`` runs an
environment for a while and fails loudly on the first such violation instead.
"""

from __future__ import annotations

import numbers
from typing import Any, NoReturn

import numpy as np

from rl_arrays import EnvStep, as_count

from ._env import Env
from ._spaces import Space

__all__ = ["EnvCheckError", "check_env"]


class EnvCheckError(AssertionError):
    """An environment broke the ``Env`` interface; the message says where and how."""


def _fail(message: str) -> NoReturn:
    raise EnvCheckError(message)


def _check_in_space(value: Any, space: Space, what: str) -> None:
    """``value`` is an element of ``space``: same structure, dtype, shape, and bounds."""
    names = getattr(space, "names", None)
    if names is not None:  # a Composite (or a wrapper of one)
        if getattr(value, "_fields", None) != tuple(names):
            _fail(f"{what} should be a namedtuple with fields {tuple(names)}, got {value!r}")
        subs: tuple[Space, ...] = getattr(space, "spaces", ())
        for name, sub, item in zip(names, subs, value, strict=True):
            _check_in_space(item, sub, f"{what}.{name}")
        return
    array = np.asarray(value)
    if array.dtype != space.dtype:
        _fail(f"{what} has dtype {array.dtype}, but its space wants {space.dtype}: {space!r}")
    if array.shape != tuple(space.shape):
        _fail(f"{what} has shape {array.shape}, but its space wants {space.shape}: {space!r}")
    if not space.contains(value):
        _fail(f"{what} is outside its space {space!r}: {value!r}")


def _signature(value: Any) -> tuple[Any, ...]:
    """The structure, shapes and dtypes of a (nested) namedtuple of arrays."""
    fields = getattr(value, "_fields", None)
    if isinstance(value, tuple) and fields is not None:
        return tuple((name, _signature(item)) for name, item in zip(fields, value, strict=True))
    array = np.asarray(value)
    return (array.dtype.str, array.shape)


def _copy(value: Any) -> Any:
    """A deep copy of a namedtuple of arrays (environments may reuse their buffers)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_copy(item) for item in value))
    return np.array(value, copy=True)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(a, b, equal_nan=np.asarray(a).dtype.kind in "fc")


def _check_step(env: Env, env_step: Any, where: str) -> None:
    if not isinstance(env_step, EnvStep):
        _fail(f"{where}: step() must return an rl_arrays.EnvStep, got {type(env_step).__name__}")
    observation, reward, done, env_info = env_step
    _check_in_space(observation, env.observation_space, f"{where}: observation")
    if (
        isinstance(reward, (bool, np.bool_))
        or not isinstance(reward, (numbers.Real, np.ndarray))
        or np.asarray(reward).ndim != 0
        or np.asarray(reward).dtype.kind not in "iuf"
    ):
        _fail(f"{where}: reward must be a real scalar, got {type(reward).__name__} {reward!r}")
    if not np.isfinite(np.asarray(reward)):
        _fail(f"{where}: reward is not finite: {reward!r}")
    if not isinstance(done, (bool, np.bool_)):
        _fail(f"{where}: done must be a bool, got {type(done).__name__} {done!r}")
    if not (isinstance(env_info, tuple) and hasattr(env_info, "_fields")):
        _fail(f"{where}: env_info must be a namedtuple, got {type(env_info).__name__}")
    if env.horizon is not None and "timeout" not in env_info._fields:
        _fail(f"{where}: env_info needs a 'timeout' field when horizon is set ({env.horizon})")
    if getattr(env_info, "timeout", False) and not done:
        _fail(f"{where}: env_info.timeout is true but done is false")


def _run(env: Env, seed: int, n_steps: int, actions: list[Any] | None = None) -> list[Any]:
    """Seed, reset and step ``env`` ``n_steps`` times, checking everything on the way.

    Samples random actions unless ``actions`` are given.  Returns what a second run
    must reproduce: ``(where, observation, reward, done, action)`` for the first reset
    and every step (a step's observation is that of the reset after it when done).
    """
    env.seed(seed)
    observation = env.reset()
    _check_in_space(observation, env.observation_space, "reset(): observation")
    record = [("reset()", _copy(observation), None, None, None)]
    info_signature, episode_length = None, 0
    for t in range(n_steps):
        action = env.action_space.sample() if actions is None else actions[t]
        env_step = env.step(action)
        where = f"step {t}"
        _check_step(env, env_step, where)
        signature = _signature(env_step.env_info)
        if info_signature is None:
            info_signature = signature
        elif signature != info_signature:
            _fail(
                f"{where}: env_info changed fields, shapes or dtypes: first "
                f"{info_signature}, now {signature} (samplers allocate memory for the first)"
            )
        record.append((where, _copy(env_step.observation), env_step.reward, env_step.done, action))
        episode_length += 1
        if env.horizon is not None and episode_length > env.horizon:
            _fail(f"{where}: the episode lasted {episode_length} steps, over horizon {env.horizon}")
        if env_step.done:
            observation = env.reset()
            where = f"{where}: reset()"
            _check_in_space(observation, env.observation_space, f"{where}: observation")
            record.append((where, _copy(observation), None, None, None))
            episode_length = 0
    return record


def check_env(env: Env, n_steps: int = 100, seed: int = 0) -> None:
    """Raise ``EnvCheckError`` on the first way ``env`` breaks the ``Env`` interface.

    Checks the spaces (our ``Space`` types; ``null_value()`` and seeded ``sample()`` in
    them), ``reset()`` and ``n_steps`` random steps (observations in the space, a finite
    scalar reward, a bool ``done``, an ``env_info`` namedtuple that never changes shape;
    with a ``horizon``, ``env_info.timeout`` implying ``done`` and no longer episode), and
    that ``seed(seed)`` twice replays the same data, unless ``env.nondeterministic`` is
    True.  The README ("Environments and spaces") lists every check.
    """
    n_steps = as_count("n_steps", n_steps)
    for name in ("observation_space", "action_space"):
        space = getattr(env, name)
        if not isinstance(space, Space):
            _fail(f"env.{name} must be an rl_samplers Space, got {type(space).__name__}")
        space.seed(seed)
        _check_in_space(space.null_value(), space, f"env.{name}.null_value()")
        _check_in_space(space.sample(), space, f"env.{name}.sample()")
    horizon = env.horizon
    if horizon is not None and (not isinstance(horizon, numbers.Integral) or horizon <= 0):
        _fail(f"env.horizon must be None or a positive int, got {horizon!r}")

    first = _run(env, seed, n_steps)
    if getattr(env, "nondeterministic", False):
        return
    second = _run(env, seed, n_steps, actions=[entry[4] for entry in first if entry[3] is not None])
    not_reproduced = f"seed({seed}) twice gave different runs for the same actions"
    for (where, obs_a, reward_a, done_a, _), (_, obs_b, reward_b, done_b, _) in zip(
        first, second, strict=False
    ):
        if not _equal(obs_a, obs_b):
            _fail(f"{not_reproduced}: the observation of {where} differs")
        if reward_a != reward_b:
            _fail(f"{not_reproduced}: the reward of {where} differs ({reward_a} vs {reward_b})")
        if done_a != done_b:
            _fail(f"{not_reproduced}: done of {where} differs ({done_a} vs {done_b})")
