"""Gymnasium environments behind our ``Env`` interface.

``GymSpaceWrapper`` turns a gymnasium space into one of ours (dict and tuple spaces
become ``Composite`` spaces of namedarraytuples, because samplers pre-allocate
``[T, B]`` buffers from a fixed structure).  ``GymEnvWrapper`` steps a gymnasium 1.x
environment and returns ``EnvStep`` with ``done = terminated or truncated`` and
``env_info.timeout = truncated and not terminated``, so algorithms can bootstrap through
time limits.  ``make`` is ``gymnasium.make`` plus that wrapping, registering Atari ids.
"""

from __future__ import annotations

import keyword
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
import numpy.typing as npt
from gymnasium import spaces as gym_spaces

from rl_arrays import EnvStep, namedarraytuple

from ._env import Env
from ._spaces import Composite, FloatBox, IntBox, Space

__all__ = ["EnvInfoWrapper", "GymEnvWrapper", "GymSpaceWrapper", "make"]

# Field names a namedarraytuple cannot take (they would hide its methods).
_RESERVED = frozenset({"get", "items"})
# numpy dtype kinds we store in sampler buffers: bool, signed, unsigned, float.
_NUMERIC_KINDS = "biuf"


def _field_names(keys: Iterable[object], taken: Iterable[str] = ()) -> list[str]:
    """Valid, distinct identifiers for ``keys``, deterministic in their order.

    Characters other than letters, digits and ``_`` become ``_`` ("ale.lives" ->
    "ale_lives"); a name starting with a digit or ``_`` gets a ``k`` in front
    ("1st" -> "k1st"); keywords and reserved names get a ``_`` after them; clashes get
    ``_1``, ``_2`` ... after them.
    """
    used = set(taken)
    names = []
    for key in keys:
        name = re.sub(r"\W", "_", str(key), flags=re.ASCII)
        if not name or name[0].isdigit() or name[0] == "_":
            name = "k" + name
        if keyword.iskeyword(name) or name in _RESERVED:
            name += "_"
        base, i = name, 0
        while name in used:
            i += 1
            name = f"{base}_{i}"
        used.add(name)
        names.append(name)
    return names


