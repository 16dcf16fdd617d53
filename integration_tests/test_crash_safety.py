"""Crash safety of a run directory, by fault injection in the style of SQLite's crash tests.

A short training (`rl-suite train`, serial sampler, exactly reproducible) runs in a child
process whose Python first installs ``crash_shim`` (beside this file; nothing in the packages
helps it): the shim numbers every operation that changes the run directory on disk (each
write to a file opened there for writing, each fsync, rename, replace and unlink; see its
docstring) and, at operation N, either kills the process (``SIGKILL``, a write torn in half
first) or makes that write or fsync fail with a full disk (``ENOSPC``). A first run in
counting mode learns the operations; then N goes over them, and after each fault:

- killed: `rl-suite resume RUN_DIR` (no shim) must (a) exit 0, and the run must then equal the
  uninterrupted one: (b) ``progress.csv`` the same but for the wall-clock columns, (c) the final
  ``params.pt``'s ``agent_state_dict`` exactly the same, (d) no ``.*.tmp`` file left, and no
  companion file (``sampler_state-<id>.npz``, ``replay-<id>.npz``) that the checkpoint does not
  name. Before it, the checkpoint in place must be the last one committed before the fault,
  its companions whole. When the kill came before the first checkpoint was committed, resume
  must say so in one line, and `rl-suite train` with the same settings must start the run again
  and end as the uninterrupted one.
- full disk: the trainer must exit non-zero with one line that names the file (no
  traceback), the previous checkpoint intact; then the same as after a kill. (A fault that the
  trainer absorbs and still ends exactly as the uninterrupted run counts as survived.)

Cases: PPO on CartPole-v1 and DQN on CartPole-v1 with ``runner.checkpoint_replay=True`` (a
small replay that wraps), 2048 steps in ``snapshot_mode="last"``: a snapshot after the first
evaluation (itr 0) and every 1024 steps, 3 in all. A run makes about 4,700 operations (each
``.npz`` is hundreds of small writes), so CI injects a spread (``choose``): the first of each
group of like operations in a row (e.g. the writes of one temporary file) up to the
directory's fsync after the first commit, every commit, and the first of each group of the
last snapshot, from its row of progress.csv to the learning curve; about 20 faults a case
and mode, 2.5 minutes in all on 2 cores. ``RL_CRASH_ALL=groups`` runs the first, middle and
last operation of every group (about 60 a case and mode), ``RL_CRASH_ALL=1`` every operation
(thousands: hours); both are the ``slow`` tests, skipped otherwise. Each test prints its
counts (operations, faults injected, survived: resumed to the uninterrupted run's end) and
notes; a failure lists each operation (number, op, normalised path) with what broke.

The runs go through a fork server (``python crash_shim.py serve``) that imports the trainer
once, since that import is most of a short run's time; the uninterrupted reference run is a
fresh ``python -m rl_suite``, and the counting run (forked, through the shim) must equal it.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
SHIM = HERE / "crash_shim.py"
_spec = importlib.util.spec_from_file_location("crash_shim", SHIM)
crash_shim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_shim)  # (its helpers; only the children install it)
LEVEL = os.environ.get("RL_CRASH_ALL", "")  # "" (CI's spread), "groups", or "1": every operation
RUN_TIMEOUT = 600  # (seconds a run may take before its child is stopped)

pytestmark = pytest.mark.skipif(
    not (
        sys.platform.startswith("linux") and Path("/proc/self/fd").is_dir() and hasattr(os, "fork")
    ),
    reason="the shim reads the file behind a descriptor in /proc/self/fd and the runs are forked",
)

COMMON = ["--env", "CartPole-v1", "--seed", "0", "--steps", "2048"]
COMMON += ["--set", "runner.log_interval_steps=1024", "--sampler", "serial"]
CASES = {
    "ppo": ["train", "ppo", *COMMON],
    "dqn": [
        *["train", "dqn", *COMMON, "--set", "runner.checkpoint_replay=True"],
        *["--set", "algo_kwargs.replay_size=2000", "--set", "algo_kwargs.replay_ratio=8"],
        *["--set", "algo_kwargs.min_steps_learn=500"],
    ],
}
KILL_OPS = ("write", "fsync", "replace", "rename", "unlink")
ENOSPC_OPS = ("write", "fsync")
COMPANION = re.compile(r"(?:.+_)?(?:sampler_state|replay)-[0-9a-f]+\.npz")


def is_time_column(name: str) -> bool:
    """A wall-clock column of progress.csv (``CumTime (s)``, ``CumTrainTime``, ``CumEvalTime``,
    ``StepsPerSecond``, ``UpdatesPerSecond``): it differs from run to run."""
    return "Time" in name or name.endswith("PerSecond")


# ------------------------------------------------------------------ running the trainer
@dataclass
class Run:
    rc: int
    out: str
    err: str


class ForkServer:
    """``crash_shim.py serve`` in a child process: runs ``rl_suite``'s ``main`` in forks."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SHIM), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    def run(self, argv: list[str], out_dir: Path, shim: dict[str, Any] | None = None) -> Run:
        name = f"{len(list(out_dir.glob('*.out')))}-{argv[0]}"  # (each run's kept)
        out, err = out_dir / f"{name}.out", out_dir / f"{name}.err"
        request = {"argv": argv, "shim": shim, "out": str(out), "err": str(err)}
        request["timeout"] = RUN_TIMEOUT
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        if not self.selector.select(RUN_TIMEOUT + 60):
            raise RuntimeError(f"the fork server did not answer for {argv}")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended (code {self.proc.wait()}) on {argv}")
        rc = json.loads(line)["rc"]
        return Run(rc, out.read_text(errors="replace"), err.read_text(errors="replace"))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def server():
    fork_server = ForkServer()
    yield fork_server
    fork_server.close()


