import datetime
import json

import pytest

from rl_launch import PARAMS_FILE, add_exp_param, check_progress, run_context


def test_run_context_makes_the_run_dir_and_params(tmp_path):
    with run_context(tmp_path / "exp", 3, "ppo", log_params={"lr": 0.1}) as run_dir:
        assert run_dir == tmp_path / "exp" / "run_3" and run_dir.is_dir()
    params = json.loads((run_dir / PARAMS_FILE).read_text())
    assert params == {"lr": 0.1, "name": "ppo", "run_ID": 3}
    with run_context(tmp_path / "exp", 3, "ppo") as again:  # (no params: keep the saved ones)
        assert again == run_dir
    assert json.loads((run_dir / PARAMS_FILE).read_text()) == params
    with pytest.raises(TypeError, match="log_params"), run_context(tmp_path, 0, "x", [1]):
        pass


def test_run_context_puts_a_relative_dir_under_data_with_the_date(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with run_context("cartpole", 0, "ppo") as run_dir:
        pass
    relative = run_dir.relative_to(tmp_path / "data" / "local")
    assert relative.parts[0] == datetime.date.today().strftime("%Y%m%d")
    assert len(relative.parts[1]) == 6 and relative.parts[2:] == ("cartpole", "run_0")
    with run_context("data/mine", 1, "ppo") as run_dir:
        assert run_dir == tmp_path / "data" / "mine" / "run_1"
    with run_context("cartpole", 2, "ppo", override_prefix=True) as run_dir:
        assert run_dir == tmp_path / "cartpole" / "run_2"


def test_check_progress_counts_rows(tmp_path, capsys):
    for name, rows in (("a/run_0", 3), ("a/run_1", 0), ("b/run_0", 1)):
        (tmp_path / name).mkdir(parents=True)
        lines = ["Iteration,Return"] + [f"{i},{i}" for i in range(rows)]
        (tmp_path / name / "progress.csv").write_text("\n".join(lines) + "\n")
    counts = check_progress(tmp_path)
    assert {str(p.relative_to(tmp_path)): n for p, n in counts.items()} == {
        "a/run_0/progress.csv": 3,
        "a/run_1/progress.csv": 0,
        "b/run_0/progress.csv": 1,
    }
    assert "a/run_0/progress.csv" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="exp_dir"):
        check_progress(tmp_path / "missing")


def test_add_exp_param_is_a_dry_run_until_write(tmp_path, capsys):
    for run in ("run_0", "run_1"):
        with run_context(tmp_path, run[-1], "ppo", log_params={"lr": 0.1}):
            pass
    (tmp_path / "not_a_run").mkdir()
    would = add_exp_param("tag", "baseline", tmp_path)
    assert [p.parent.name for p in would] == ["run_0", "run_1"]
    assert "would set tag='baseline'" in capsys.readouterr().out
    assert "tag" not in json.loads((tmp_path / "run_0" / PARAMS_FILE).read_text())
    assert add_exp_param("tag", "baseline", tmp_path, write=True) == would
    assert json.loads((tmp_path / "run_1" / PARAMS_FILE).read_text())["tag"] == "baseline"
    assert add_exp_param("tag", "baseline", tmp_path, write=True) == []  # (already there)
    with pytest.raises(ValueError, match="param_name"):
        add_exp_param("", 1, tmp_path)