class GymSpaceWrapper(Space):
    """One of our spaces made from a gymnasium ``space``, with value conversion both ways.

    ``Box`` -> ``FloatBox`` or (integer bounds the same everywhere) ``IntBox``; ``Discrete``,
    ``MultiDiscrete`` and ``MultiBinary`` -> ``IntBox``; ``Dict`` and ``Tuple`` ->
    ``Composite`` of namedarraytuples named after ``name``.  ``null_value`` is clipped into
    the space; other attributes are those of ``self.space``.  The README ("Gymnasium") has
    the whole mapping.
    """

    def __init__(
        self,
        space: gym_spaces.Space[Any],
        null_value: npt.ArrayLike = 0,
        name: str = "obs",
        force_float32: bool = True,
    ):
        super().__init__()
        self.gym_space = space
        self.name = name
        self.force_float32 = force_float32
        self._keys: list[str] | None = None  # dict keys of a Dict space, in field order
        self._children: list[GymSpaceWrapper] = []
        self.space: Space
        if isinstance(space, (gym_spaces.Dict, gym_spaces.Tuple)):
            self._init_composite(space, null_value)
        else:
            leaf = self.space = self._leaf(space)
            low, high = leaf.low, leaf.high
            if isinstance(leaf, IntBox):
                high = high - 1  # IntBox's high is exclusive
            self._null = np.clip(np.full(leaf.shape, null_value), low, high)
            self._null = self._null.astype(leaf.dtype)

    def _init_composite(
        self, space: gym_spaces.Dict | gym_spaces.Tuple, null_value: npt.ArrayLike
    ) -> None:
        if isinstance(space, gym_spaces.Dict):
            self._keys = list(space.spaces)
            subs = list(space.spaces.values())
            fields = _field_names(self._keys)
        else:
            subs = list(space.spaces)
            fields = [f"f{i}" for i in range(len(subs))]
        typename = _field_names([self.name])[0]
        self._children = [
            GymSpaceWrapper(sub, null_value, f"{typename}_{field}", self.force_float32)
            for field, sub in zip(fields, subs, strict=True)
        ]
        self._nt_cls = namedarraytuple(typename, fields)
        self.space = Composite(self._children, self._nt_cls)

    def _leaf(self, space: gym_spaces.Space[Any]) -> FloatBox | IntBox:
        what = f"GymSpaceWrapper(name={self.name!r})"
        if isinstance(space, gym_spaces.Box):
            dtype = space.dtype
            if np.issubdtype(dtype, np.floating):
                return FloatBox(
                    space.low, space.high, dtype="float32" if self.force_float32 else dtype
                )
            if not np.issubdtype(dtype, np.integer):
                raise TypeError(f"{what}: cannot wrap {space!r}: dtype {dtype} is not int or float")
            low, high = np.unique(space.low), np.unique(space.high)
            if low.size != 1 or high.size != 1:
                raise ValueError(
                    f"{what}: cannot wrap {space!r}: an IntBox has one low and one high for "
                    "all elements, but this integer Box's bounds differ between elements"
                )
            return IntBox(low[0], int(high[0]) + 1, shape=space.shape, dtype=dtype)
        if isinstance(space, gym_spaces.Discrete):
            start = int(space.start)
            return IntBox(start, start + int(space.n), dtype=space.dtype)
        if isinstance(space, gym_spaces.MultiDiscrete):
            nvec, starts = np.unique(space.nvec), np.unique(space.start)
            if nvec.size != 1 or starts.size != 1:
                raise ValueError(
                    f"{what}: cannot wrap {space!r}: an IntBox needs the same number of "
                    "choices (and start) in every element, but nvec/start differ; split it "
                    "into a Tuple of Discrete spaces instead"
                )
            return IntBox(starts[0], int(starts[0] + nvec[0]), shape=space.shape, dtype=space.dtype)
        if isinstance(space, gym_spaces.MultiBinary):
            return IntBox(0, 2, shape=space.shape, dtype=space.dtype)
        raise TypeError(
            f"{what}: cannot wrap gymnasium space {type(space).__name__} ({space!r}); "
            "supported: Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple"
        )

    def __getattr__(self, attr: str) -> Any:
        # Only called for attributes not found normally; the guard keeps pickling and
        # half-built instances away from ``self.space``.
        if attr.startswith("_") or "space" not in self.__dict__:
            raise AttributeError(attr)
        return getattr(self.__dict__["space"], attr)

    def seed(self, seed: int | None) -> None:
        self.space.seed(seed)

    def sample(self) -> Any:
        return self.space.sample()

    def null_value(self) -> Any:
        if self._children:
            return self.space.null_value()
        return self._null.copy()

    def contains(self, x: Any) -> bool:
        return self.space.contains(x)

    def convert(self, value: Any) -> Any:
        """A gymnasium value as ours: dicts and tuples become namedarraytuples, arrays
        take this space's dtype (float64 -> float32 when ``force_float32``)."""
        if not self._children:
            return np.asarray(value, dtype=self.space.dtype)
        if self._keys is not None:
            items = [value[key] for key in self._keys]
        else:
            items = list(value)
        converted = (c.convert(v) for c, v in zip(self._children, items, strict=True))
        return self._nt_cls(*converted)

    def revert(self, value: Any) -> Any:
        """Our value (e.g. an agent's action) as gymnasium expects it: namedtuples become
        dicts or tuples, ``Discrete`` values python ints, arrays the gym space's dtype."""
        if not self._children:
            if isinstance(self.gym_space, gym_spaces.Discrete):
                return int(value)
            return np.asarray(value, dtype=self.gym_space.dtype)
        reverted = [c.revert(v) for c, v in zip(self._children, value, strict=True)]
        if self._keys is not None:
            return dict(zip(self._keys, reverted, strict=True))
        return tuple(reverted)

    def __repr__(self) -> str:
        return f"GymSpaceWrapper({self.space!r})"


