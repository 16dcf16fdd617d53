"""Sweeps: a grid of settings x seeds, read from a JSON file and run through rl-launch's queue.

The file (see the README's "Sweeps") names a base configuration (``preset`` and/or ``algo``
and ``env``, ``steps``, fixed ``overrides`` in ``--set`` form) and a ``grid``: levels of named
variants, each variant a list of overrides.  The levels become rl-launch's ``VariantLevel``
objects, crossed by ``make_variants`` (directories named after the variants).  Every variant's
configuration is built here, with ``build``, before any run starts, so that a typo fails in a
second rather than after the first run.  ``_sweep_launch`` runs them: each ``_sweep_run.py``
in a subprocess that the queue pins to its share of the machine (seed = run ID), or, with
``engine="ray"``, as Ray Tune trials (``_ray_sweep``), on one machine or a cluster.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_arrays import as_count
from rl_launch import VariantLevel, encode_affinity, make_variants, n_run_slots

from ._config import (
    PRESETS,
    apply_overrides,
    default_preset,
    make_config,
    merge_config,
    parse_value,
)

__all__ = [
    "ENGINES",
    "SWEEP_FILE",
    "TUNE_DIR",
    "Sweep",
    "load_sweep",
    "variant_config",
]

SWEEP_FILE = "sweep.json"  # in the sweep directory: the file's settings and the base config
TUNE_DIR = "tune"  # in the sweep directory, with the ray engine: Tune's trials and checkpoints
ENGINES = ("local", "ray")
RAY_MISSING = "the ray engine needs Ray Tune: pip install 'rl-suite[ray]'"
RAY_KEYS = ("gpu_per_run", "max_failures")  # read by the ray engine only
SPEC_KEYS = (
    "title",
    "preset",
    "algo",
    "env",
    "steps",
    "overrides",
    "grid",
    "seeds",
    "cpu_per_run",
    *RAY_KEYS,
    "log_dir",
)
VARIANT_KEYS = ("name", "overrides")


@dataclass(frozen=True)
class Sweep:
    """A checked sweep file: every variant's configuration has been built once."""

    title: str
    sweep_dir: Path  # absolute; holds sweep.json and one directory per variant
    spec: dict[str, Any]  # the file's contents
    base_config: dict[str, Any]  # preset, algo, env, steps and overrides applied
    variants: list[dict[str, Any]]  # rl-launch's: only the swept settings
    log_dirs: list[str]  # one per variant, relative to sweep_dir
    seeds: int  # runs per variant, seeds (= run IDs) 0 .. seeds - 1
    affinity_code: str  # the queue's: cpu_per_run cores per run ("" with the ray engine)
    engine: str = "local"  # one of ENGINES
    cpu_per_run: int = 1
    gpu_per_run: float = 0.0  # (ray) a fraction shares a GPU between trials
    max_failures: int = 3  # (ray) times a trial that died is continued from its checkpoint
    resumed: bool = False  # (ray) sweep_dir holds this sweep, stopped: it continues

    @property
    def n_slots(self) -> int:
        """Runs at once on this machine (the local queue's run slots)."""
        return n_run_slots(self.affinity_code)


def variant_config(base: dict[str, Any], variant: dict[str, Any], seed: int) -> dict[str, Any]:
    """One run's configuration: ``base`` with the variant laid over it by ``--set``'s rules
    (unknown settings refused, ``*_kwargs`` dicts open) and ``seed``."""
    config = copy.deepcopy(base)
    merge_config(config, variant)
    config["seed"] = seed
    return config


def _reworded(where: str, error: Exception) -> ValueError:
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    return ValueError(f"{where}: {message}")


def _int(spec: dict[str, Any], key: str, default: int | None, where: str) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    return as_count(f"{where}: {key!r}", value, 1, expected="an int >= 1")  # 3.0 too


def _str(spec: dict[str, Any], key: str, where: str) -> str | None:
    value = spec.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{where}: {key!r} must be a non-empty string, got {value!r}")
    return value


def _overrides(spec: dict[str, Any], where: str) -> list[str]:
    value = spec.get("overrides", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"{where}: 'overrides' must be a list of 'key=value' strings, got {value!r}"
        )
    return value


def _keys(spec: Any, known: tuple[str, ...], where: str) -> None:
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be a JSON object, got {spec!r}")
    unknown = [key for key in spec if key not in known]
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {', '.join(known)}")


