"""Every command that reads a run directory fails on a damaged one with one line that names
the file and says what to do, and exit code 2: no traceback. The runs are real (a short PPO
training); each test damages a copy of one of their files."""

import json
import shutil

import pytest
import torch

import rl_suite
from rl_suite._cli import main
from rl_suite._plot import read_progress


def _train(root, snapshot_mode):
    config = rl_suite.make_config("cartpole", steps=512, seed=0)
    changes = ["runner.evaluate=False", "runner.log_interval_steps=256"]
    config = rl_suite.apply_overrides(config, [*changes, f"runner.snapshot_mode={snapshot_mode}"])
    return rl_suite.train(config, root / snapshot_mode)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs: one with params.pt ("last"), one with itr_0.pt and itr_1.pt."""
    root = tmp_path_factory.mktemp("runs")
    return {mode: _train(root, mode) for mode in ("last", "all")}


@pytest.fixture
def run_copy(runs, tmp_path):
    def copy(mode="last"):
        return shutil.copytree(runs[mode], tmp_path / "run_0")

    return copy


def one_error_line(capsys, argv):
    """Run the command line in-process; its exit code must be 2 and stderr one line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"rl-suite {argv[0]}: error: "), err
    return err


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


CHECKPOINT_DAMAGE = {
    "truncated": truncate,
    "empty": lambda path: path.write_bytes(b""),
    "not a checkpoint": lambda path: path.write_text('{"agent_state_dict": 1}'),
}


@pytest.mark.parametrize("command", ["eval", "resume"])
@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE)
def test_a_damaged_params_pt_is_named(run_copy, capsys, command, damage):
    run_dir = run_copy("last")
    CHECKPOINT_DAMAGE[damage](run_dir / "params.pt")
    err = one_error_line(capsys, [command, str(run_dir)])
    assert f"{run_dir / 'params.pt'} is not a readable checkpoint (truncated or damaged?)" in err
    assert f"{run_dir} holds no other checkpoint: train the run again" in err


@pytest.mark.parametrize("command", ["eval", "resume"])
def test_a_damaged_itr_checkpoint_names_another_and_that_one_works(run_copy, capsys, command):
    run_dir = run_copy("all")
    truncate(run_dir / "itr_1.pt")  # the latest: what eval and resume pick by default
    err = one_error_line(capsys, [command, str(run_dir)])
    assert f"{run_dir / 'itr_1.pt'} is not a readable checkpoint" in err
    hint = f"use another of the run's checkpoints: rl-suite {command} {run_dir / 'itr_0.pt'}"
    assert err.rstrip().endswith(hint)
    args = ["--episodes", "1"] if command == "eval" else []
    assert main([command, str(run_dir / "itr_0.pt"), *args]) == 0  # the hint, as typed


def test_a_damaged_sampler_state_is_named_by_resume(run_copy, capsys):
    run_dir = run_copy("last")
    state_file = run_dir / torch.load(run_dir / "params.pt", weights_only=True)["sampler_file"]
    truncate(state_file)
    err = one_error_line(capsys, ["resume", str(run_dir)])
    assert f"{state_file} (the environments' state saved with params.pt)" in err
    assert "not readable (truncated or damaged?)" in err


def _config_edit(change):
    def edit(path):
        params = json.loads(path.read_text())
        change(params["config"])
        path.write_text(json.dumps(params))

    return edit


PARAMS_DAMAGE = {
    # The example: a control character inside a string.
    "bad JSON": (
        lambda p: p.write_text('{"config": "a\x01b"}'),
        "is not valid JSON (damaged?): Invalid control character at: line 1 column 14",
    ),
    "truncated": (truncate, "is not valid JSON (damaged?)"),
    "not UTF-8": (lambda p: p.write_bytes(b"\xff\xfe{}"), "is not valid JSON (damaged?)"),
    "no config": (lambda p: p.write_text("[1, 2]"), "was not written by `rl-suite train`"),
    "config not an object": (
        lambda p: p.write_text('{"config": 5}'),
        ": config must be a JSON object of settings, got 5",
    ),
    "a missing key": (_config_edit(lambda c: c.pop("env")), ": config lacks env"),
    "an unknown algorithm": (
        _config_edit(lambda c: c.update(algo=3)),
        ": config.algo must be one of a2c, ppo",
    ),
    "a group that is a list": (
        _config_edit(lambda c: c.update(runner=[1])),
        ": config.runner must be a JSON object of settings, got [1]",
    ),
    "a string for a number": (
        _config_edit(lambda c: c.update(seed="x")),
        ": config.seed must be a number, got 'x'",
    ),
    "a number for a string": (
        _config_edit(lambda c: c.update(env=7)),
        ": config.env must be a string, got 7",
    ),
    "a nested number for a flag": (
        _config_edit(lambda c: c["sampler"].update(mid_batch_reset=1)),
        ": config.sampler.mid_batch_reset must be true or false, got 1",
    ),
    "a setting its class refuses": (
        _config_edit(lambda c: c["agent_kwargs"].update(no_such_option=1)),
        "no_such_option",
    ),
}


