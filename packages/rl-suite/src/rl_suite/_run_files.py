"""Reading a run directory back: its configuration (``params.json``, or a configuration file
given to ``--config``), its checkpoints (``params.pt``, ``itr_<n>.pt``) with the settings they
were saved under, and the step counts that ``resume`` continues from."""

from __future__ import annotations

import contextlib
import copy
import csv
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rl_arrays import as_count
from rl_runners import (
    find_checkpoint,
    load_data,
)

from ._config import ALGOS, DEFAULTS, merge_config

__all__ = [
    "config_problem",
    "first_line",
    "load_config",
    "more_steps",
    "read_config_file",
    "read_run_checkpoint",
    "run_dir_of",
    "settings_of",
    "stopped_before_its_first_checkpoint",
    "write_steps",
]


def more_steps(run_dir: Path, steps: int) -> int:
    """``steps`` for a resume, checked: no fewer than the run has trained."""
    steps = as_count("steps", steps, 1, expected="a positive int")
    done = _steps_done(run_dir)
    if steps < done:
        raise ValueError(
            f"--steps {steps:,}: the run in {run_dir} has trained {done:,} already; give more"
        )
    return steps


def write_steps(run_dir: Path, steps: int) -> None:
    """``steps`` into the run's ``params.json`` (replaced whole), so that a later resume goes
    on to them too."""
    params_file = run_dir / "params.json"
    params = json.loads(params_file.read_text(encoding="utf-8"))
    params["config"]["steps"] = steps
    temporary = params_file.with_name(params_file.name + ".tmp")
    temporary.write_text(json.dumps(params, indent=2), encoding="utf-8")
    os.replace(temporary, params_file)