def _time_limit(env: gymnasium.Env[Any, Any]) -> int | None:
    """The tightest ``TimeLimit`` among ``env``'s wrappers.

    The wrapper chain is searched rather than ``env.spec.max_episode_steps``: an
    unwrapped env keeps its registered spec but is not truncated by anything.
    """
    limits = []
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            limits.append(env._max_episode_steps)
        env = env.env
    return min(limits) if limits else None


class GymEnvWrapper(Env):
    """A gymnasium 1.x environment as our ``Env``.

    ``step`` returns ``EnvStep(observation, reward, done, env_info)``: the true final
    observation at an episode's end (the sampler calls ``reset``), a float reward, ``done =
    terminated or truncated``, and an ``EnvInfo`` whose fields are fixed at the first step:
    ``timeout`` (truncated, not terminated) and that step's numeric info entries, renamed to
    identifiers (``info_fields``); keys first seen later are ignored with a warning (use
    ``EnvInfoWrapper``).  ``seed(s)`` seeds the spaces and the next ``reset`` only, so later
    episodes continue the same random stream.  The README ("Gymnasium") has the details.
    """

    _observation_space: GymSpaceWrapper
    _action_space: GymSpaceWrapper

    def __init__(
        self,
        env: gymnasium.Env[Any, Any],
        act_null_value: npt.ArrayLike = 0,
        obs_null_value: npt.ArrayLike = 0,
        force_float32: bool = True,
    ):
        self.env = env
        self._observation_space = GymSpaceWrapper(
            env.observation_space, obs_null_value, "obs", force_float32
        )
        self._action_space = GymSpaceWrapper(env.action_space, act_null_value, "act", force_float32)
        self._horizon = _time_limit(env)
        self._next_seed: int | None = None
        self.reset_info: dict[str, Any] = {}  # the info dict of the latest reset
        self._info_cls: Any = None
        self._info_examples: dict[str, np.ndarray] = {}  # gym key -> first step's value
        self.info_fields: dict[str, str] = {}  # gym key -> env_info field name
        self._warned: set[str] = set()

    def seed(self, seed: int | None) -> None:
        self._action_space.seed(seed)
        self._observation_space.seed(seed)
        self._next_seed = seed

    def reset(self) -> Any:
        observation, self.reset_info = self.env.reset(seed=self._next_seed)
        self._next_seed = None
        return self._observation_space.convert(observation)

    def step(self, action: Any) -> EnvStep:
        gym_action = self._action_space.revert(action)
        observation, reward, terminated, truncated, info = self.env.step(gym_action)
        env_info = self._env_info(info, timeout=bool(truncated and not terminated))
        return EnvStep(
            self._observation_space.convert(observation),
            float(reward),
            bool(terminated or truncated),
            env_info,
        )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"GymEnvWrapper: env info key {key!r} {message}", stacklevel=3)

    def _build_info_type(self, info: Mapping[str, Any]) -> None:
        """Fix the env_info fields from the first step's info dict."""
        for key, value in info.items():
            try:
                example = np.asarray(value)
            except Exception:  # e.g. ragged sequences
                example = np.asarray(None)
            if example.dtype.kind not in _NUMERIC_KINDS:
                self._warn_once(
                    key, f"dropped from env_info: {type(value).__name__} is not numeric"
                )
                continue
            self._info_examples[key] = example
        names = _field_names(self._info_examples, taken=["timeout"])
        self.info_fields = dict(zip(self._info_examples, names, strict=True))
        self._info_cls = namedarraytuple("EnvInfo", ["timeout", *names])

    def _env_info(self, info: Mapping[str, Any], timeout: bool) -> Any:
        if self._info_cls is None:
            self._build_info_type(info)
        values: list[bool | np.ndarray] = [timeout]
        for key, example in self._info_examples.items():
            if key not in info:
                values.append(np.zeros_like(example))
                continue
            value = np.asarray(info[key])
            if value.shape != example.shape or value.dtype.kind not in _NUMERIC_KINDS:
                raise ValueError(
                    f"GymEnvWrapper: env info key {key!r} was {example.dtype}{example.shape} at "
                    f"the first step but is now {value.dtype}{value.shape} ({info[key]!r}); env_info "
                    "fields cannot change shape or become non-numeric (EnvInfoWrapper can give "
                    "them a type from the first step)"
                )
            if not np.can_cast(value.dtype, example.dtype, casting="same_kind"):
                self._warn_once(
                    key, f"cast from {value.dtype} to {example.dtype} (its first dtype)"
                )
            values.append(value.astype(example.dtype, copy=False))
        for key in info:
            if key not in self._info_examples:
                self._warn_once(key, "ignored: it was not in the first step's info dict")
        return self._info_cls(*values)

    @property
    def horizon(self) -> int | None:
        return self._horizon

    def close(self) -> None:
        self.env.close()