# ------------------------------------------------------------------ what a run leaves
def read_progress(run_dir: Path) -> tuple[list[str], list[list[str]]]:
    with open(run_dir / "progress.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def load_checkpoint(run_dir: Path) -> dict[str, Any]:
    return torch.load(run_dir / "params.pt", map_location="cpu", weights_only=True)


def tree_difference(a: Any, b: Any, where: str = "agent_state_dict") -> str | None:
    """Where two state dicts differ (None: equal exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{where} keys {sorted(a)} != {sorted(b)}"
        for key in a:
            difference = tree_difference(a[key], b[key], f"{where}[{key!r}]")
            if difference:
                return difference
        return None
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return None if same else f"{where} differs"
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            difference = tree_difference(x, y, f"{where}[{i}]")
            if difference:
                return difference
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


@dataclass
class Op:
    n: int
    op: str
    path: str  # (normalised: ids and pids replaced)

    def __str__(self) -> str:
        return f"op {self.n} ({self.op} {self.path})"

    @property
    def commits(self) -> bool:
        """The rename that commits a snapshot (its checkpoint file put in place)."""
        return self.op in ("replace", "rename") and self.path.endswith("-> params.pt")


@dataclass
class Reference:
    header: list[str]
    rows: list[list[str]]
    agent: dict[str, Any]
    ops: list[Op]
    snapshot_itrs: list[int]  # (the itr of each snapshot committed, in order)
    seconds: float  # (one uninterrupted run through the fork server)
    snapshot_ops: list[int] = field(default_factory=list)  # (n of each commit)

    def committed_before(self, n: int) -> int | None:
        """The itr of the last snapshot committed before operation ``n`` (None: none)."""
        done = [
            itr for itr, at in zip(self.snapshot_itrs, self.snapshot_ops, strict=True) if at < n
        ]
        return done[-1] if done else None


def final_problems(run_dir: Path, ref: Reference) -> list[str]:
    """What differs from the uninterrupted run in a run directory whose run has ended:
    (b) progress.csv, (c) the agent, (d) left-over files."""
    problems = []
    try:
        header, rows = read_progress(run_dir)
    except (OSError, IndexError, csv.Error) as e:
        header, rows = [], []
        problems.append(f"progress.csv unreadable: {e!r}")
    if header and header != ref.header:
        problems.append(f"(b) progress.csv header differs: {header} != {ref.header}")
    elif header and len(rows) != len(ref.rows):
        itrs = [row[0] for row in rows]
        problems.append(
            f"(b) progress.csv has {len(rows)} rows (Iteration {itrs}), not {len(ref.rows)}"
        )
    elif header:
        for i, (row, ref_row) in enumerate(zip(rows, ref.rows, strict=True)):
            bad = [
                f"{name}: {value!r} != {expected!r}"
                for name, value, expected in zip(header, row, ref_row, strict=False)
                if not is_time_column(name) and value != expected
            ]
            if bad or len(row) != len(ref_row):
                problems.append(f"(b) progress.csv row {i} differs: {'; '.join(bad[:3])}")
                break
    try:
        checkpoint = load_checkpoint(run_dir)
    except Exception as e:
        return [*problems, f"(c) params.pt unreadable: {e!r}"]
    difference = tree_difference(checkpoint["agent_state_dict"], ref.agent)
    if difference:
        problems.append(f"(c) the final {difference}")
    named = {checkpoint.get("sampler_file"), checkpoint.get("replay_file")} - {None}
    for path in sorted(run_dir.iterdir()):
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            problems.append(f"(d) a temporary file is left: {path.name}")
        elif COMPANION.fullmatch(path.name) and path.name not in named:
            problems.append(
                f"(d) a companion file the checkpoint does not name is left: {path.name}"
            )
    for name in sorted(named):
        if not (run_dir / name).is_file():
            problems.append(f"(d) the checkpoint names {name}, which is missing")
    return problems


def checkpoint_problems(run_dir: Path, expected_itr: int | None) -> list[str]:
    """Is the checkpoint in place the last one committed (``expected_itr``; None: none), whole
    with its companions?"""
    path = run_dir / "params.pt"
    if expected_itr is None:
        return [f"a checkpoint is in place ({path.name}) though none was committed"] * path.exists()
    try:
        checkpoint = load_checkpoint(run_dir)
    except Exception as e:
        return [f"the committed checkpoint (itr {expected_itr}) is unreadable: {e!r}"]
    problems = []
    if checkpoint.get("itr") != expected_itr:
        problems.append(f"the checkpoint is of itr {checkpoint.get('itr')}, not {expected_itr}")
    for key in ("sampler_file", "replay_file"):
        name = checkpoint.get(key)
        if name is None:
            continue
        try:
            with np.load(run_dir / name, allow_pickle=False) as data:
                for array in data.files:
                    data[array]  # (read whole)
        except Exception as e:
            problems.append(f"the checkpoint's {key} {name} is not whole: {e!r}")
    return problems


def one_line_error(run: Run, command: str) -> str | None:
    """The problem with how a failed command said why (None: one line, no traceback)."""
    if "Traceback" in run.err:
        return f"a traceback: {run.err.strip().splitlines()[-1]!r}"
    errors = [line for line in run.err.splitlines() if line.startswith(f"rl-suite {command}: ")]
    if len(errors) != 1:
        return f"{len(errors)} lines 'rl-suite {command}: ...' in stderr {run.err.strip()!r}"
    return None


def names_file(message: str, path: str) -> bool:
    """Does ``message`` name the file an operation on ``path`` wrote: the file itself, or the
    one its temporary file becomes (``.params.pt.<pid>.tmp`` is ``params.pt``;
    ``.replay-<rand>.npz.tmp``, mkstemp's, a ``replay-<id>.npz``)?"""
    name = path.rsplit("/", 1)[-1]
    if name == ".":  # (the run directory's fsync, after a rename: the file renamed)
        return re.search(r"/run_0/[^/ '\"]+", message) is not None
    names = [re.escape(name)]
    if match := re.fullmatch(r"\.(.+)\.<pid>\.tmp", name):
        names.append(re.escape(match.group(1)))
    elif name.startswith(".replay-"):
        names.append(re.escape("replay-<id>.npz"))
    pattern = "|".join(n.replace(re.escape("<id>"), "[0-9a-f]{32}") for n in names)
    return re.search(rf"(^|[/ '\"])({pattern})($|[ '\":;,])", message) is not None


# ------------------------------------------------------------------ the reference runs
_references: dict[str, Reference] = {}


def reference(case: str, server: ForkServer, tmp_path_factory) -> Reference:
    """The uninterrupted run of ``case`` (a fresh Python) and its operations (the counting
    run through the fork server and the shim, which must end the same)."""
    if case in _references:
        return _references[case]
    base = tmp_path_factory.mktemp(f"{case}-reference")
    fresh = subprocess.run(
        [sys.executable, "-m", "rl_suite", *CASES[case], "--log-dir", str(base / "fresh")],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert fresh.returncode == 0, fresh.stderr
    run_dir = base / "fresh" / "run_0"
    header, rows = read_progress(run_dir)
    agent = load_checkpoint(run_dir)["agent_state_dict"]
    log = base / "ops.log"
    counted_dir = base / "counted" / "run_0"
    started = time.perf_counter()
    counted = server.run(
        [*CASES[case], "--log-dir", str(counted_dir.parent)],
        base,
        shim={"run_dir": str(counted_dir), "mode": "count", "log": str(log)},
    )
    seconds = time.perf_counter() - started
    assert counted.rc == 0, counted.err
    ops = [Op(*crash_shim.describe(line)) for line in log.read_text().splitlines()]
    itr_column = header.index("Iteration")
    ref = Reference(header, rows, agent, ops, [int(r[itr_column]) for r in rows], seconds)
    ref.snapshot_ops = [op.n for op in ops if op.commits]
    assert len(ref.snapshot_ops) == len(rows), "one snapshot per row of progress.csv"
    problems = final_problems(counted_dir, ref)
    assert not problems, f"the run through the shim differs from a fresh one: {problems}"
    _references[case] = ref
    return ref


def choose(ops: list[Op], level: str, kinds: tuple[str, ...]) -> list[int]:
    """The operations to fault among those of ``kinds``: with ``level`` "groups" the first,
    middle and last of each group (like operations in a row: same op, same path), with any
    other non-empty ``level`` all; with "" CI's spread: the first of each group up to the
    directory's fsync after the first commit, each commit, and the first of each group of the
    last snapshot, from its first row on. Killing, it leaves out there the temporary files'
    fsyncs, and in the last snapshot their writes; on a full disk, the fsyncs of the last
    snapshot's temporary files and directory (a tear, or an error, like those already chosen)."""
    groups: list[list[Op]] = []
    for op in ops:
        if groups and (groups[-1][0].op, groups[-1][0].path) == (op.op, op.path):
            groups[-1].append(op)
        else:
            groups.append([op])
    commits = [i for i, group in enumerate(groups) if group[0].commits]
    first_end = commits[0] + 1  # (the directory's fsync after the first commit)
    previous = commits[-2] if len(commits) > 1 else commits[-1]
    last_start = next(i for i in range(previous, len(groups)) if groups[i][0].op == "write")
    killing = "replace" in kinds
    chosen: set[int] = set()
    for i, group in enumerate(groups):
        op = group[0]
        temporary = op.path.startswith(".") and op.path != "." and op.op in ("write", "fsync")
        if op.op not in kinds:
            continue
        if level == "groups":
            chosen.update(group[j].n for j in (0, len(group) // 2, -1))
        elif level:
            chosen.update(o.n for o in group)
        else:
            first = i <= first_end and not (killing and temporary and op.op == "fsync")
            last = i >= last_start and not (killing and temporary)
            last = last and not (not killing and op.op == "fsync")
            if op.commits or first or last:
                chosen.add(op.n)
    return sorted(chosen)


# ------------------------------------------------------------------ one fault
@dataclass
class Tally:
    injected: int = 0
    survived: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def after_fault(
    server: ForkServer, case: str, ref: Reference, op: Op, base: Path, run_dir: Path
) -> tuple[list[str], list[str]]:
    """Resume the run a fault stopped (or, with no checkpoint, train it again); the problems
    and the notes."""
    problems, notes = [], []
    committed = ref.committed_before(op.n)
    problems += checkpoint_problems(run_dir, committed)
    if committed is not None:
        resumed = server.run(["resume", str(run_dir)], base)
        if resumed.rc != 0:
            return [
                *problems,
                f"(a) resume exited {resumed.rc}: {resumed.err.strip()[-600:]!r}",
            ], notes
    else:
        resumed = server.run(["resume", str(run_dir)], base)
        said = resumed.err.strip().splitlines()[-1:] or [""]
        if resumed.rc == 0:
            problems.append("resume of a run without a checkpoint exited 0")
        elif (problem := one_line_error(resumed, "resume")) is not None:
            problems.append(f"resume (no checkpoint yet) did not say so in one line: {problem}")
        elif "checkpoint" not in said[0] and "params.json" not in said[0]:
            problems.append(f"resume (no checkpoint yet) did not say so: {said[0]!r}")
        again = server.run([*CASES[case], "--log-dir", str(run_dir.parent)], base)
        if again.rc != 0:
            problems.append(
                "a fault before the first checkpoint leaves a run directory that can neither be "
                f"resumed ({said[0]!r}) nor trained again ({again.err.strip()[-400:]!r})"
            )
            return problems, notes
    problems += final_problems(run_dir, ref)
    curve = run_dir / "curve.png"
    if curve.exists() and not curve.read_bytes().endswith(b"IEND\xaeB`\x82"):
        notes.append(f"{op}: curve.png is left cut short ({curve.stat().st_size} bytes)")
    return problems, notes


def inject(
    server: ForkServer, case: str, mode: str, ref: Reference, n: int, base: Path, tally: Tally
) -> None:
    op = ref.ops[n - 1]
    run_dir = base / "log" / "run_0"
    hit = base / "hit.log"
    shim = {"run_dir": str(run_dir), "mode": mode, "target": n, "log": str(hit)}
    faulted = server.run([*CASES[case], "--log-dir", str(run_dir.parent)], base, shim=shim)
    tally.injected += 1
    hits = hit.read_text().splitlines() if hit.exists() else []
    problems, notes = [], []
    recover = True  # (resume, and compare with the uninterrupted run)
    if [Op(*crash_shim.describe(line)) for line in hits] != [op]:
        problems.append(f"the fault hit {hits} (the operations differ from the counting run's)")
        recover = False
    elif mode == "kill" and faulted.rc != -9:
        problems.append(f"the killed run exited {faulted.rc}: {faulted.err.strip()[-400:]!r}")
        recover = False
    elif mode == "enospc" and faulted.rc == 0:
        notes.append(f"{op}: the full disk was absorbed (the run exited 0)")
        recover = False
        problems += final_problems(run_dir, ref)
        tally.survived += not problems
    elif mode == "enospc":
        problem = one_line_error(faulted, "train")
        said = (faulted.err.strip().splitlines() or [""])[-1]
        if problem is not None:
            problems.append(f"the full disk was reported with {problem}")
        elif not names_file(said, op.path):
            problems.append(f"the full-disk error does not name the file: {said!r}")
    if recover:
        more, notes_after = after_fault(server, case, ref, op, base, run_dir)
        tally.survived += not more
        problems += more
        notes += notes_after
    tally.notes += notes
    tally.failures += [f"{case}/{mode} {op}: {problem}" for problem in problems]
    if not problems:
        shutil.rmtree(base, ignore_errors=True)


def crash_loop(case: str, mode: str, level: str, server, tmp_path_factory, capsys) -> None:
    ref = reference(case, server, tmp_path_factory)
    kinds = KILL_OPS if mode == "kill" else ENOSPC_OPS
    targets = choose(ref.ops, level, kinds)
    tally = Tally()
    started = time.perf_counter()
    for n in targets:
        inject(server, case, mode, ref, n, tmp_path_factory.mktemp(f"{case}-{mode}-{n}"), tally)
    seconds = time.perf_counter() - started
    counts = (
        f"crash safety {case}/{mode} ({level or 'ci'}): {len(ref.ops)} operations a run, "
        f"{tally.injected} faults injected, {tally.survived} survived (resumed identical), "
        f"{len(tally.failures)} problems, {seconds:.0f} s"
    )
    with capsys.disabled():
        print(f"\n{counts}")
        for note in dict.fromkeys(tally.notes):
            print(f"  note: {note}")
    assert not tally.failures, "\n".join([counts, *tally.failures])


@pytest.mark.parametrize("mode", ["kill", "enospc"])
@pytest.mark.parametrize("case", list(CASES))
def test_crash_safety(case, mode, server, tmp_path_factory, capsys):
    crash_loop(case, mode, "", server, tmp_path_factory, capsys)


@pytest.mark.slow
@pytest.mark.skipif(not LEVEL, reason="RL_CRASH_ALL=groups or RL_CRASH_ALL=1 runs it")
@pytest.mark.parametrize("mode", ["kill", "enospc"])
@pytest.mark.parametrize("case", list(CASES))
def test_crash_safety_long(case, mode, server, tmp_path_factory, capsys):
    crash_loop(case, mode, LEVEL, server, tmp_path_factory, capsys)