def _steps_done(run_dir: Path) -> int:
    """The environment steps of the run's last logged row (0 before any)."""
    try:
        with open(run_dir / "progress.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return 0
    return int(float(rows[-1]["CumSteps"])) if rows and rows[-1].get("CumSteps") else 0


def stopped_before_its_first_checkpoint(run_dir: Path) -> bool:
    """A run directory of a run that keeps checkpoints, but holds none (it was killed before
    its first was committed): nothing in it can be continued."""
    try:
        if load_config(run_dir)["runner"]["snapshot_mode"] == "none":
            return False
        find_checkpoint(run_dir)
    except FileNotFoundError as error:
        return "holds no checkpoint" in str(error)
    except (OSError, ValueError):
        return False
    return False


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """The configuration a run directory was trained with (its ``params.json``), its shape
    checked: a missing, damaged or mistyped file is an error that names it."""
    params_file = Path(run_dir) / "params.json"
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(
            f"{run_dir} is not a directory: give a run directory (`rl-suite train` prints the "
            "one it makes)"
        )
    if not params_file.is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a run directory: it has no params.json (give the directory "
            "`rl-suite train` printed; for a sweep, one of its run_* directories)"
        )
    redo = "restore it from a copy, or train the run again"
    try:
        params = json.loads(params_file.read_text(encoding="utf-8"))
    except ValueError as error:  # (not UTF-8, or not JSON)
        raise ValueError(f"{params_file} is not valid JSON (damaged?): {error}; {redo}") from error
    if not isinstance(params, dict) or "config" not in params:
        raise ValueError(
            f"{params_file} was not written by `rl-suite train` (no 'config'): give the "
            "directory of a run it trained"
        )
    problem = config_problem(params["config"], DEFAULTS, "config")
    if problem is not None:
        raise ValueError(f"{params_file}: {problem}; correct it, or train the run again")
    return params["config"]


_SAVED_KEYS = ("algo", "env", "seed", "steps", "sampler", "agent", "runner")  # (every version)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The configuration of ``train --config FILE``: a JSON object of settings, the schema
    of a run's ``params.json`` (so that file itself works: its ``config`` is taken), the
    settings it leaves out at their defaults. Errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such configuration file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    settings = data.get("config", data) if isinstance(data, dict) else data
    if not isinstance(settings, dict) or "algo" not in settings:
        raise ValueError(
            f"{path} holds no configuration: a JSON object of settings with at least 'algo' "
            "(e.g. a run's params.json, or what `rl-suite train ... --dry-run` prints)"
        )
    config = copy.deepcopy(DEFAULTS)
    try:
        merge_config(config, settings)
    except (KeyError, ValueError) as error:
        raise ValueError(f"{path}: {error.args[0] if error.args else error}") from error
    problem = config_problem(config, DEFAULTS, "config")
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    return config


def config_problem(value: Any, default: Any, where: str) -> str | None:
    """What makes a saved setting unusable, judged by the type of its default: groups are
    JSON objects, flags true or false, numbers numbers, names strings (None: anything)."""
    if isinstance(default, dict):
        if not isinstance(value, dict):
            return f"{where} must be a JSON object of settings, got {value!r}"
        if where == "config":
            missing = [key for key in _SAVED_KEYS if key not in value]
            if missing:
                return f"config lacks {', '.join(missing)}"
            if value["algo"] not in ALGOS:
                return f"config.algo must be one of {', '.join(ALGOS)}, got {value['algo']!r}"
        if where.endswith("_kwargs"):  # (keyword arguments: their classes check them)
            return None
        for key in default.keys() & value.keys():
            problem = config_problem(value[key], default[key], f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    if isinstance(default, bool):
        expected = None if isinstance(value, bool) else "true or false"
    elif isinstance(default, int | float):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        expected = None if number else "a number"
    elif isinstance(default, str):
        expected = None if isinstance(value, str) else "a string"
    else:  # (None: the class it goes to checks it)
        expected = None
    return None if expected is None else f"{where} must be {expected}, got {value!r}"


@contextlib.contextmanager
def settings_of(params_file: Path) -> Iterator[None]:
    """Errors building what a saved configuration describes name the file it came from."""
    try:
        yield
    except (ValueError, KeyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ValueError(
            f"{params_file}: {message} (the run's saved configuration; correct it, or train "
            "the run again)"
        ) from error


_CHECKPOINT_FILE = re.compile(r"params\.pt|itr_(\d+)\.pt")


def _other_checkpoints(checkpoint: Path, command: str) -> str:
    """What to do about a damaged checkpoint: use the run's latest other one, if any."""
    others: dict[Path, float] = {}  # params.pt ("last" mode) first, then itr_<n>.pt, n down
    for path in checkpoint.parent.iterdir():
        if (match := _CHECKPOINT_FILE.fullmatch(path.name)) and path != checkpoint:
            others[path] = -int(match.group(1)) if match.group(1) else -math.inf
    if not others:
        return f"{checkpoint.parent} holds no other checkpoint: train the run again"
    latest = min(others, key=lambda path: others[path])
    return f"use another of the run's checkpoints: rl-suite {command} {latest}"


def run_dir_of(path: str | Path, checkpoint: str | Path | None) -> tuple[Path, Any]:
    """``(run directory, checkpoint)`` for a run directory or one of its checkpoint files."""
    if Path(path).suffix == ".pt" and Path(path).is_file() and checkpoint is None:
        return Path(path).parent, Path(path)
    return Path(path), checkpoint


def first_line(error: BaseException) -> str:
    """The gist of an error from a library: its first sentence (torch's run to paragraphs)."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return line.split(". ")[0] if len(line) > 100 else line


def read_run_checkpoint(path: str | Path, command: str = "eval") -> tuple[Path, dict[str, Any]]:
    """The checkpoint ``path`` names (a file, or a run directory: see ``find_checkpoint``)
    and its content; with ``command="resume"`` the environments' state saved beside it is
    read too. A damaged file is a ValueError that names it and another checkpoint to use."""
    checkpoint_path = find_checkpoint(path)
    try:
        if checkpoint_path.stat().st_size == 0:
            raise ValueError("the file is empty")
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        if not isinstance(checkpoint, dict) or "agent_state_dict" not in checkpoint:
            raise ValueError("it holds no agent_state_dict")
    except Exception as error:  # (zip, pickle, EOF and weights-only errors alike)
        raise ValueError(
            f"{checkpoint_path} is not a readable checkpoint (truncated or damaged?): "
            f"{first_line(error)}; {_other_checkpoints(checkpoint_path, command)}"
        ) from error
    sampler_file = checkpoint.get("sampler_file")
    if command == "resume" and sampler_file and (checkpoint_path.parent / sampler_file).is_file():
        try:
            load_data(checkpoint_path.parent / sampler_file)
        except ValueError as error:
            raise ValueError(
                f"{checkpoint_path.parent / sampler_file} (the environments' state saved with "
                f"{checkpoint_path.name}) is not readable (truncated or damaged?): "
                f"{first_line(error)}; {_other_checkpoints(checkpoint_path, command)}"
            ) from error
    return checkpoint_path, checkpoint
