"""The logger: text lines to the terminal and ``debug.log``; one row of diagnostics per log
interval to ``debug.log`` (the table), ``progress.csv``, (optionally) TensorBoard and the
terminal (a summary line, or the table when verbose); and snapshots.

``logger`` is one shared instance used like rlpyt's logger module
(``logger.record_tabular(...)``, ``logger.dump_tabular()``, ``logger.log(...)``);
``logger_context`` points it at a run directory for the duration of a run.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from rl_arrays import as_count

from ._checkpoint import atomic_write, naming_the_file, remove_partial_writes, save_torch
from ._console import print_line
from ._outputs import RowOutput, check_outputs, open_outputs
from ._run_lock import run_dir_lock
from ._values import plain

__all__ = ["SNAPSHOT_MODES", "Logger", "logger", "logger_context", "summary_line"]

SNAPSHOT_MODES = ("none", "last", "all", "gap")

_STAT_NAMES = ("Average", "Std", "Median", "Min", "Max")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def _column(row: Mapping[str, Any], name: str) -> Any:
    """The number in column ``name``, also under a prefix (``Diagnostics/Iteration``);
    None when there is none (or NaN)."""
    for key, value in row.items():
        head = key[: -len(name)] if key.endswith(name) else None
        if head is not None and not (head and head[-1].isalnum()):
            return value if _is_number(value) and not math.isnan(value) else None
    return None


def summary_line(row: Mapping[str, Any], total_steps: int | None = None) -> str | None:
    """The terminal's line for a runner's row: iteration, steps, steps/s, average return,
    time elapsed and left (``-`` when unknown); None for a row without ``Iteration``."""
    itr = _column(row, "Iteration")
    if itr is None:
        return None
    steps, speed = _column(row, "CumSteps"), _column(row, "StepsPerSecond")
    ret, elapsed = _column(row, "ReturnAverage"), _column(row, "CumTime (s)")
    left = None
    if total_steps and steps and elapsed is not None:
        left = elapsed * max(total_steps - steps, 0) / steps
    of_total = f"/{total_steps:,}" if total_steps else ""
    return " | ".join(
        [
            f"itr {itr}",
            f"steps {'-' if steps is None else f'{steps:,}'}{of_total}",
            f"{'-' if speed is None else f'{speed:,.0f}'} steps/s",
            f"return {'-' if ret is None else f'{ret:.2f}'}",
            f"elapsed {'-' if elapsed is None else _clock(elapsed)}",
            f"left {'-' if left is None else _clock(left)}",
        ]
    )


def _csv_line(values: Sequence[Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


class Logger:
    """Text log, tabular diagnostics and snapshots (see the module).

    Without outputs (outside ``logger_context``) text and tables go to stdout only and
    ``save_itr_params`` writes nothing. The terminal shows each runner's row as one summary
    line unless ``set_verbose(True)``; ``debug.log`` gets the table either way.
    """

    def __init__(self) -> None:
        self._prefixes: list[str] = []
        self._tabular_prefixes: list[str] = []
        self._tabular: dict[str, Any] = {}
        self._iteration = 0
        self._text_file: IO[str] | None = None
        self._csv_path: Path | None = None
        self._csv_file: IO[str] | None = None
        self._header: list[str] | None = None
        self._n_rows = 0
        self._summary_writer: Any = None
        self._outputs: list[RowOutput] = []  # (W&B, MLflow: see set_row_outputs)
        self._snapshot_dir: Path | None = None
        self._snapshot_mode = "none"
        self._snapshot_gap = 1
        self._verbose = False

    # ---------------------------------------------------------------- text
    def log(self, s: str, with_prefix: bool = True, with_timestamp: bool = True) -> None:
        """Print ``s`` (with the current prefixes and a timestamp) and append it to
        ``debug.log`` when one is open."""
        self._write(self._line(s, with_prefix, with_timestamp), terminal=True)

    def debug(self, s: str, with_prefix: bool = True, with_timestamp: bool = True) -> None:
        """``log`` a detail: to ``debug.log``, and to the terminal only when verbose."""
        self._write(self._line(s, with_prefix, with_timestamp), terminal=self._verbose)

    def _line(self, s: str, with_prefix: bool, with_timestamp: bool) -> str:
        line = str(s)
        if with_prefix:
            line = "".join(self._prefixes) + line
        if with_timestamp:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
            line = f"{stamp} | {line}"
        return line

    def _write(self, line: str, terminal: bool) -> None:
        if terminal:
            print_line(line)
        if self._text_file is not None:
            with naming_the_file(self._text_file.name):
                self._text_file.write(line + "\n")
                self._text_file.flush()

    def set_verbose(self, verbose: bool) -> None:
        """``True``: the terminal shows each row's whole table and the ``debug`` lines too
        (as ``debug.log`` does); ``False`` (the default): a summary line per row."""
        self._verbose = bool(verbose)

    def get_verbose(self) -> bool:
        return self._verbose

    def push_prefix(self, prefix: str) -> None:
        self._prefixes.append(prefix)

    def pop_prefix(self) -> None:
        self._prefixes.pop()

    @contextmanager
    def prefix(self, prefix: str) -> Iterator[None]:
        """Prepend ``prefix`` to text lines logged inside the block."""
        self.push_prefix(prefix)
        try:
            yield
        finally:
            self.pop_prefix()

    def set_text_output(self, path: str | os.PathLike | None) -> None:
        """Append text lines to ``path`` (``None``: stop writing to a file)."""
        if self._text_file is not None:
            self._text_file.close()
            self._text_file = None
        if path is not None:
            self._text_file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)

    # ------------------------------------------------------------- tabular
    def push_tabular_prefix(self, prefix: str) -> None:
        self._tabular_prefixes.append(prefix)

    def pop_tabular_prefix(self) -> None:
        self._tabular_prefixes.pop()

    @contextmanager
    def tabular_prefix(self, prefix: str) -> Iterator[None]:
        """Prepend ``prefix`` to the keys recorded inside the block."""
        self.push_tabular_prefix(prefix)
        try:
            yield
        finally:
            self.pop_tabular_prefix()

    def record_tabular(self, key: str, val: Any) -> None:
        """Set ``key`` in the row that the next ``dump_tabular`` writes."""
        self._tabular["".join(self._tabular_prefixes) + str(key)] = plain(val)

    def record_tabular_misc_stat(
        self, key: str, values: Sequence[Any], placement: str = "back"
    ) -> None:
        """Record ``<key>Average``, ``Std`` (population), ``Median``, ``Min`` and ``Max`` of
        ``values`` (all NaN when empty); ``placement="front"`` names them ``Average<key>``..."""
        if placement not in ("front", "back"):
            raise ValueError(f"placement must be 'front' or 'back', got {placement!r}")
        values = [plain(v) for v in values]
        if values:
            arr = np.asarray(values)
            stats = (np.mean(arr), np.std(arr), np.median(arr), np.min(arr), np.max(arr))
        else:
            stats = (math.nan,) * 5
        for name, stat in zip(_STAT_NAMES, stats, strict=True):
            self.record_tabular(key + name if placement == "back" else name + key, stat)

    def set_iteration(self, itr: int) -> None:
        """The step at which the next row's TensorBoard scalars are written."""
        self._iteration = int(itr)

    def dump_tabular(self, total_steps: int | None = None) -> None:
        """Write the recorded row: a table in ``debug.log``, a summary line on the terminal
        (``summary_line``; the table when verbose or when the row has no ``Iteration``), a row
        of ``progress.csv`` and TensorBoard scalars; then start an empty row.
        ``total_steps``: the steps the run is to reach, for the time left."""
        row, self._tabular = self._tabular, {}
        if not row:
            return
        summary = summary_line(row, total_steps)
        width = max(len(k) for k in row)
        rule = "-" * (width + 2 + max(len(_format(v)) for v in row.values()))
        lines = [rule] + [f"{k:<{width}}  {_format(v)}" for k, v in row.items()] + [rule]
        for line in lines:
            self._write(line, terminal=self._verbose or summary is None)
        if summary is not None:
            self._write(summary, terminal=True)
        if self._csv_path is not None:
            self._write_row(row)
        if self._summary_writer is not None:
            for key, value in row.items():
                if _is_number(value):
                    self._summary_writer.add_scalar(key, value, self._iteration)
            self._summary_writer.flush()
        if self._outputs:
            numbers = {k: float(v) for k, v in row.items() if _is_number(v)}
            for output in self._outputs:
                output.write(numbers, self._iteration)

    # -------------------------------------------------------- progress.csv
    def set_tabular_output(self, path: str | os.PathLike | None) -> None:
        """Write rows to the CSV file ``path`` (``None``: stop).  An existing file is continued:
        its header fixes the column order, and a last line cut short (a run killed while
        writing it) is dropped."""
        if self._csv_file is not None:
            self._csv_file.close()
        self._csv_path, self._csv_file, self._header, self._n_rows = None, None, None, 0
        if path is None:
            return
        self._csv_path = Path(path)
        if self._csv_path.exists() and self._csv_path.stat().st_size > 0:
            text = self._csv_path.read_text(encoding="utf-8")
            rows = list(csv.reader(io.StringIO(text)))
            complete = text.endswith("\n")
            if not complete:
                rows = rows[:-1]
            self._header = rows[0] if rows else None
            if self._header is None:
                atomic_write(self._csv_path, lambda f: None)
            elif not complete:
                self._rewrite(rows[1:])
            self._n_rows = max(len(rows) - 1, 0)
        self._csv_file = open(self._csv_path, "a", encoding="utf-8", newline="")  # noqa: SIM115

    @property
    def tabular_row_count(self) -> int:
        """Rows in the current ``progress.csv`` (header not counted)."""
        return self._n_rows

    def truncate_tabular(self, n_rows: int) -> None:
        """Keep only the first ``n_rows`` rows of ``progress.csv`` (a resumed run drops the
        rows written after its checkpoint, which it is about to write again)."""
        if self._csv_path is None or self._n_rows <= n_rows:
            return
        self._rewrite(self._read_rows()[:n_rows])

    def _read_rows(self) -> list[list[str]]:
        assert self._csv_path is not None
        with open(self._csv_path, encoding="utf-8", newline="") as f:
            return list(csv.reader(f))[1:]

    def _rewrite(self, rows: list[list[str]]) -> None:
        """Replace ``progress.csv`` atomically by the header and ``rows`` (each padded with
        empty cells to the header's length)."""
        assert self._csv_path is not None and self._header is not None
        n = len(self._header)
        text = _csv_line(self._header) + "".join(_csv_line(r + [""] * (n - len(r))) for r in rows)
        old = self._csv_file
        if old is not None:
            old.close()
        atomic_write(self._csv_path, lambda f: f.write(text.encode("utf-8")))
        self._n_rows = len(rows)
        if old is not None:  # (reopened)
            self._csv_file = open(self._csv_path, "a", encoding="utf-8", newline="")  # noqa: SIM115

    def _write_row(self, row: dict[str, Any]) -> None:
        """Columns keep the first row's order; keys new in a later row are appended as new
        columns (the file is rewritten once with empty cells for the earlier rows), and keys
        missing from a row are written as empty cells."""
        assert self._csv_file is not None
        if self._header is None:
            self._header = list(row)
            with naming_the_file(self._csv_file.name):
                self._csv_file.write(_csv_line(self._header))
        else:
            new = [k for k in row if k not in self._header]
            if new:
                self.log(f"progress.csv: new columns {new}; earlier rows get empty cells")
                old = self._read_rows()
                self._header = self._header + new
                self._rewrite(old)
        with naming_the_file(self._csv_file.name):
            self._csv_file.write(_csv_line([row.get(k, "") for k in self._header]))
            self._csv_file.flush()
        self._n_rows += 1

    # --------------------------------------------------------- TensorBoard
    def set_row_outputs(self, outputs: list[RowOutput]) -> None:
        """Also send each row's numbers to ``outputs`` (``[]``: stop)."""
        self._outputs = list(outputs)

    def set_summary_writer(self, writer: Any) -> None:
        """Also write each row's numbers as TensorBoard scalars (``None``: stop)."""
        self._summary_writer = writer

    # ----------------------------------------------------------- snapshots
    def set_snapshot_dir(self, path: str | os.PathLike | None) -> None:
        self._snapshot_dir = None if path is None else Path(path)

    def get_snapshot_dir(self) -> Path | None:
        return self._snapshot_dir

    def set_snapshot_mode(self, mode: str) -> None:
        """``none``: save nothing; ``last``: ``params.pt``, overwritten each time; ``all``:
        ``itr_<itr>.pt`` each time; ``gap``: ``itr_<itr>.pt`` when ``(itr + 1)`` is a
        multiple of the snapshot gap."""
        if mode not in SNAPSHOT_MODES:
            raise ValueError(f"snapshot_mode must be one of {SNAPSHOT_MODES}, got {mode!r}")
        self._snapshot_mode = mode

    def get_snapshot_mode(self) -> str:
        return self._snapshot_mode

    def set_snapshot_gap(self, gap: int) -> None:
        self._snapshot_gap = as_count("snapshot_gap", gap, 1, expected="an int >= 1")

    def get_snapshot_gap(self) -> int:
        return self._snapshot_gap

    def snapshot_path(self, itr: int, always: bool = False) -> Path | None:
        """Where ``save_itr_params(itr, ...)`` would write; ``None`` when it would not
        (``always``: a path in any mode but ``none``, as ``all`` names it)."""
        if self._snapshot_dir is None or self._snapshot_mode == "none":
            return None
        if self._snapshot_mode == "last":
            return self._snapshot_dir / "params.pt"
        if always or self._snapshot_mode == "all" or (itr + 1) % self._snapshot_gap == 0:
            return self._snapshot_dir / f"itr_{itr}.pt"
        return None

    def save_itr_params(self, itr: int, params: Mapping[str, Any]) -> Path | None:
        """Save the snapshot ``params`` of iteration ``itr`` as the snapshot mode says,
        atomically; returns its path (``None`` when nothing was saved). The runners write
        theirs through ``Checkpointer``, which also keeps what lies beside it."""
        path = self.snapshot_path(itr)
        if path is None:
            return None
        save_torch(dict(params), path)
        return path


