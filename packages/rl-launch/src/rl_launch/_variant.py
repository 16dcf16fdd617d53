"""Variants: the settings of a sweep, crossed level by level, each with its log directory.

A ``VariantLevel`` lists key paths into a config, rows of values for them, and one directory
name per row.  ``make_variants`` crosses the levels in order: the variant dicts hold only the
swept fields, and ``update_config(default, variant)`` lays one over the full default config.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from ._files import write_json_atomic

__all__ = [
    "VARIANT_FILE",
    "VariantLevel",
    "load_variant",
    "make_variants",
    "save_variant",
    "update_config",
]

VARIANT_FILE = "variant.json"


class VariantLevel(NamedTuple):
    """One level of a sweep.

    ``keys``: key paths into the config, each a tuple of keys (a plain str is a top-level
    key).  ``values``: one row per setting, a value for each key, in order.  ``dir_names``:
    one log directory name per row (a relative path; unique within the level).
    """

    keys: Sequence[Sequence[str] | str]
    values: Sequence[Sequence[Any]]
    dir_names: Sequence[str]


def _key_path(level: int, key: Any) -> tuple[str, ...]:
    path = (key,) if isinstance(key, str) else tuple(key) if isinstance(key, Sequence) else None
    if not path or not all(isinstance(k, str) and k for k in path):
        raise ValueError(
            f"variant level {level}: a key must be a non-empty str or tuple of str, got {key!r}"
        )
    return path


def _check_dir_name(level: int, name: Any) -> None:
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"variant level {level}: dir name {name!r} must be a non-empty str")
    parts = PurePosixPath(name.replace(os.sep, "/")).parts
    if PurePosixPath(name).is_absolute() or os.path.isabs(name) or ".." in parts:
        raise ValueError(
            f"variant level {level}: dir name {name!r} must be a relative path without '..'"
        )


def _check_level(n: int, level: Any, taken: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The level's key paths; ValueError for anything that would make a wrong product."""
    if not isinstance(level, VariantLevel):
        raise TypeError(f"variant level {n} must be a VariantLevel, got {type(level).__name__}")
    paths = [_key_path(n, key) for key in level.keys]
    if not paths:
        raise ValueError(f"variant level {n} has no keys")
    for path in paths:
        for other in taken:
            shorter = min(len(path), len(other))
            if path[:shorter] == other[:shorter]:
                raise ValueError(
                    f"variant level {n}: key {'.'.join(path)!r} clashes with key "
                    f"{'.'.join(other)!r} (the same field, or one inside the other)"
                )
        taken.append(path)
    if not level.values:
        raise ValueError(f"variant level {n} has no values: the product would be empty")
    for i, row in enumerate(level.values):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) != len(paths):
            raise ValueError(
                f"variant level {n}: values[{i}] must be a list of {len(paths)} value(s), one "
                f"per key, got {row!r}"
            )
    if isinstance(level.dir_names, str) or len(level.dir_names) != len(level.values):
        raise ValueError(
            f"variant level {n}: dir_names must hold one name per row of values "
            f"({len(level.values)}), got {level.dir_names!r}"
        )
    for name in level.dir_names:
        _check_dir_name(n, name)
    if len(set(level.dir_names)) != len(level.dir_names):
        raise ValueError(f"variant level {n}: dir_names repeat: {list(level.dir_names)}")
    return paths


def _set(config: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        config = config.setdefault(key, {})
    config[path[-1]] = copy.deepcopy(value)


def _cross_variants(
    prev_variants: list[dict[str, Any]],
    prev_log_dirs: list[str],
    paths: list[tuple[str, ...]],
    level: VariantLevel,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every previous variant with every row of ``level``."""
    variants, log_dirs = [], []
    for variant, log_dir in zip(prev_variants, prev_log_dirs, strict=True):
        for row, dir_name in zip(level.values, level.dir_names, strict=True):
            new = copy.deepcopy(variant)
            for path, value in zip(paths, row, strict=True):
                _set(new, path, value)
            variants.append(new)
            log_dirs.append(os.path.join(log_dir, dir_name) if log_dir else dir_name)
    return variants, log_dirs


def make_variants(*variant_levels: VariantLevel) -> tuple[list[dict[str, Any]], list[str]]:
    """Cross the levels in order: ``(variants, log_dirs)``, one log directory per variant
    (the levels' dir names joined), the last level varying fastest."""
    if not variant_levels:
        raise ValueError("make_variants needs at least one VariantLevel")
    variants: list[dict[str, Any]] = [{}]
    log_dirs = [""]
    taken: list[tuple[str, ...]] = []
    for n, level in enumerate(variant_levels):
        paths = _check_level(n, level, taken)
        variants, log_dirs = _cross_variants(variants, log_dirs, paths, level)
    return variants, log_dirs


def update_config(default: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    """A new config: ``default`` with the fields of ``variant`` put in, dict by dict.

    A key of ``variant`` that ``default`` lacks raises KeyError naming its path (a typo in a
    sweep would otherwise train the default silently).  Neither input is changed.
    """
    if not isinstance(default, Mapping):
        raise TypeError(f"default must be a mapping, got {type(default).__name__}")
    if not isinstance(variant, Mapping):
        raise TypeError(f"variant must be a mapping, got {type(variant).__name__}")
    config = copy.deepcopy(dict(default))
    _update(config, variant, ())
    return config


def _update(config: dict[str, Any], variant: Mapping[str, Any], path: tuple[str, ...]) -> None:
    for key, value in variant.items():
        here = ".".join(map(str, (*path, key)))
        if key not in config:
            known = ", ".join(map(str, config)) or "none"
            raise KeyError(f"variant key {here!r} is not in the default config (known: {known})")
        if isinstance(config[key], Mapping) and isinstance(value, Mapping):
            config[key] = dict(config[key])
            _update(config[key], value, (*path, key))
        else:
            config[key] = copy.deepcopy(value)


def save_variant(variant: Mapping[str, Any], log_dir: str | os.PathLike) -> Path:
    """Write ``log_dir/variant.json`` (made atomically); returns its path."""
    if not isinstance(variant, Mapping):
        raise TypeError(f"variant must be a mapping, got {type(variant).__name__}")
    return write_json_atomic(Path(log_dir) / VARIANT_FILE, dict(variant), "variant")


def load_variant(log_dir: str | os.PathLike) -> dict[str, Any]:
    """The variant saved in ``log_dir`` (tuples come back as lists, as JSON has no tuple)."""
    path = Path(log_dir) / VARIANT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {VARIANT_FILE} in {log_dir}: was the run launched with it?")
    with open(path, encoding="utf-8") as f:
        return json.load(f)