def _base_config(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """What ``rl-suite train`` would run with the same preset, algo, env, steps and --set."""
    preset, algo, env = (_str(spec, key, where) for key in ("preset", "algo", "env"))
    if preset is None:
        if algo is None:
            raise ValueError(f"{where}: give a 'preset' or an 'algo' (or both)")
        preset = default_preset(algo, env or "CartPole-v1")
    try:
        config = make_config(preset, algo=algo, env=env, steps=_int(spec, "steps", None, where))
        if preset is not None and algo is not None and PRESETS[preset]["algo"] != algo:
            raise ValueError(f"preset {preset!r} is for {PRESETS[preset]['algo']}, not {algo}")
        return apply_overrides(config, _overrides(spec, where))
    except (KeyError, ValueError) as error:
        raise _reworded(where, error) from error


def _setting(assignment: str, where: str) -> tuple[tuple[str, ...], Any]:
    """``"algo_kwargs.learning_rate=3e-4"`` -> ``(("algo_kwargs", "learning_rate"), 3e-4)``."""
    key, sep, text = assignment.partition("=")
    if not sep or not key or "" in key.split("."):
        raise ValueError(f"{where}: an override is 'key=value', got {assignment!r}")
    return tuple(key.split(".")), parse_value(text)


def _base_value(base: dict[str, Any], path: tuple[str, ...], where: str) -> Any:
    value: Any = base
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise ValueError(
                f"{where} does not set {'.'.join(path)}, which another variant of its level sets, "
                "and the base configuration has no value for it: set it in every variant"
            )
        value = value[key]
    return value


def _level(n: int, level: Any, base: dict[str, Any], where: str) -> VariantLevel:
    """``grid[n]`` as a ``VariantLevel``: the keys any of its variants sets; a variant that
    leaves one of them out keeps the base configuration's value."""
    here = f"{where}: grid[{n}]"
    if not isinstance(level, list) or not level:
        raise ValueError(f"{here} must be a non-empty list of variants, got {level!r}")
    names, settings = [], []
    for i, variant in enumerate(level):
        _keys(variant, VARIANT_KEYS, f"{here}[{i}]")
        name = _str(variant, "name", f"{here}[{i}]")
        if name is None:
            raise ValueError(f"{here}[{i}] has no 'name' (it names the variant's directory)")
        names.append(name)
        label = f"{here}[{i}] ({name!r})"
        settings.append(dict(_setting(a, label) for a in _overrides(variant, label)))
    paths = list(dict.fromkeys(path for setting in settings for path in setting))
    if not paths:
        raise ValueError(f"{here}: no variant overrides anything")
    values = [
        [
            setting[path] if path in setting else _base_value(base, path, f"{here}[{i}] ({name!r})")
            for path in paths
        ]
        for i, (name, setting) in enumerate(zip(names, settings, strict=True))
    ]
    return VariantLevel(paths, values, names)


def _ray_settings(spec: dict[str, Any], engine: str, where: str) -> tuple[float, int]:
    """``gpu_per_run`` (a number >= 0; above 1 a whole number, as Ray asks) and
    ``max_failures`` (an int >= 0); refused with the local engine, which has no use for them."""
    if engine != "ray":
        for key in RAY_KEYS:
            if key in spec:
                raise ValueError(
                    f"{where}: {key!r} is read by the ray engine only: run the sweep with "
                    "--engine ray, or leave it out"
                )
    gpus = spec.get("gpu_per_run", 0)
    if (
        isinstance(gpus, bool)
        or not isinstance(gpus, (int, float))
        or not 0 <= gpus < math.inf
        or (gpus > 1 and not float(gpus).is_integer())
    ):
        raise ValueError(
            f"{where}: 'gpu_per_run' must be a number >= 0 (a fraction of one GPU, or whole "
            f"GPUs), got {gpus!r}"
        )
    failures = as_count(f"{where}: 'max_failures'", spec.get("max_failures", 3), 0)
    return float(gpus), failures


def _check_ray_run(config: dict[str, Any], gpu_per_run: float) -> None:
    """What a Tune trial cannot do: start processes of its own beside the one Ray gives it
    (not tried: Ray's resources would not count them), or use GPUs other than the ones it
    asked Ray for."""
    runner = config["runner"]
    if runner.get("asynchronous", False) or runner.get("processes", 1) != 1:
        raise ValueError(
            "the ray engine runs each trial in the one process Ray gives it; runs with "
            "runner.asynchronous or runner.processes > 1 start processes of their own: use "
            "the local engine"
        )
    device = str(config["device"])
    cuda = re.fullmatch(r"cuda(?::(\d+))?", device)
    if device != "cpu" and cuda is None:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    index = None if cuda is None else int(cuda.group(1) or 0)
    if index is None and gpu_per_run > 0:
        raise ValueError(
            f"gpu_per_run={gpu_per_run:g} but the runs train on device {device!r}: "
            "set device='cuda' in the overrides, or leave gpu_per_run out"
        )
    if index is not None and gpu_per_run == 0:
        raise ValueError(
            f"device {device!r} needs a GPU: set gpu_per_run (Tune gives a trial "
            "only the GPUs it asks for)"
        )
    if index is not None and index >= math.ceil(gpu_per_run):
        raise ValueError(
            f"device {device!r} is not among the {math.ceil(gpu_per_run)} GPU(s) a "
            f"trial gets with gpu_per_run={gpu_per_run:g} (Ray numbers a trial's GPUs from "
            "cuda:0)"
        )


def _stopped_ray_sweep(sweep_dir: Path, title: str, spec: dict[str, Any]) -> bool:
    """Whether ``sweep_dir`` holds the ray engine's run of this same sweep (to continue)."""
    if not (sweep_dir / TUNE_DIR).is_dir() or not (sweep_dir / SWEEP_FILE).is_file():
        return False
    saved = json.loads((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8"))
    if saved.get("title") != title or saved.get("spec") != spec:
        raise FileExistsError(
            f"{sweep_dir} holds another Ray sweep (its {SWEEP_FILE} differs from this file): "
            "choose another log_dir (or --log-dir)"
        )
    return True


def load_sweep(path: str | Path, log_dir: str | Path | None = None, engine: str = "local") -> Sweep:
    """Read and check a sweep file; ``log_dir`` (e.g. the command line's) replaces its own;
    ``engine``: ``"local"`` (rl-launch's queue) or ``"ray"`` (Ray Tune, see the README).

    Every problem is a ValueError naming the key, level or variant (unknown keys, bad types,
    an unknown preset or setting, more cores per run than the machine has, a variant whose
    runner cannot be built), or a FileExistsError for a sweep directory that is not empty
    (except, with the ray engine, one that holds this same sweep: it continues).
    """
    from ._trainer import build  # (torch: only once the file is known to be worth it)

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        raise ImportError(RAY_MISSING)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {str(path)!r} does not exist")
    where = f"sweep file {path}"
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # (not UTF-8 text, or not JSON)
        raise ValueError(f"{where} is not valid JSON: {error}") from error
    _keys(spec, SPEC_KEYS, where)
    title = _str(spec, "title", where) or path.stem
    if "/" in title or os.sep in title or title in (".", ".."):
        raise ValueError(f"{where}: 'title' must be a plain name (no '/'), got {title!r}")
    sweep_dir = Path(log_dir or _str(spec, "log_dir", where) or f"runs/sweep-{title}").resolve()
    resumed = engine == "ray" and _stopped_ray_sweep(sweep_dir, title, spec)
    if not resumed and sweep_dir.exists() and (not sweep_dir.is_dir() or any(sweep_dir.iterdir())):
        raise FileExistsError(
            f"{sweep_dir} already exists and is not empty: a sweep never writes over another; "
            "choose another log_dir (or --log-dir)"
        )
    seeds = _int(spec, "seeds", 1, where)
    if seeds is None:  # ("seeds": null)
        raise ValueError(f"{where}: 'seeds' must be an int >= 1, got None")
    cpu_per_run = _int(spec, "cpu_per_run", 1, where)
    assert cpu_per_run is not None  # (it has a default)
    gpu_per_run, max_failures = _ray_settings(spec, engine, where)
    base = _base_config(spec, where)
    grid = spec.get("grid")
    if not isinstance(grid, list) or not grid:
        raise ValueError(f"{where}: 'grid' must be a non-empty list of levels (lists of variants)")
    levels = [_level(n, level, base, where) for n, level in enumerate(grid)]
    try:
        variants, log_dirs = make_variants(*levels)
    except ValueError as error:  # ("variant level n" is grid[n])
        raise _reworded(f"{where}: grid", error) from error
    affinity_code = ""  # (Ray places trials on the cluster's machines, not on this one)
    try:
        if engine == "local":
            affinity_code = encode_affinity(cpu_per_run=cpu_per_run)
    except ValueError as error:
        raise _reworded(where, error) from error
    for variant, name in zip(variants, log_dirs, strict=True):
        try:
            config = variant_config(base, variant, seed=0)
            if engine == "ray":  # its GPUs are the trial's, wherever Tune puts it
                _check_ray_run(config, gpu_per_run)
                config["device"] = "cpu"
            build(config)
        except (KeyError, ValueError) as error:
            raise _reworded(f"{where}: variant {name!r}", error) from error
    return Sweep(
        title,
        sweep_dir,
        spec,
        base,
        variants,
        log_dirs,
        seeds,
        affinity_code,
        engine,
        cpu_per_run,
        gpu_per_run,
        max_failures,
        resumed,
    )


def write_json(path: Path, data: Any) -> None:
    """Whole or not at all: a temporary file renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)