@pytest.mark.parametrize("command", ["eval", "resume"])
@pytest.mark.parametrize("damage", PARAMS_DAMAGE)
def test_a_damaged_params_json_is_named(run_copy, capsys, command, damage):
    run_dir = run_copy("last")
    edit, problem = PARAMS_DAMAGE[damage]
    edit(run_dir / "params.json")
    err = one_error_line(capsys, [command, str(run_dir)])
    assert f"{run_dir / 'params.json'}" in err and problem in err
    assert any(todo in err for todo in ("train the run again", "give the directory of a run"))


@pytest.mark.parametrize("command", ["eval", "resume", "plot"])
def test_a_missing_run_directory_or_file_is_named(run_copy, capsys, tmp_path, command):
    err = one_error_line(capsys, [command, str(tmp_path / "nowhere")])
    assert f"{tmp_path / 'nowhere'} is not a directory: give a run directory" in err
    run_dir = run_copy("last")
    missing = "progress.csv" if command == "plot" else "params.json"
    (run_dir / missing).unlink()
    err = one_error_line(capsys, [command, str(run_dir)])
    assert f"{run_dir} " in err and f"no {missing}" in err


PROGRESS_DAMAGE = {
    "not UTF-8": (
        lambda p: p.write_bytes(b"\x00\xffCumSteps\n1\n"),
        "is not a readable CSV file (damaged?)",
    ),
    "a word for a number": (
        lambda p: p.write_text(p.read_text().replace("\n0,", "\nzero,", 1)),
        "line 2, column Iteration: 'zero' is not a number (damaged?)",
    ),
    "a row too long": (
        lambda p: p.write_text(p.read_text() + "1," * 200 + "1\n"),
        "line 4 has 201 cells for",
    ),
    "no rows": (
        lambda p: p.write_text(p.read_text().splitlines()[0] + "\n"),
        "has no rows yet",
    ),
}


@pytest.mark.parametrize("damage", PROGRESS_DAMAGE)
def test_a_damaged_progress_csv_is_named_by_plot(run_copy, capsys, damage):
    run_dir = run_copy("last")
    edit, problem = PROGRESS_DAMAGE[damage]
    edit(run_dir / "progress.csv")
    err = one_error_line(capsys, ["plot", str(run_dir)])
    assert f"{run_dir / 'progress.csv'}" in err and problem in err


def test_resume_names_a_progress_csv_it_cannot_append_to(run_copy, capsys):
    run_dir = run_copy("last")
    (run_dir / "progress.csv").write_bytes(b"\x00\xff\x12")
    err = one_error_line(capsys, ["resume", str(run_dir)])
    assert f"{run_dir / 'progress.csv'} is not readable text (damaged?)" in err
    assert "move it away to start a new one" in err


def test_a_last_line_cut_short_is_left_out(run_copy, capsys):
    """A run killed while writing a row leaves part of it: the complete rows still plot."""
    run_dir = run_copy("last")
    path = run_dir / "progress.csv"
    text = path.read_text()
    whole = read_progress(run_dir)
    path.write_text(text[: text.rfind(",")])  # the last row without its last cell and line end
    cut = read_progress(run_dir)
    assert cut["CumSteps"] == whole["CumSteps"][:-1] and cut.keys() == whole.keys()
    if rl_suite._plot.have_matplotlib():
        assert main(["plot", str(run_dir)]) == 0
        assert (run_dir / "curve.png").stat().st_size > 0


def test_sweep_names_a_sweep_file_that_is_not_text(capsys, tmp_path):
    sweep_file = tmp_path / "sweep.json"
    sweep_file.write_bytes(b"\xff\xfe{}")
    err = one_error_line(capsys, ["sweep", str(sweep_file)])
    assert f"sweep file {sweep_file} is not valid JSON" in err


def test_a_copy_renamed_run_id_resumes_in_place_and_another_name_is_named(runs, tmp_path, capsys):
    copy = shutil.copytree(runs["all"], tmp_path / "copies" / "run_7")
    (copy / "itr_1.pt").unlink()  # back to the first snapshot
    for stale in copy.glob("itr_1_*"):
        stale.unlink()
    assert main(["resume", str(copy / "itr_0.pt")]) == 0
    assert (copy / "itr_1.pt").exists()
    assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == ["run_7"]
    renamed = shutil.copytree(runs["all"], tmp_path / "my-run")
    assert "a run directory is named run_<id>" in one_error_line(capsys, ["resume", str(renamed)])
