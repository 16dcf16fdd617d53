"""A local experiment queue: every run of a sweep is a subprocess of the launch script, pinned
to the cpus of a free run slot; the rest wait until a slot frees.

A run is called as ``python <script> <slot_affinity_code> <log_dir> <run_ID> <args...>``, with
an argument list and no shell, so no variant value or directory name is ever a command.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import Any, NamedTuple

import psutil

from ._affinity import check_slot_on_machine, slot_resources
from ._affinity_code import check_int, decode_code
from ._files import write_text_atomic
from ._slot_layout import slot_layout
from ._variant import save_variant

__all__ = [
    "EXPERIMENTS_TREE_FILE",
    "NUM_LAUNCHED_FILE",
    "STDERR_FILE",
    "STDOUT_FILE",
    "ExperimentsSummary",
    "LaunchArgs",
    "RunResult",
    "launch_experiment",
    "read_launch_args",
    "run_experiments",
]

NUM_LAUNCHED_FILE = "num_launched.txt"
EXPERIMENTS_TREE_FILE = "experiments_tree.txt"
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
TAIL_LINES = 20

# Runs first in the child: pin it to the cpus (inherited by every thread and process it
# starts), then become the real run with the same interpreter.  No shell is involved.
_PIN_TRAMPOLINE = (
    "import os, sys; "
    "os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')]); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)


class LaunchArgs(NamedTuple):
    """What a launched script gets on its command line."""

    affinity_code: str  # names the run slot: pass it to affinity_from_code
    log_dir: str  # the setting's directory: holds variant.json and run_<run_ID>/
    run_ID: int
    args: list[str]  # common_args, then this setting's runs_args


@dataclass(frozen=True)
class RunResult:
    """One finished run of ``run_experiments``."""

    log_dir: Path
    run_ID: int
    run_slot: int
    returncode: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def run_dir(self) -> Path:
        return self.log_dir / f"run_{self.run_ID}"

    @property
    def stdout(self) -> Path:
        return self.run_dir / STDOUT_FILE

    @property
    def stderr(self) -> Path:
        return self.run_dir / STDERR_FILE


@dataclass(frozen=True)
class ExperimentsSummary:
    """What ``run_experiments`` ran: every run, in the order of the settings and run IDs."""

    exp_dir: Path
    runs: tuple[RunResult, ...]

    @property
    def succeeded(self) -> list[RunResult]:
        return [run for run in self.runs if run.ok]

    @property
    def failed(self) -> list[RunResult]:
        return [run for run in self.runs if not run.ok]


def read_launch_args(argv: Sequence[str] | None = None) -> LaunchArgs:
    """Parse a launched script's arguments (default ``sys.argv[1:]``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3:
        raise ValueError(
            "expected <slot_affinity_code> <log_dir> <run_ID> [args...] (as run_experiments "
            f"passes them), got {argv!r}"
        )
    try:
        run_ID = int(argv[2])
    except ValueError:
        raise ValueError(f"run_ID (the third argument) must be an int, got {argv[2]!r}") from None
    return LaunchArgs(argv[0], argv[1], run_ID, argv[3:])


def _with_slot(affinity_code: str, run_slot: int) -> str:
    _, slot = decode_code(affinity_code)
    if slot is not None:
        raise ValueError(
            f"affinity_code {affinity_code!r} already names run slot {slot}: encode it with "
            "run_slot=None for the launcher, which assigns the slots"
        )
    return f"slot{run_slot}_{affinity_code}"


def _arg(value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float, os.PathLike)):
        raise TypeError(f"{what} must hold str, int, float or paths, got {value!r}")
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)


