"""`--verbose`: the whole diagnostics table at each log interval instead of a summary line."""

import rl_suite._trainer
from rl_runners import logger
from rl_suite._cli import main

TRAIN = ["train", "ppo", "--steps", "1024", "--set", "runner.log_interval_steps=512"]


def table_rows(text):
    return sum(line.startswith("ReturnAverage ") for line in text.splitlines())


def summary_lines(text):
    return [line for line in text.splitlines() if line.startswith("itr ")]


def test_train_prints_summary_lines_and_with_verbose_the_table(tmp_path, capsys):
    assert main([*TRAIN, "--log-dir", str(tmp_path / "quiet")]) == 0
    out = capsys.readouterr().out
    assert table_rows(out) == 0 and len(summary_lines(out)) == 3  # before training, 2 rows
    debug = (tmp_path / "quiet" / "run_0" / "debug.log").read_text()
    assert table_rows(debug) == 3

    assert main([*TRAIN, "--log-dir", str(tmp_path / "verbose"), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert table_rows(out) == 3 and len(summary_lines(out)) == 3
    assert not logger.get_verbose()  # (for this command only)


def test_resume_takes_verbose(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(
        rl_suite._trainer, "resume", lambda run_dir, steps: seen.append(logger.get_verbose())
    )
    assert main(["resume", "somewhere", "--verbose"]) == 0
    assert main(["resume", "somewhere"]) == 0
    assert seen == [True, False] and not logger.get_verbose()
