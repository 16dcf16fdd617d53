"""Run directories for launch scripts, and tools over a tree of finished or running runs.

Only directories and JSON / CSV files here: the logger that writes ``progress.csv`` and the
snapshots is rl-runners' (``rl_runners.logger_context``), which rl-launch does not import.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._files import write_json_atomic

__all__ = ["PARAMS_FILE", "PROGRESS_FILE", "add_exp_param", "check_progress", "run_context"]

PARAMS_FILE = "params.json"
PROGRESS_FILE = "progress.csv"


def _run_dir(log_dir: str | os.PathLike, run_ID: Any, override_prefix: bool) -> Path:
    """``log_dir/run_<run_ID>``; a relative ``log_dir`` not already under ``./data`` goes
    under ``./data/local/<yyyymmdd>/<hhmmss>/`` (the rule of ``rl_runners.logger_context``)."""
    run_dir = Path(log_dir) / f"run_{run_ID}"
    absolute = Path(os.path.abspath(run_dir))
    data_root = Path.cwd() / "data"
    if override_prefix or run_dir.is_absolute() or data_root in absolute.parents:
        return absolute
    now = datetime.datetime.now()
    return data_root / "local" / now.strftime("%Y%m%d") / now.strftime("%H%M%S") / run_dir


@contextmanager
def run_context(
    log_dir: str | os.PathLike,
    run_ID: Any,
    name: str,
    log_params: Mapping[str, Any] | None = None,
    override_prefix: bool = False,
) -> Iterator[Path]:
    """Make the run directory ``log_dir/run_<run_ID>`` and its ``params.json``; yield it.

    ``params.json`` holds ``log_params`` with ``name`` and ``run_ID`` (an existing one is kept
    when ``log_params`` is None).  The directory rule is ``rl_runners.logger_context``'s (a
    launched run's ``log_dir`` is absolute, so it is used as given), so the two agree: inside
    the block, ``rl_runners.logger_context(run_dir.parent, run_ID, name, override_prefix=True)``
    logs into the same directory and keeps this ``params.json``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if log_params is not None and not isinstance(log_params, Mapping):
        raise TypeError(f"log_params must be a mapping or None, got {type(log_params).__name__}")
    run_dir = _run_dir(log_dir, run_ID, override_prefix)
    run_dir.mkdir(parents=True, exist_ok=True)
    params_file = run_dir / PARAMS_FILE
    if log_params is not None or not params_file.exists():
        params = {**(log_params or {}), "name": name, "run_ID": run_ID}
        write_json_atomic(params_file, params, "log_params")
    yield run_dir


def _rows(path: Path) -> int:
    """Data rows of a CSV file (its lines after the header)."""
    with open(path, encoding="utf-8", newline="") as f:
        return max(sum(1 for line in f if line.strip()) - 1, 0)


def check_progress(exp_dir: str | os.PathLike | None = None) -> dict[Path, int]:
    """Print, and return, the number of data rows in every ``progress.csv`` under ``exp_dir``
    (default: the current directory); one row per log interval a run has written."""
    root = Path(exp_dir if exp_dir is not None else Path.cwd())
    if not root.is_dir():
        raise FileNotFoundError(f"exp_dir {str(root)!r} is not a directory")
    counts = {path: _rows(path) for path in sorted(root.rglob(PROGRESS_FILE))}
    for path, rows in counts.items():
        print(f"{rows:8d}  {path.relative_to(root)}")
    if not counts:
        print(f"no {PROGRESS_FILE} under {root}")
    return counts


def add_exp_param(
    param_name: str,
    param_val: Any,
    exp_dir: str | os.PathLike | None = None,
    write: bool = False,
) -> list[Path]:
    """Put ``param_name = param_val`` into the ``params.json`` of every immediate
    subdirectory of ``exp_dir`` (default: the current directory): a distinguishing setting
    added after the fact.  Prints each change; writes only with ``write=True`` (a dry run
    otherwise).  Returns the files changed (or that would be)."""
    if not isinstance(param_name, str) or not param_name:
        raise ValueError(f"param_name must be a non-empty str, got {param_name!r}")
    root = Path(exp_dir if exp_dir is not None else Path.cwd())
    if not root.is_dir():
        raise FileNotFoundError(f"exp_dir {str(root)!r} is not a directory")
    changed = []
    for params_file in sorted(root.glob(f"*/{PARAMS_FILE}")):
        with open(params_file, encoding="utf-8") as f:
            params = json.load(f)
        if not isinstance(params, dict):
            raise ValueError(f"{params_file} does not hold a JSON object")
        if param_name in params and params[param_name] == param_val:
            continue
        old = f" (was {params[param_name]!r})" if param_name in params else ""
        verb = "set" if write else "would set"
        print(f"{verb} {param_name}={param_val!r}{old} in {params_file}")
        if write:
            write_json_atomic(params_file, {**params, param_name: param_val}, "param_val")
        changed.append(params_file)
    return changed