logger = Logger()

_TENSORBOARD_NOTICE = [False]


def _summary_writer(run_dir: Path) -> Any:
    """A TensorBoard ``SummaryWriter`` on ``run_dir``; ``None``, with a notice the first time,
    when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        if not _TENSORBOARD_NOTICE[0]:
            _TENSORBOARD_NOTICE[0] = True
            logger.log(f"use_summary_writer: TensorBoard is not available ({e}); no scalars")
        return None
    return SummaryWriter(str(run_dir))


def _run_dir(log_dir: str | os.PathLike, run_ID: Any, override_prefix: bool) -> Path:
    run_dir = Path(log_dir) / f"run_{run_ID}"
    absolute = Path(os.path.abspath(run_dir))
    data_root = Path.cwd() / "data"
    if override_prefix or run_dir.is_absolute() or data_root in absolute.parents:
        return absolute
    now = datetime.datetime.now()
    return data_root / "local" / now.strftime("%Y%m%d") / now.strftime("%H%M%S") / run_dir


@contextmanager
def logger_context(
    log_dir: str | os.PathLike,
    run_ID: Any,
    name: str,
    log_params: Mapping[str, Any] | None = None,
    snapshot_mode: str = "none",
    override_prefix: bool = False,
    use_summary_writer: bool = False,
    snapshot_gap: int = 1,
    log_to: Sequence[str] | str = (),
) -> Iterator[Path]:
    """Log to the run directory ``log_dir/run_<run_ID>`` inside the block; yields it.

    The directory gets ``params.json`` (``log_params`` with ``name`` and ``run_ID``; an
    existing one is kept when ``log_params`` is None), ``debug.log`` and ``progress.csv``
    (both continued when they exist, so a resumed run appends), snapshots as
    ``snapshot_mode`` says (``gap`` every ``snapshot_gap`` iterations) and, with
    ``use_summary_writer``, TensorBoard events. ``log_to``: outputs that also get every row,
    any of ``"tensorboard"`` (the same as ``use_summary_writer``), ``"wandb"`` and
    ``"mlflow"`` (extras of the same names; see ``WandbOutput`` and ``MlflowOutput`` for
    where they write); a resumed run continues its W&B and MLflow runs. A relative ``log_dir`` not already under
    ``./data`` is put under ``./data/local/<yyyymmdd>/<hhmmss>/`` unless ``override_prefix``;
    an absolute one is used as given.
    """
    if snapshot_mode not in SNAPSHOT_MODES:
        raise ValueError(f"snapshot_mode must be one of {SNAPSHOT_MODES}, got {snapshot_mode!r}")
    snapshot_gap = as_count("snapshot_gap", snapshot_gap, 1, expected="an int >= 1")
    if log_params is not None and not isinstance(log_params, Mapping):
        raise TypeError(f"log_params must be a mapping or None, got {type(log_params).__name__}")
    outputs = check_outputs(log_to)
    use_summary_writer = use_summary_writer or "tensorboard" in outputs
    run_dir = _run_dir(log_dir, run_ID, override_prefix)
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_dir_lock(run_dir):
        remove_partial_writes(run_dir)  # (a killed writer's: no other process writes here)
        with (
            _logging_to(
                run_dir, name, run_ID, log_params, snapshot_mode, snapshot_gap, use_summary_writer
            ),
            _row_outputs(run_dir, f"{name}_{run_ID}", outputs),
        ):
            yield run_dir


@contextmanager
def _row_outputs(run_dir: Path, name: str, outputs: tuple[str, ...]) -> Iterator[None]:
    """W&B and MLflow runs for the block, given the run's parameters (``params.json``)."""
    if not {"wandb", "mlflow"} & set(outputs):
        yield
        return
    params = json.loads((run_dir / "params.json").read_text(encoding="utf-8"))
    opened = open_outputs(outputs, run_dir, name, params)
    logger.set_row_outputs(opened)
    try:
        yield
    finally:
        logger.set_row_outputs([])
        for output in opened:
            output.close()