class EnvInfoWrapper(gymnasium.Wrapper):
    """Adds the keys of ``info_example`` (with its values) to every step's info dict
    that lacks them, so ``GymEnvWrapper`` sees them at the first step and keeps them."""

    def __init__(self, env: gymnasium.Env[Any, Any], info_example: Mapping[str, Any]):
        super().__init__(env)
        if not isinstance(info_example, Mapping):
            raise TypeError(f"info_example must be a mapping, got {type(info_example).__name__}")
        self.info_example = dict(info_example)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        for key, value in self.info_example.items():
            info.setdefault(key, value)
        return observation, reward, terminated, truncated, info


class InfoActionMask(gymnasium.Wrapper):
    """Moves the action mask an environment gives in its info (``info[key]``: gymnasium's
    Taxi and others) into the observation, as PettingZoo's environments give theirs: a
    ``Dict`` observation with ``"action_mask"`` (``MultiBinary(n)``, 1 = allowed) beside the
    environment's own (its keys when it is a ``Dict``, else ``"observation"``). Agents that
    find it there mask their actions (see ``rl_agents.ActionMaskedModel``)."""

    def __init__(self, env: gymnasium.Env[Any, Any], key: str = "action_mask"):
        super().__init__(env)
        n = getattr(env.action_space, "n", None)
        if not isinstance(env.action_space, gym_spaces.Discrete) or n is None:
            raise ValueError(
                f"an action mask needs a Discrete action space, got {env.action_space}"
            )
        self.key = key
        self._n = int(n)
        space = env.observation_space
        inner = dict(space.spaces) if isinstance(space, gym_spaces.Dict) else {"observation": space}
        if "action_mask" in inner:
            raise ValueError("the observation already has an 'action_mask'")
        self.observation_space = gym_spaces.Dict(
            {**inner, "action_mask": gym_spaces.MultiBinary(self._n)}
        )

    def _observation(self, observation: Any, info: Mapping[str, Any]) -> dict[str, Any]:
        if self.key not in info:
            raise KeyError(
                f"InfoActionMask: the environment's info has no {self.key!r} (keys: {sorted(info)})"
            )
        mask = np.asarray(info[self.key], dtype=np.int8).reshape(-1)
        if mask.shape != (self._n,):
            raise ValueError(
                f"InfoActionMask: info[{self.key!r}] has {mask.size} entries for {self._n} actions"
            )
        inner = (
            dict(observation) if isinstance(observation, Mapping) else {"observation": observation}
        )
        return {**inner, "action_mask": mask}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        return self._observation(observation, info), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._observation(observation, info), reward, terminated, truncated, info


def _register_atari() -> None:
    try:
        import ale_py
    except ImportError:
        raise ImportError(
            "Atari ids ('ALE/...') need ale-py: pip install rl-samplers[atari]"
        ) from None
    gymnasium.register_envs(ale_py)


def make(*args: Any, info_example: Mapping[str, Any] | None = None, **kwargs: Any) -> GymEnvWrapper:
    """``gymnasium.make(*args, **kwargs)`` as a ``GymEnvWrapper`` (with ``EnvInfoWrapper``
    when ``info_example`` is given).  Ids starting with ``ALE/`` register ale-py's envs."""
    env_id = args[0] if args else kwargs.get("id")
    if isinstance(env_id, str) and env_id.startswith("ALE/"):
        _register_atari()
    env = gymnasium.make(*args, **kwargs)
    if info_example is not None:
        env = EnvInfoWrapper(env, info_example)
    return GymEnvWrapper(env)
