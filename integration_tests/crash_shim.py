"""Fault injection for ``test_crash_safety.py``, in the style of SQLite's crash tests.

``install(run_dir, mode, target, log)`` wraps, in the running Python, every operation that
changes what a run directory holds on disk: ``os.replace``, ``os.rename``, ``os.fsync``,
``os.unlink`` / ``os.remove`` and each ``write()`` on a file opened for writing under it
(``builtins.open`` / ``io.open``, which ``pathlib`` and ``os.fdopen`` call too; ``np.savez``
and ``zipfile`` write through the file object they are given). The operations on paths in
``run_dir`` (the directory itself included: its fsync after a rename) are numbered from 1 in
the order they happen; a run is deterministic, so the same settings number them the same way.
``mode``:

- ``count``: only count; each operation is appended to ``log`` as ``<n> <op> <path>``.
- ``kill``: at operation ``target``, crash (``SIGKILL`` to the process itself). A write is
  torn first (half its data written and flushed); any other operation is not done.
- ``enospc``: operation ``target`` (a write or an fsync) fails once with
  ``OSError(ENOSPC)``, as a full disk makes it fail (a write writes half its data first);
  the run then goes on as it will.

``log`` (a path outside the run directory) gets, with ``kill`` and ``enospc``, the one
operation hit. The package sources hold no hook for this: the shim patches the standard
library in the process that runs the trainer.

``python crash_shim.py serve`` is a fork server: it imports the trainer once, then for each
request line on stdin (JSON: ``{"argv": [...], "shim": {...} | null, "out": path, "err":
path, "cwd": path, "timeout": seconds}``) forks a child that installs the shim, runs ``rl_suite``'s ``main(argv)``
with its stdout and stderr in the two files, and exits with its code; the server answers a
JSON line ``{"rc": code}`` (``-9``: killed). Forking saves the two seconds each new Python
spends importing torch, which is most of a short run.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import re
import signal
import sys
from typing import Any

__all__ = ["describe", "install", "normalise", "serve"]

_REAL = {
    "open": io.open,
    "replace": os.replace,
    "rename": os.rename,
    "fsync": os.fsync,
    "unlink": os.unlink,
    "remove": os.remove,
}
_WRITE_MODES = set("wax+")


class _State:
    run_dir = ""
    mode = "count"
    target = 0
    count = 0
    log_fd = -1
    armed = True


_state = _State()


def _in_run_dir(path: Any) -> str | None:
    """``path`` relative to the run directory (``.`` for itself); None when outside it."""
    if isinstance(path, int):
        try:
            full = os.readlink(f"/proc/self/fd/{path}")
        except OSError:
            return None
        full = full.removesuffix(" (deleted)")
    else:
        try:
            full = os.path.realpath(os.fspath(path))
        except TypeError:
            return None
        if isinstance(full, bytes):
            full = os.fsdecode(full)
    root = _state.run_dir
    if full == root:
        return "."
    if full.startswith(root + os.sep):
        return full[len(root) + 1 :]
    return None


def _log(line: str) -> None:
    if _state.log_fd >= 0:
        os.write(_state.log_fd, (line + "\n").encode("utf-8"))


def _fault(op: str, rel: str) -> str | None:
    """Number the operation ``op`` on ``rel``; what to do with it: None (do it), ``"kill"``
    or ``"enospc"``."""
    _state.count += 1
    n = _state.count
    if _state.mode == "count":
        _log(f"{n} {op} {rel}")
        return None
    if n != _state.target or not _state.armed:
        return None
    _state.armed = False
    _log(f"{n} {op} {rel}")
    if _state.mode == "kill":
        return "kill"
    if op not in ("write", "fsync"):
        raise RuntimeError(f"crash_shim: operation {n} is a {op}, not a write or fsync")
    return "enospc"


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _full_disk() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _half(data: Any) -> Any:
    if isinstance(data, str | bytes | bytearray):
        return data[: len(data) // 2]
    view = memoryview(data).cast("B")
    return view[: len(view) // 2]


class _TrackedFile:
    """A file opened for writing in the run directory: its writes are operations."""

    def __init__(self, file: Any, rel: str):
        self.__dict__["_file"] = file
        self.__dict__["_rel"] = rel

    def write(self, data: Any) -> int:
        action = _fault("write", self._rel)
        if action is not None:
            self._file.write(_half(data))
            self._file.flush()
            if action == "kill":
                _kill()
            raise _full_disk()
        return self._file.write(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._file, name, value)

    def __enter__(self) -> _TrackedFile:
        self._file.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._file.__exit__(*exc)

    def __iter__(self) -> Any:
        return iter(self._file)


def _open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    f = _REAL["open"](file, mode, *args, **kwargs)
    if _WRITE_MODES.isdisjoint(mode):
        return f
    rel = _in_run_dir(f.fileno() if isinstance(file, int) else file)
    return f if rel is None else _TrackedFile(f, rel)


def _fsync(fd: Any) -> None:
    number = fd if isinstance(fd, int) else fd.fileno()
    rel = _in_run_dir(number)
    if rel is not None and _fault("fsync", rel) is not None:
        if _state.mode == "kill":
            _kill()
        raise _full_disk()
    _REAL["fsync"](fd)


def _moving(name: str) -> Any:
    real = _REAL[name]

    def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        rel_src, rel_dst = _in_run_dir(src), _in_run_dir(dst)
        if (rel_src or rel_dst) is not None and _fault(name, f"{rel_src} -> {rel_dst}"):
            _kill()
        real(src, dst, *args, **kwargs)

    return move


def _removing(name: str) -> Any:
    real = _REAL[name]

    def remove(path: Any, *args: Any, **kwargs: Any) -> None:
        rel = _in_run_dir(path)
        if rel is not None and _fault("unlink", rel):
            _kill()
        real(path, *args, **kwargs)

    return remove


def install(run_dir: str, mode: str = "count", target: int = 0, log: str | None = None) -> None:
    """Wrap the operations on ``run_dir`` (see the module) in this process."""
    if mode not in ("count", "kill", "enospc"):
        raise ValueError(f"mode must be count, kill or enospc, got {mode!r}")
    os.makedirs(run_dir, exist_ok=True)  # (so that its real path is known)
    _state.run_dir = os.path.realpath(run_dir)
    _state.mode, _state.target, _state.count, _state.armed = mode, int(target), 0, True
    if log is not None:
        _state.log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    builtins.open = io.open = _open
    os.replace, os.rename = _moving("replace"), _moving("rename")
    os.fsync = _fsync
    os.unlink, os.remove = _removing("unlink"), _removing("remove")


_NORMALISE = [
    (re.compile(r"[0-9a-f]{32}"), "<id>"),  # (a snapshot's id)
    (re.compile(r"\.\d+\.tmp"), ".<pid>.tmp"),  # (atomic_write's temporary file)
    (re.compile(r"(^|-> )\.replay-[^.]+\.npz\.tmp"), r"\1.replay-<rand>.npz.tmp"),  # (mkstemp's)
]


def normalise(path: str) -> str:
    """An operation's path with what differs from run to run (ids, pids) replaced."""
    for pattern, replacement in _NORMALISE:
        path = pattern.sub(replacement, path)
    return path


def describe(line: str) -> tuple[int, str, str]:
    """``(n, op, path)`` of a line of the log, the path normalised."""
    n, op, path = line.rstrip("\n").split(" ", 2)
    return int(n), op, normalise(path)


# ------------------------------------------------------------------ fork server
def _child(request: dict[str, Any]) -> int:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(request.get("cwd") or os.getcwd())
    signal.alarm(int(request.get("timeout", 0)))  # (a run that hangs ends: SIGALRM)
    shim = request.get("shim")
    if shim is not None:
        install(**shim)
    sys.argv = ["rl-suite", *request["argv"]]
    from rl_suite._cli import main

    try:
        rc = main(request["argv"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        rc = 1
    return rc


def serve() -> None:
    """The fork server (see the module): one request per stdin line, one answer per line."""
    import gymnasium  # noqa: F401  (what every run imports, once here)
    import torch
    import torch._dynamo  # (imported by torch.optim's first optimizer: 1.5 s)

    from rl_suite import _cli, _plot, _trainer  # noqa: F401

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # (the rest of its imports)

    try:  # (the learning curve's)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
    except ImportError:
        pass
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                rc = _child(request)
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(rc)
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()