@contextmanager
def _logging_to(
    run_dir: Path,
    name: str,
    run_ID: Any,
    log_params: Mapping[str, Any] | None,
    snapshot_mode: str,
    snapshot_gap: int,
    use_summary_writer: bool,
) -> Iterator[Path]:
    params_file = run_dir / "params.json"
    if log_params is not None or not params_file.exists():
        params = {**(log_params or {}), "name": name, "run_ID": run_ID}
        text = json.dumps(params, indent=2, sort_keys=True, default=str) + "\n"
        atomic_write(params_file, lambda f: f.write(text.encode("utf-8")))
    saved = (logger.get_snapshot_dir(), logger.get_snapshot_mode(), logger.get_snapshot_gap())
    logger.set_snapshot_dir(run_dir)
    logger.set_snapshot_mode(snapshot_mode)
    logger.set_snapshot_gap(snapshot_gap)
    logger.set_text_output(run_dir / "debug.log")
    logger.set_tabular_output(run_dir / "progress.csv")
    writer = _summary_writer(run_dir) if use_summary_writer else None
    logger.set_summary_writer(writer)
    logger.push_prefix(f"{name}_{run_ID} ")
    try:
        yield run_dir
    finally:
        logger.pop_prefix()
        logger.set_summary_writer(None)
        if writer is not None:
            writer.close()
        logger.set_tabular_output(None)
        logger.set_text_output(None)
        logger.set_snapshot_dir(saved[0])
        logger.set_snapshot_mode(saved[1])
        logger.set_snapshot_gap(saved[2])
