"""Environments' state as plain data (dicts, lists, numbers, strings, numpy arrays), so that a
checkpoint can keep it without pickling, and a resume can load it without running code.

``state_of(obj)`` walks an object's attributes; ``load_state(live, state)`` writes them back
into an object of the same classes, built afresh from the run's configuration. Classes are
never created from the state: they are only compared by name. An object whose state is not
in its attributes (a C++ emulator, say) either offers ``env_state()`` / ``load_env_state(s)``
returning and taking such data (``AtariEnv`` does), or makes ``state_of`` raise
``UnsavedState`` naming where it is.
"""

from __future__ import annotations

import collections
import enum
import functools
import pathlib
import types
from typing import Any

import numpy as np

__all__ = ["UnsavedState", "load_state", "state_of"]

# Kept as they are built: code, constants and descriptions, not state.
_STRUCTURE = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    functools.partial,
    enum.Enum,
    pathlib.PurePath,
    np.dtype,
)
_STRUCTURE_NAMES = {"mujoco._structs.MjModel"}  # the model: made again from its file
# MuJoCo's full integration state (mjSTATE_INTEGRATION): the rest of MjData is derived.
_MJDATA = "mujoco._structs.MjData"
_MJDATA_FIELDS = (
    "time",
    "qpos",
    "qvel",
    "act",
    "qacc_warmstart",
    "ctrl",
    "qfrc_applied",
    "xfrc_applied",
    "eq_active",
    "mocap_pos",
    "mocap_quat",
    "userdata",
    "plugin_state",
)
_OBJECT, _ATTRS, _SCALAR, _GENERATOR, _SEQUENCE, _SAME = (
    "__object__",
    "__attrs__",
    "__scalar__",
    "__generator__",
    "__sequence__",
    "__same__",
)


class UnsavedState(TypeError):
    """An object holds state that cannot be written as data (its path and type named)."""


def _name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def state_of(obj: Any, path: str = "env") -> Any:
    """``obj``'s state as plain data; ``path`` names it in errors."""
    return _state(obj, path, {})


def _state(obj: Any, path: str, seen: dict[int, str]) -> Any:
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return {
                _SEQUENCE: "list",
                "items": [_state(x, f"{path}[]", seen) for x in obj.tolist()],
            }
        return obj.copy()
    if isinstance(obj, np.generic):
        return {_SCALAR: np.asarray(obj)}
    if isinstance(obj, _STRUCTURE) or _name(obj) in _STRUCTURE_NAMES:
        return {_SAME: True}
    if id(obj) in seen:  # (a second reference: restored through the first)
        return {_SAME: True}
    seen[id(obj)] = path
    if isinstance(obj, np.random.Generator):
        return {_GENERATOR: obj.bit_generator.state, "legacy": False}
    if isinstance(obj, np.random.RandomState):
        return {_GENERATOR: obj.get_state(legacy=False), "legacy": True}
    if isinstance(obj, list | tuple | collections.deque | set | frozenset):
        items = [_state(x, f"{path}[{i}]", seen) for i, x in enumerate(obj)]
        kind = "tuple" if isinstance(obj, tuple) else "set" if isinstance(obj, set) else "list"
        return {_SEQUENCE: kind, "items": items}
    if callable(getattr(obj, "env_state", None)):
        return {_OBJECT: _name(obj), "env_state": obj.env_state()}
    if _name(obj) == _MJDATA:
        fields = {f: np.array(getattr(obj, f)) for f in _MJDATA_FIELDS if hasattr(obj, f)}
        return {_OBJECT: _MJDATA, "fields": fields}
    state: dict[str, Any] = {_OBJECT: _name(obj)}
    if isinstance(obj, dict):
        bad = [k for k in obj if not isinstance(k, str)]
        if bad:
            raise UnsavedState(f"{path}: a dict with a key that is not a string ({bad[0]!r})")
        state["items"] = {k: _state(v, f"{path}[{k!r}]", seen) for k, v in obj.items()}
    attrs = getattr(obj, "__dict__", None)
    if attrs is None and not isinstance(obj, dict):
        raise UnsavedState(
            f"{path} is a {_name(obj)}, whose state cannot be saved as data (it has no "
            "attributes to read, nor env_state())"
        )
    state[_ATTRS] = {k: _state(v, f"{path}.{k}", seen) for k, v in (attrs or {}).items()}
    return state


