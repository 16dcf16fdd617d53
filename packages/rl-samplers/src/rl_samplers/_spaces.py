"""Spaces: what an environment's observations and actions look like.

Each space has its own random generator (``seed`` it for reproducible samples) and a
``null_value`` used to fill buffers where no element exists (e.g. the previous action at
an episode's first step).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from rl_arrays import is_namedarraytuple

__all__ = ["Composite", "FloatBox", "IntBox", "Space"]


class Space:
    """Common interface of observation and action spaces."""

    dtype: np.dtype
    shape: tuple[Any, ...]  # ints; a Composite's is a namedtuple of its spaces' shapes

    def __init__(self) -> None:
        self.rng = np.random.default_rng()

    def seed(self, seed: int | None) -> None:
        """Make ``sample`` reproducible."""
        self.rng = np.random.default_rng(seed)

    def sample(self) -> Any:
        """A uniformly random element."""
        raise NotImplementedError

    def null_value(self) -> Any:
        """The element that stands for "nothing" (zero-like)."""
        raise NotImplementedError

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is an element of the space."""
        raise NotImplementedError


def _shape(shape: int | Iterable[int] | None) -> tuple[int, ...]:
    if shape is None:
        return ()
    return tuple(int(s) for s in shape) if isinstance(shape, Iterable) else (int(shape),)


class IntBox(Space):
    """Integers in ``range(low, high)`` (high exclusive), for every element of ``shape``."""

    def __init__(
        self,
        low: int,
        high: int,
        shape: int | Iterable[int] | None = None,
        dtype: npt.DTypeLike = "int32",
        null_value: int | None = None,
    ):
        super().__init__()
        if not high > low:
            raise ValueError(f"IntBox needs high > low, got low={low}, high={high}")
        self.low, self.high = int(low), int(high)
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        if not np.issubdtype(self.dtype, np.integer):
            raise ValueError(f"IntBox needs an integer dtype, got {self.dtype}")
        self._null = self.low if null_value is None else null_value
        if not self.low <= self._null < self.high:
            raise ValueError(f"null_value {self._null} is outside range({self.low}, {self.high})")

    @property
    def n(self) -> int:
        """How many values each element can take."""
        return self.high - self.low

    def sample(self) -> np.ndarray:
        return self.rng.integers(self.low, self.high, size=self.shape).astype(self.dtype)

    def null_value(self) -> np.ndarray:
        return np.full(self.shape, self._null, dtype=self.dtype)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all((x >= self.low) & (x < self.high)))

    def __repr__(self) -> str:
        return f"IntBox({self.low}, {self.high}, shape={self.shape}, dtype={self.dtype})"


class FloatBox(Space):
    """Reals between ``low`` and ``high`` (scalars with a ``shape``, or arrays)."""

    def __init__(
        self,
        low: npt.ArrayLike,
        high: npt.ArrayLike,
        shape: int | Iterable[int] | None = None,
        null_value: float = 0.0,
        dtype: npt.DTypeLike = "float32",
    ):
        super().__init__()
        self.dtype = np.dtype(dtype)
        if shape is None:
            low_a, high_a = np.asarray(low, self.dtype), np.asarray(high, self.dtype)
            if low_a.shape != high_a.shape:
                raise ValueError(f"low {low_a.shape} and high {high_a.shape} shapes differ")
        else:
            low_a = np.full(_shape(shape), low, self.dtype)
            high_a = np.full(_shape(shape), high, self.dtype)
        if np.any(low_a > high_a):
            raise ValueError("FloatBox needs low <= high everywhere")
        self.low, self.high, self.shape = low_a, high_a, low_a.shape
        self._null = null_value

    @property
    def bounded(self) -> np.ndarray:
        """Where both bounds are finite."""
        return np.isfinite(self.low) & np.isfinite(self.high)

    def sample(self) -> np.ndarray:
        """Uniform where bounded; a standard normal (clipped to a finite bound) elsewhere."""
        bounded = self.bounded
        low, high = np.where(bounded, self.low, 0), np.where(bounded, self.high, 0)
        x = np.where(bounded, self.rng.uniform(low, high), self.rng.standard_normal(self.shape))
        return np.clip(x, self.low, self.high).astype(self.dtype)

    def null_value(self) -> np.ndarray:
        return np.full(self.shape, self._null, dtype=self.dtype)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all((x >= self.low) & (x <= self.high)))

    def __repr__(self) -> str:
        return f"FloatBox(shape={self.shape}, dtype={self.dtype})"


class Composite(Space):
    """Several spaces organised by a namedtuple class: samples are such namedtuples."""

    def __init__(self, spaces: Iterable[Space], NamedTupleCls: Any):
        super().__init__()
        self._spaces = tuple(spaces)
        if len(self._spaces) != len(NamedTupleCls._fields):
            raise ValueError(
                f"{len(self._spaces)} spaces for the {len(NamedTupleCls._fields)} fields "
                f"{NamedTupleCls._fields}"
            )
        self._NamedTupleCls = NamedTupleCls
        self.shape = NamedTupleCls(*(s.shape for s in self._spaces))

    def seed(self, seed: int | None) -> None:
        seeds = np.random.SeedSequence(seed).spawn(len(self._spaces))
        for space, s in zip(self._spaces, seeds, strict=True):
            space.seed(int(s.generate_state(1)[0]))

    def sample(self) -> Any:
        return self._NamedTupleCls(*(s.sample() for s in self._spaces))

    def null_value(self) -> Any:
        return self._NamedTupleCls(*(s.null_value() for s in self._spaces))

    def contains(self, x: Any) -> bool:
        return all(s.contains(v) for s, v in zip(self._spaces, x, strict=True))

    @property
    def names(self) -> tuple[str, ...]:
        return self._NamedTupleCls._fields

    @property
    def spaces(self) -> tuple[Space, ...]:
        return self._spaces

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={s!r}" for n, s in zip(self.names, self._spaces, strict=True))
        return f"Composite({inner})"


def sample_action(space: Space, observation: Any) -> Any:
    """A random action of ``space``; among those the observation's ``action_mask`` allows,
    when it has one (an environment that raises on a forbidden action must never get one)."""
    mask = getattr(observation, "action_mask", None)
    allowed = None if mask is None else np.flatnonzero(np.asarray(mask))
    if allowed is None or allowed.size == 0:
        return space.sample()
    rng = getattr(space, "rng", None) or np.random.default_rng()
    return np.asarray(rng.choice(allowed), dtype=getattr(space, "dtype", None))


def stack_values(values: list[Any]) -> Any:
    """Values of a space (arrays, or namedarraytuples of them: a ``Composite``'s) stacked
    along a new leading dim, field by field."""
    first = values[0]
    if is_namedarraytuple(first):
        fields = zip(*values, strict=True)  # (iterating one yields its fields)
        return type(first)(*(stack_values(list(f)) for f in fields))
    return np.stack(values)
