"""The console: a summary line per log interval (the table with verbose), a tqdm bar on a
terminal only; debug.log keeps everything."""

import csv
import io
import math
import re
import sys
import time

import pytest
from rl_runners_toys import ToyTrajInfo, make, make_policy

from rl_runners import (
    Logger,
    MinibatchRl,
    MinibatchRlEval,
    OnPolicyRunner,
    ProgBarCounter,
    logger,
    logger_context,
)
from rl_runners._console import print_line
from rl_runners._logger import summary_line

SUMMARY = re.compile(
    r"itr (\d+) \| steps (\d+)/(\d+) \| ([\d,]+|-) steps/s \| return (-?\d+\.\d\d|-) \| "
    r"elapsed \d+:\d\d:\d\d \| left (\d+:\d\d:\d\d|-)"
)


@pytest.fixture
def verbose():
    logger.set_verbose(True)
    yield
    logger.set_verbose(False)


def train(tmp_path, runner_cls=MinibatchRl, **kwargs):
    algo, agent, sampler = make(kwargs.pop("sampler_kwargs", None))
    runner = runner_cls(algo, agent, sampler, n_steps=48, seed=3, log_interval_steps=16, **kwargs)
    with logger_context(tmp_path, 0, "toy") as run_dir:
        runner.train()
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return run_dir, rows


def table_rows(text):
    return sum(line.startswith("ReturnAverage ") for line in text.splitlines())


def summaries(text):
    return [m for m in map(SUMMARY.fullmatch, text.splitlines()) if m]


def test_a_run_prints_one_summary_line_per_log_interval_and_no_table(tmp_path, capsys):
    run_dir, rows = train(tmp_path)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 5  # "Running 6 iterations", three rows, "Training complete."
    assert lines[0].endswith("toy_0 Running 6 iterations of minibatch RL.")
    assert lines[-1].endswith("toy_0 Training complete.")
    found = summaries(out)
    assert [m.group(0) for m in found] == lines[1:4]
    for m, row in zip(found, rows, strict=True):
        assert (m[1], m[2], m[3]) == (row["Iteration"], row["CumSteps"], "48")
        assert m[4] == f"{float(row['StepsPerSecond']):,.0f}"
        assert m[5] == f"{float(row['ReturnAverage']):.2f}"
        assert m[6] != "-"
    assert "ReturnAverage" not in out and "Optimizing over" not in out
    assert err == ""  # not a terminal: no bar
    debug = (run_dir / "debug.log").read_text()
    assert table_rows(debug) == 3 and debug.count("Optimizing over 2 iterations") == 3
    assert all(line in debug for line in lines[1:4])
    assert "Runner master Torch threads" in debug


def test_verbose_shows_the_table_and_every_line_of_debug_log(tmp_path, capsys, verbose):
    run_dir, _ = train(tmp_path)
    out = capsys.readouterr().out
    assert table_rows(out) == 3 and len(summaries(out)) == 3
    assert out.splitlines() == (run_dir / "debug.log").read_text().splitlines()


def test_an_eval_run_summarizes_its_evaluations(tmp_path, capsys):
    infos = [ToyTrajInfo(5, 2.0), ToyTrajInfo(7, 4.0)]
    train(tmp_path, MinibatchRlEval, sampler_kwargs=dict(eval_script=infos))
    found = summaries(capsys.readouterr().out)
    assert [m[1] for m in found] == ["0", "1", "3", "5"]
    assert (found[0][2], found[0][4], found[0][6]) == ("0", "-", "-")  # before training
    assert {m[5] for m in found} == {"3.00"}


def test_on_policy_learn_calls_summarize_up_to_their_end(tmp_path, capsys):
    algo, agent, sampler = make_policy()
    runner = OnPolicyRunner(algo, agent, sampler, seed=5, log_interval_steps=16)
    with runner, logger_context(tmp_path, 0, "on_policy"):
        runner.learn(4)
        runner.learn(3)  # its last row comes after one iteration
    found = summaries(capsys.readouterr().out)
    assert [(m[1], m[2], m[3]) for m in found] == [
        ("1", "16", "32"),
        ("3", "32", "32"),
        ("5", "48", "56"),
        ("6", "56", "56"),
    ]


def test_summary_line_reads_prefixed_columns_and_marks_what_is_unknown():
    row = {
        "Diagnostics/Iteration": 9,
        "Diagnostics/CumTime (s)": 10.0,
        "Diagnostics/CumSteps": 100,
        "Diagnostics/StepsPerSecond": 1234.5,
        "DiscountedReturnAverage": 1.0,
        "ReturnAverage": 21.456,
    }
    assert summary_line(row, total_steps=400) == (
        "itr 9 | steps 100/400 | 1,234 steps/s | return 21.46 | elapsed 0:00:10 | left 0:00:30"
    )
    row["ReturnAverage"] = math.nan  # no episode ended yet
    del row["Diagnostics/StepsPerSecond"]
    assert summary_line(row) == (
        "itr 9 | steps 100 | - steps/s | return - | elapsed 0:00:10 | left -"
    )
    assert summary_line({"Loss": 0.5}) is None


def test_a_row_that_is_not_a_runners_is_printed_whole(capsys):
    log = Logger()
    log.record_tabular("Loss", 0.5)
    log.dump_tabular()
    assert "Loss  0.5" in capsys.readouterr().out


def test_debug_lines_reach_the_terminal_only_when_verbose(tmp_path, capsys):
    log = Logger()
    log.set_text_output(tmp_path / "debug.log")
    log.debug("detail", with_timestamp=False)
    log.set_verbose(True)
    assert log.get_verbose()
    log.debug("shown", with_timestamp=False)
    log.set_text_output(None)
    assert capsys.readouterr().out == "shown\n"
    assert (tmp_path / "debug.log").read_text() == "detail\nshown\n"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_is_drawn_on_a_terminal_only(monkeypatch, capsys):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = ProgBarCounter(4)  # rlpyt's call shape
    bar.update(1)
    time.sleep(0.2)  # (tqdm redraws at most every 0.1 s)
    bar.update(2)
    shown = terminal.getvalue().rsplit("\r", 1)[-1]  # what the line shows now
    assert shown.startswith(" 50%|") and "| 2/4 [" in shown and shown.endswith("itr/s]")
    drawn = len(terminal.getvalue())
    print_line("a line")  # the bar is cleared, the line printed, the bar drawn again
    assert capsys.readouterr().out == "a line\n"
    again = terminal.getvalue()[drawn:]
    assert again.startswith("\r ") and "2/4" in again
    drawn = len(terminal.getvalue())
    bar.stop()
    bar.update(3)  # ignored once stopped
    assert terminal.getvalue()[drawn:].strip() == ""  # cleared

    log = io.StringIO()  # a file or a pipe: nothing
    bar = ProgBarCounter(4, stream=log)
    for i in range(4):
        bar.update(i + 1)
    bar.stop()
    assert log.getvalue() == ""
    with pytest.raises(ValueError, match="total_count"):
        ProgBarCounter(0)