def load_state(live: Any, state: Any, path: str = "env") -> Any:
    """``live`` with ``state`` (from ``state_of`` of an object of the same classes) written
    into it, in place where it can be (arrays, lists, objects); returns the result, which is
    a new value only for numbers, strings and tuples. A mismatch is a ValueError naming the
    path."""
    if isinstance(state, dict) and state.get(_SAME):
        return live
    if isinstance(state, np.ndarray):
        if isinstance(live, np.ndarray) and live.shape == state.shape and live.flags.writeable:
            live[...] = state
            return live
        return state.copy()
    if not isinstance(state, dict):  # None, numbers, strings
        return state
    if _SCALAR in state:
        return state[_SCALAR][()]
    if _GENERATOR in state:
        return _load_generator(live, state, path)
    if _SEQUENCE in state:
        return _load_sequence(live, state, path)
    if state.get(_OBJECT) != _name(live):
        raise ValueError(
            f"{path}: the saved state is of a {state.get(_OBJECT)}, this is a {_name(live)}"
        )
    if "env_state" in state:
        live.load_env_state(state["env_state"])
    elif "fields" in state:
        for field, value in state["fields"].items():
            if field == "time":
                live.time = float(value)
            else:
                getattr(live, field)[...] = value
    else:
        for key, value in state.get("items", {}).items():
            new = load_state(live.get(key), value, f"{path}[{key!r}]")
            if key not in live or live[key] is not new:
                live[key] = new
        for key, value in state[_ATTRS].items():
            old = getattr(live, key, None)
            new = load_state(old, value, f"{path}.{key}")
            if new is not old and not _equal(new, old):
                setattr(live, key, new)
    return live


_BIT_GENERATORS = {"MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64"}


def _load_generator(live: Any, state: dict[str, Any], path: str) -> Any:
    """A numpy random generator (the live one, or a new one where there was none yet: an env
    not yet seeded) in the saved state."""
    saved = state[_GENERATOR]
    if live is None:  # (made from numpy's own bit generators only)
        if saved.get("bit_generator") not in _BIT_GENERATORS:
            raise ValueError(f"{path}: an unknown bit generator {saved.get('bit_generator')!r}")
        bits = getattr(np.random, saved["bit_generator"])()
        live = (
            np.random.RandomState(bits) if state.get("legacy", False) else np.random.Generator(bits)
        )
    if isinstance(live, np.random.Generator) and not state.get("legacy", False):
        live.bit_generator.state = saved
    elif isinstance(live, np.random.RandomState) and state.get("legacy", False):
        live.set_state(saved)
    else:
        raise ValueError(f"{path}: the saved state is a random generator's, not a {_name(live)}'s")
    return live


def _load_sequence(live: Any, state: dict[str, Any], path: str) -> Any:
    items = state["items"]
    if isinstance(live, np.ndarray):  # (an object array: its items)
        live = list(live)
    if isinstance(live, set):  # (of numbers or strings: loaded whole)
        live.clear()
        live.update(load_state(None, s, path) for s in items)
        return live
    if not isinstance(live, list | tuple | collections.deque) or len(live) != len(items):
        live = [None] * len(items)  # (only data can be loaded into nothing)
    pairs = enumerate(zip(live, items, strict=True))
    loaded = [load_state(old, s, f"{path}[{i}]") for i, (old, s) in pairs]
    if state[_SEQUENCE] == "set":
        return frozenset(loaded)
    if isinstance(live, list):
        live[:] = loaded
        return live
    if isinstance(live, collections.deque):
        live.clear()
        live.extend(loaded)
        return live
    if isinstance(live, tuple) and hasattr(live, "_fields"):  # a namedtuple's class
        return type(live)(*loaded)
    return tuple(loaded) if state[_SEQUENCE] == "tuple" else loaded


def _equal(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except (ValueError, TypeError):  # (arrays and the like)
        return False
