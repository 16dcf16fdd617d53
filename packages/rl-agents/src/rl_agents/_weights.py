"""Checkpoint surgery: load a chosen part of one model's weights into another.

The use case: a pretrained part (an encoder, a torso) goes into a fresh model, perhaps under
another name (``encoder.`` there, ``actor.mlp.`` here), while the rest of the fresh model
keeps its own initial weights. Everything is checked before anything is loaded.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ._base_agent import BaseAgent

__all__ = ["load_weights"]

# What weights are loaded into, and taken from (besides a checkpoint's path).
_Holder = torch.nn.Module | BaseAgent

# Where our runners' checkpoints keep the agent's state dict (get_itr_snapshot).
_AGENT_KEY = "agent_state_dict"


def _flatten(state: Mapping[str, Any]) -> dict[str, tuple[tuple[str, ...], Any]]:
    """Every leaf of a (nested) state dict by its dotted key, with its path of keys: an
    agent's state dict may nest per-network ones (``{"model": {...}, "target": {...}}``)."""
    flat: dict[str, tuple[tuple[str, ...], Any]] = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, (*path, str(key)))
            else:
                flat[".".join((*path, str(key)))] = ((*path, key), value)

    walk(state, ())
    return flat


def _rebuilt(state: Mapping[str, Any], replace: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """A copy of the nested ``state`` with the leaves at the paths in ``replace`` replaced
    (dict types and torch's ``_metadata`` kept, so ``load_state_dict`` reads it as before)."""

    def copy(node: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = OrderedDict() if isinstance(node, OrderedDict) else {}
        for key, value in node.items():
            here = (*path, key)
            if isinstance(value, Mapping):
                out[key] = copy(value, here)
            else:
                out[key] = replace.get(here, value)
        metadata = getattr(node, "_metadata", None)
        if metadata is not None:
            out._metadata = metadata  # type: ignore[attr-defined]  # torch's state-dict metadata
        return out

    return copy(state, ())


def _source_state(
    source: Mapping[str, Any] | _Holder | str | os.PathLike[str], weights_only: bool
) -> Mapping[str, Any]:
    """The state dict to take weights from: a mapping, an object with ``state_dict()`` (a
    module or an agent), or the path of a checkpoint (a runner's: its
    ``"agent_state_dict"``; else the state dict saved there)."""
    if isinstance(source, (str, os.PathLike)):
        loaded = torch.load(source, map_location="cpu", weights_only=weights_only)
        if isinstance(loaded, Mapping) and _AGENT_KEY in loaded:
            loaded = loaded[_AGENT_KEY]
        if not isinstance(loaded, Mapping):
            raise TypeError(
                f"the checkpoint {os.fspath(source)!r} holds a {type(loaded).__name__}, not a "
                "state dict (nor a runner's checkpoint with an 'agent_state_dict')"
            )
        return loaded
    if isinstance(source, Mapping):
        return source
    if callable(getattr(source, "state_dict", None)):
        return source.state_dict()
    raise TypeError(
        "source must be a state dict, a module or agent with state_dict(), or the path of a "
        f"checkpoint, got {type(source).__name__}"
    )


def _as_strings(name: str, value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value)
    if not values or not all(isinstance(v, str) and v for v in values):
        raise ValueError(f"{name} must be a non-empty string or a list of them, got {value!r}")
    return values


def _check_rename(rename: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """The rename rules, longest old prefix first (a key is renamed by the longest old
    prefix it starts with, once)."""
    if rename is None:
        return []
    if not isinstance(rename, Mapping) or not all(
        isinstance(old, str) and old and isinstance(new, str) for old, new in rename.items()
    ):
        raise ValueError(
            "rename must map old key prefixes (non-empty strings) to new ones (strings), "
            f"e.g. {{'encoder.': 'actor.mlp.'}}, got {rename!r}"
        )
    return sorted(rename.items(), key=lambda item: len(item[0]), reverse=True)


def _renamed(key: str, rules: list[tuple[str, str]]) -> str:
    for old, new in rules:
        if key.startswith(old):
            return new + key[len(old) :]
    return key


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def load_weights(
    target: _Holder,
    source: Mapping[str, Any] | _Holder | str | os.PathLike[str],
    rename: Mapping[str, str] | None = None,
    prefixes: str | Sequence[str] | None = None,
    strict: bool = True,
    *,
    weights_only: bool = True,
) -> list[str]:
    """Copy the weights of ``source`` whose keys start with one of ``prefixes`` (all when
    None) into ``target``, renaming key prefixes by ``rename`` (``{"old.": "new."}``, the
    longest old prefix wins); returns the target keys loaded. The rest keeps its weights.

    ``target``: a module or an agent; ``source``: a state dict, a module or agent, or a
    checkpoint path, read with ``torch.load(weights_only=True)`` (``weights_only=False`` only
    for a file you trust). Nested agent state dicts use dotted keys (``"model.head."``).
    Everything is checked first: one ``ValueError`` lists every problem (missing keys with
    ``strict``, shape mismatches, unused prefixes, rename collisions) and nothing is loaded.
    Details: the package README, "Deploying policies and reusing weights".
    """
    if not callable(getattr(target, "state_dict", None)) or not callable(
        getattr(target, "load_state_dict", None)
    ):
        raise TypeError(
            "target must be a module or an agent with state_dict() and load_state_dict(), got "
            f"{type(target).__name__}"
        )
    prefix_list = _as_strings("prefixes", prefixes)
    rules = _check_rename(rename)
    own = target.state_dict()
    own_flat = _flatten(own)
    source_flat = _flatten(_source_state(source, weights_only))

    problems: list[str] = []
    if prefix_list is None:
        selected = list(source_flat)
    else:
        selected = [k for k in source_flat if any(k.startswith(p) for p in prefix_list)]
        unused = [p for p in prefix_list if not any(k.startswith(p) for k in source_flat)]
        if strict and unused:
            problems.append(f"prefixes that select no source key: {unused}")

    renamed: dict[str, str] = {}  # target key -> source key
    for key in selected:
        new = _renamed(key, rules)
        if new in renamed:
            problems.append(f"{renamed[new]!r} and {key!r} would both load into {new!r}")
        renamed[new] = key

    missing, mismatched, replace = [], [], {}
    for new, key in renamed.items():
        value = source_flat[key][1]
        if new not in own_flat:
            missing.append(key if new == key else f"{key} (as {new})")
            continue
        path, current = own_flat[new]
        same = (
            isinstance(value, torch.Tensor) and value.shape == current.shape
            if isinstance(current, torch.Tensor)
            else not isinstance(value, torch.Tensor)
        )
        if not same:
            name = key if new == key else f"{key} -> {new}"
            mismatched.append(f"{name}: {_describe(value)} for {_describe(current)}")
            continue
        replace[path] = value
    if strict and missing:
        problems.append(f"selected keys with no match in the target: {missing}")
    if mismatched:
        problems.append(f"shape mismatches (source for target): {mismatched}")
    if problems:
        raise ValueError(
            f"load_weights into {type(target).__name__}: nothing was loaded.\n  "
            + "\n  ".join(problems)
        )
    target.load_state_dict(_rebuilt(own, replace))
    loaded = {path: new for new, (path, _) in own_flat.items()}
    return [loaded[path] for path in replace]
