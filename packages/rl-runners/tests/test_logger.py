import csv
import datetime
import json
import math
import sys
import types

import pytest

from rl_runners import Logger, logger, logger_context


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_logger_context_sets_up_the_run_directory(tmp_path, capsys):
    params = dict(lr=0.1, sizes=[64, 64], env=object())
    with logger_context(tmp_path / "exp", 3, "ppo", log_params=params) as run_dir:
        assert run_dir == tmp_path / "exp" / "run_3"
        logger.log("hello")
        logger.record_tabular("Iteration", 0)
        logger.record_tabular("Loss", 0.5)
        logger.dump_tabular()
    saved = json.loads((run_dir / "params.json").read_text())
    assert saved["lr"] == 0.1 and saved["sizes"] == [64, 64]
    assert (saved["name"], saved["run_ID"]) == ("ppo", 3)
    assert isinstance(saved["env"], str)  # what JSON cannot hold is written as text
    debug = (run_dir / "debug.log").read_text()
    assert "ppo_3 hello" in debug and "Loss" in debug
    assert read_csv(run_dir / "progress.csv") == [["Iteration", "Loss"], ["0", "0.5"]]
    out = capsys.readouterr().out  # (the table is in debug.log, the terminal has a summary)
    assert "ppo_3 hello" in out and "Loss" not in out
    assert "itr 0 | steps - | - steps/s | return - | elapsed - | left -" in out
    assert logger.get_snapshot_dir() is None and logger.get_snapshot_mode() == "none"


def test_an_existing_params_json_is_kept_without_new_log_params(tmp_path):
    with logger_context(tmp_path, 0, "a", log_params=dict(lr=1)):
        pass
    with logger_context(tmp_path, 0, "a") as run_dir:
        pass
    assert json.loads((run_dir / "params.json").read_text())["lr"] == 1


def test_relative_log_dirs_go_under_data_with_the_date(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with logger_context("exp", 1, "n") as run_dir:
        pass
    today = datetime.date.today().strftime("%Y%m%d")
    relative = run_dir.relative_to(tmp_path / "data" / "local" / today)
    assert relative.parts[1:] == ("exp", "run_1") and len(relative.parts[0]) == 6
    with logger_context("data/mine", 1, "n") as run_dir:
        assert run_dir == tmp_path / "data" / "mine" / "run_1"
    with logger_context("exp", 2, "n", override_prefix=True) as run_dir:
        assert run_dir == tmp_path / "exp" / "run_2"


def test_bad_context_arguments_create_nothing(tmp_path):
    with (
        pytest.raises(ValueError, match="snapshot_mode must be one of"),
        logger_context(tmp_path / "x", 0, "n", snapshot_mode="sometimes"),
    ):
        pass
    with (
        pytest.raises(ValueError, match="snapshot_gap"),
        logger_context(tmp_path / "x", 0, "n", snapshot_mode="gap", snapshot_gap=0),
    ):
        pass
    assert not (tmp_path / "x").exists()


def test_later_rows_with_new_or_missing_keys(tmp_path):
    with logger_context(tmp_path, 0, "n") as run_dir:
        logger.record_tabular("a", 1)
        logger.record_tabular("b", 2)
        logger.dump_tabular()
        logger.record_tabular("a", 3)
        logger.record_tabular("c", 4.5)
        logger.dump_tabular()
        logger.record_tabular("b", 5)
        logger.dump_tabular()
        assert logger.tabular_row_count == 3
    assert read_csv(run_dir / "progress.csv") == [
        ["a", "b", "c"],
        ["1", "2", ""],
        ["3", "", "4.5"],
        ["", "5", ""],
    ]
    assert "new columns ['c']" in (run_dir / "debug.log").read_text()


def test_progress_csv_is_continued_and_a_cut_last_line_dropped(tmp_path):
    with logger_context(tmp_path, 0, "n") as run_dir:
        for i in range(3):
            logger.record_tabular("x", i)
            logger.record_tabular("y", -i)
            logger.dump_tabular()
    with open(run_dir / "progress.csv", "a") as f:
        f.write("3,")  # a row cut short by a kill
    with logger_context(tmp_path, 0, "n"):
        assert logger.tabular_row_count == 3
        logger.record_tabular("y", 7)
        logger.record_tabular("x", 8)
        logger.dump_tabular()
        logger.truncate_tabular(10)  # fewer rows: nothing to drop
    assert read_csv(run_dir / "progress.csv")[-2:] == [["2", "-2"], ["8", "7"]]
    with logger_context(tmp_path, 0, "n"):
        logger.truncate_tabular(1)
        assert logger.tabular_row_count == 1
    assert read_csv(run_dir / "progress.csv") == [["x", "y"], ["0", "0"]]


def test_rows_are_on_disk_as_soon_as_they_are_dumped(tmp_path):
    with logger_context(tmp_path, 0, "n") as run_dir:
        logger.record_tabular("x", 1)
        logger.dump_tabular()
        assert read_csv(run_dir / "progress.csv") == [["x"], ["1"]]


def test_misc_stat():
    log = Logger()
    log.record_tabular_misc_stat("Return", [1, 2, 3, 10])
    log.record_tabular_misc_stat("Empty", [])
    log.record_tabular_misc_stat("Loss", [2.0], placement="front")
    row = log._tabular
    assert row["ReturnAverage"] == 4.0 and row["ReturnMedian"] == 2.5
    assert row["ReturnStd"] == pytest.approx(math.sqrt(12.5))  # population std
    assert (row["ReturnMin"], row["ReturnMax"]) == (1, 10)
    assert all(math.isnan(row[f"Empty{s}"]) for s in ("Average", "Std", "Median", "Min", "Max"))
    assert row["AverageLoss"] == 2.0
    with pytest.raises(ValueError, match="placement"):
        log.record_tabular_misc_stat("x", [1], placement="middle")


def test_tabular_and_text_prefixes(capsys):
    log = Logger()
    with log.tabular_prefix("Diagnostics/"):
        log.record_tabular("Iteration", 1)
    log.record_tabular("Other", 2)
    assert list(log._tabular) == ["Diagnostics/Iteration", "Other"]
    with log.prefix("itr #1 "):
        log.log("inside", with_timestamp=False)
    log.log("outside", with_timestamp=False)
    assert capsys.readouterr().out.splitlines() == ["itr #1 inside", "outside"]


def test_missing_tensorboard_is_a_one_time_notice(tmp_path, monkeypatch, capsys):
    import rl_runners._logger as logger_module

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    monkeypatch.setattr(logger_module, "_TENSORBOARD_NOTICE", [False])
    for run in range(2):
        with logger_context(tmp_path, run, "n", use_summary_writer=True):
            logger.record_tabular("x", 1)
            logger.dump_tabular()
    assert capsys.readouterr().out.count("TensorBoard is not available") == 1


def test_tensorboard_scalars_when_available(tmp_path, monkeypatch):
    written = []

    class FakeWriter:
        def __init__(self, log_dir):
            written.append(("dir", log_dir))

        def add_scalar(self, key, value, step):
            written.append((key, value, step))

        def flush(self):
            pass

        def close(self):
            written.append("closed")

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    with logger_context(tmp_path, 0, "n", use_summary_writer=True) as run_dir:
        logger.set_iteration(4)
        logger.record_tabular("x", 1.5)
        logger.record_tabular("note", "text")
        logger.dump_tabular()
    assert written == [("dir", str(run_dir)), ("x", 1.5, 4), "closed"]