def launch_experiment(
    script: str | os.PathLike,
    run_slot: int,
    affinity_code: str,
    log_dir: str | os.PathLike,
    variant: Mapping[str, Any],
    run_ID: int,
    args: Sequence[Any] = (),
    python_executable: str | None = None,
) -> subprocess.Popen:
    """Start one run and return its process (not waited for).

    Saves ``variant`` to ``log_dir/variant.json``, sends the run's stdout and stderr to
    ``log_dir/run_<run_ID>/stdout.log`` and ``stderr.log``, and pins it to the cpus of
    ``run_slot`` (unless the code says ``set_affinity=False``, or the platform cannot pin).
    """
    run_slot = check_int("run_slot", run_slot, 0)
    slot_code = _with_slot(affinity_code, run_slot)
    cpus, _ = slot_resources(affinity_code, run_slot)
    spec, _ = decode_code(affinity_code)
    log_dir = Path(log_dir)
    run_dir = log_dir / f"run_{run_ID}"
    command = [
        str(script),
        slot_code,
        str(log_dir),
        str(run_ID),
        *(_arg(a, "args") for a in args),
    ]
    python = python_executable or sys.executable
    if spec.set_affinity and hasattr(os, "sched_setaffinity"):
        argv = [python, "-c", _PIN_TRAMPOLINE, ",".join(map(str, cpus)), *command]
    else:
        argv = [python, *command]
    save_variant(variant, log_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / STDOUT_FILE, "wb") as out, open(run_dir / STDERR_FILE, "wb") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Make SIGTERM (``kill``, ``timeout``, a CI job's end) stop the queue as Ctrl-C does,
    ending its runs, rather than end the launcher alone and orphan them."""
    if threading.current_thread() is not threading.main_thread():
        yield  # (signal handlers can only be set from the main thread)
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(processes: list[subprocess.Popen], grace_period: float) -> None:
    """End each process and everything it started: terminate, then kill what outlives
    ``grace_period`` seconds."""
    victims = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(process.pid)
            victims += [parent, *parent.children(recursive=True)]  # (before the parent dies)
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.terminate()
    _, alive = psutil.wait_procs(victims, timeout=grace_period)
    for victim in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
    psutil.wait_procs(alive, timeout=grace_period)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_period)


def _tail(path: Path, n: int = TAIL_LINES) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "    (no output file)"
    return "\n".join("    " + line for line in lines[-n:]) or "    (empty)"


def _check_relative(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"{what} must be a non-empty str, got {name!r}")
    if os.path.isabs(name) or ".." in PurePosixPath(name.replace(os.sep, "/")).parts:
        raise ValueError(f"{what} must be a relative path without '..', got {name!r}")


def _check_args(args: Any, what: str) -> list[Any]:
    if args is None:
        return []
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"{what} must be a list of arguments, got {args!r}")
    for a in args:
        _arg(a, what)
    return list(args)


class _Queue:
    """The bookkeeping of ``run_experiments``: each run's state, and the monitor files."""

    def __init__(self, exp_dir: Path, header: str, log_dirs: list[Path], runs_per_setting: int):
        self.exp_dir, self.header, self.log_dirs = exp_dir, header, log_dirs
        self.state = {
            (i, r): "queued" for i in range(len(log_dirs)) for r in range(runs_per_setting)
        }
        self.n_launched = 0

    def launched(self, run: tuple[int, int], slot: int, pid: int) -> None:
        self.n_launched += 1
        self.state[run] = f"running on slot {slot} (pid {pid})"
        text = f"{self.n_launched} of {len(self.state)} runs launched\n"
        write_text_atomic(self.exp_dir / NUM_LAUNCHED_FILE, text)
        self.write_tree()

    def finished(self, run: tuple[int, int], slot: int, returncode: int) -> None:
        outcome = "succeeded" if returncode == 0 else f"FAILED (exit code {returncode})"
        self.state[run] = f"{outcome} on slot {slot}"
        self.write_tree()

    def write_tree(self) -> None:
        lines = [self.header, ""]
        for i, log_dir in enumerate(self.log_dirs):
            lines.append(f"{log_dir.relative_to(self.exp_dir)}/")
            lines += [f"    run_{r}: {s}" for (j, r), s in sorted(self.state.items()) if j == i]
        write_text_atomic(self.exp_dir / EXPERIMENTS_TREE_FILE, "\n".join(lines) + "\n")


def run_experiments(
    script: str | os.PathLike,
    affinity_code: str,
    experiment_title: str,
    runs_per_setting: int,
    variants: Sequence[Mapping[str, Any]],
    log_dirs: Sequence[str],
    common_args: Sequence[Any] | None = None,
    runs_args: Sequence[Sequence[Any]] | None = None,
    log_root: str | os.PathLike | None = None,
    python_executable: str | None = None,
    poll_interval: float = 0.05,
    grace_period: float = 5.0,
) -> ExperimentsSummary:
    """Run ``runs_per_setting`` runs (run IDs 0, 1, ...) of every variant, as many at once as
    ``affinity_code`` has run slots; returns which succeeded and which failed.

    The experiment directory is ``log_root/experiment_title`` (``log_root`` defaults to
    ``./data/local/<yyyymmdd>``); variant ``i`` logs to ``<experiment dir>/log_dirs[i]``
    (``variant.json``, and ``run_<run_ID>/`` with the run's ``stdout.log`` and
    ``stderr.log``).  ``num_launched.txt`` and ``experiments_tree.txt`` there follow the
    queue.  Run ID 0 of every setting goes first, then run ID 1, and so on.  A failed run is
    reported (with the tail of its stderr) and the queue goes on; an interrupt (Ctrl-C) or
    any error ends every running run and everything it started, then propagates.
    """
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"script {str(script)!r} is not a file")
    _, slot = decode_code(affinity_code)
    if slot is not None:
        raise ValueError(
            f"affinity_code {affinity_code!r} names run slot {slot}: encode it with "
            "run_slot=None, the launcher assigns the slots"
        )
    n_slots = len(slot_layout(decode_code(affinity_code)[0]))
    for run_slot in range(n_slots):
        check_slot_on_machine(_with_slot(affinity_code, run_slot), run_slot)
    _check_relative(experiment_title, "experiment_title")
    if "/" in experiment_title or os.sep in experiment_title:
        raise ValueError(f"experiment_title must be one directory name, got {experiment_title!r}")
    runs_per_setting = check_int("runs_per_setting", runs_per_setting, 1)  # 3.0 too
    variants, log_dirs = list(variants), list(log_dirs)
    if not variants or len(variants) != len(log_dirs):
        raise ValueError(
            f"variants and log_dirs must be non-empty lists of the same length, got "
            f"{len(variants)} and {len(log_dirs)}"
        )
    for variant in variants:
        if not isinstance(variant, Mapping):
            raise TypeError(f"variants must hold dicts, got {type(variant).__name__}")
    for name in log_dirs:
        _check_relative(name, "each of log_dirs")
    if len({os.path.normpath(d) for d in log_dirs}) != len(log_dirs):
        raise ValueError(f"log_dirs repeat: {log_dirs} (the runs would write over each other)")
    common_args = _check_args(common_args, "common_args")
    if runs_args is None:
        per_setting: list[list[Any]] = [[] for _ in variants]
    else:
        per_setting = [_check_args(a, "each of runs_args") for a in runs_args]
        if len(per_setting) != len(variants):
            raise ValueError(
                f"runs_args must hold one list per variant ({len(variants)}), got {len(per_setting)}"
            )
    if log_root is None:
        log_root = Path("data") / "local" / datetime.date.today().strftime("%Y%m%d")
    exp_dir = Path(os.path.abspath(Path(log_root) / experiment_title))
    settings = [exp_dir / d for d in log_dirs]
    runs = [(i, r) for r in range(runs_per_setting) for i in range(len(settings))]
    existing = [settings[i] / f"run_{r}" for i, r in runs if (settings[i] / f"run_{r}").exists()]
    if existing:
        raise FileExistsError(
            f"{len(existing)} run director(ies) already exist, e.g. {existing[0]}: choose "
            "another experiment_title or log_root rather than mix runs"
        )

    header = (
        f"experiment: {experiment_title}\nscript: {script}\naffinity code: {affinity_code}\n"
        f"run slots: {n_slots}\nruns: {len(runs)} ({len(settings)} settings x "
        f"{runs_per_setting} runs each)"
    )
    queue = _Queue(exp_dir, header, settings, runs_per_setting)
    queue.write_tree()
    pending = deque(runs)
    running: dict[int, tuple[tuple[int, int], subprocess.Popen]] = {}
    results: list[RunResult] = []
    with _sigterm_interrupts():
        try:
            while pending or running:
                for run_slot in range(n_slots):
                    if run_slot in running or not pending:
                        continue
                    i, run_ID = pending.popleft()
                    process = launch_experiment(
                        script,
                        run_slot,
                        affinity_code,
                        settings[i],
                        variants[i],
                        run_ID,
                        [*common_args, *per_setting[i]],
                        python_executable,
                    )
                    running[run_slot] = ((i, run_ID), process)
                    queue.launched((i, run_ID), run_slot, process.pid)
                    print(f"launched {log_dirs[i]}/run_{run_ID} on slot {run_slot}", flush=True)
                time.sleep(poll_interval)
                for run_slot, ((i, run_ID), process) in list(running.items()):
                    returncode = process.poll()
                    if returncode is None:
                        continue
                    del running[run_slot]
                    results.append(RunResult(settings[i], run_ID, run_slot, returncode))
                    queue.finished((i, run_ID), run_slot, returncode)
                    outcome = "finished" if returncode == 0 else f"FAILED (exit code {returncode})"
                    print(f"{outcome}: {log_dirs[i]}/run_{run_ID}", flush=True)
        except BaseException:
            _stop([process for _, process in running.values()], grace_period)
            for run, _ in running.values():
                queue.state[run] = "stopped (the launcher was interrupted or failed)"
            with contextlib.suppress(OSError):
                queue.write_tree()
            raise
    results.sort(key=lambda run: (settings.index(run.log_dir), run.run_ID))
    summary = ExperimentsSummary(exp_dir, tuple(results))
    _report(summary)
    return summary


def _report(summary: ExperimentsSummary) -> None:
    print(
        f"{len(summary.runs)} runs in {summary.exp_dir}: {len(summary.succeeded)} succeeded, "
        f"{len(summary.failed)} failed",
        flush=True,
    )
    for run in summary.failed:
        print(
            f"FAILED (exit code {run.returncode}): {run.run_dir}\n"
            f"  last lines of {run.stderr.name}:\n{_tail(run.stderr)}",
            flush=True,
        )
