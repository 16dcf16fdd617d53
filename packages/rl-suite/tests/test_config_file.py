"""``train --config FILE``, ``resume --steps N`` and the note on rounded step counts."""

import csv
import json

import pytest

from rl_suite._cli import main

TIMES = ("Time", "PerSecond")


def rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return [
            {k: v for k, v in row.items() if not any(t in k for t in TIMES)}
            for row in csv.DictReader(f)
        ]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("first")
    argv = ["train", "ppo", "--env", "CartPole-v1", "--steps", "2048", "--seed", "4"]
    settings = ["runner.log_interval_steps=1024", "runner.evaluate=False", "torch_threads=1"]
    assert main([*argv, "--log-dir", str(root), *(f"--set={s}" for s in settings)]) == 0
    return root / "run_4"


def test_a_runs_params_json_trains_the_same_run_again(run_dir, tmp_path):
    assert (
        main(["train", "--config", str(run_dir / "params.json"), "--log-dir", str(tmp_path)]) == 0
    )
    assert rows(tmp_path / "run_4") == rows(run_dir)


def test_options_change_a_config_file_and_a_partial_file_takes_the_defaults(tmp_path, capsys):
    config = tmp_path / "ppo.json"
    config.write_text(json.dumps({"algo": "ppo", "steps": 1024, "runner": {"evaluate": False}}))
    assert main(["train", "--config", str(config), "--seed", "7", "--log-dir", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "run_7" / "params.json").read_text())["config"]
    assert saved["seed"] == 7 and saved["env"] == "CartPole-v1" and saved["steps"] == 1024


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dqn"], "trains ppo, not dqn"),
        (["--preset", "cartpole"], "--config and --preset"),
    ],
)
def test_a_config_file_that_does_not_fit_is_named(run_dir, capsys, argv, message):
    assert main(["train", *argv, "--config", str(run_dir / "params.json")]) == 2
    assert message in capsys.readouterr().err


def test_bad_config_files_are_named(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for text, message in [
        ('{"algo": "ppo", "sampler": {"batch_Q": 3}}', "unknown setting 'sampler.batch_Q'"),
        ("[1, 2]", "holds no configuration"),
        ("{", "is not valid JSON"),
    ]:
        bad.write_text(text)
        assert main(["train", "--config", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and message in err
    assert main(["train"]) == 2
    assert "name the algorithm" in capsys.readouterr().err


def test_resume_steps_extends_a_finished_run_and_a_later_resume_goes_on_to_them(
    run_dir, tmp_path, capsys
):
    import shutil

    run = shutil.copytree(run_dir, tmp_path / "run_4")
    assert main(["resume", str(run), "--steps", "3072"]) == 0
    assert [r["CumSteps"] for r in rows(run)] == ["1024", "2048", "3072"]
    assert json.loads((run / "params.json").read_text())["config"]["steps"] == 3072
    assert main(["resume", str(run), "--steps", "1024"]) == 2
    assert "has trained 3,072 already" in capsys.readouterr().err


def test_steps_rounded_to_whole_iterations_are_said_once(tmp_path, capsys):
    argv = ["train", "ppo", "--steps", "1500", "--log-dir", str(tmp_path)]
    assert main([*argv, "--set", "runner.evaluate=False", "--set", "torch_threads=1"]) == 0
    out = capsys.readouterr().out
    assert out.count("1,500 asked for, 1,280 trained") == 1, out


def test_log_to_sends_the_rows_to_mlflow_with_the_config_and_a_resume_continues(
    tmp_path, monkeypatch, capsys
):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    argv = ["train", "ppo", "--steps", "1024", "--log-to", "mlflow", "--log-dir", str(tmp_path)]
    settings = ["runner.log_interval_steps=512", "runner.evaluate=False", "torch_threads=1"]
    assert main([*argv, *(f"--set={s}" for s in settings)]) == 0
    run_dir = tmp_path / "run_0"
    assert main(["resume", str(run_dir), "--steps", "1536"]) == 0
    client = mlflow.MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("rl-suite").experiment_id])
    assert run.data.params["config.log_to"] == "['mlflow']"
    assert run.data.params["config.runner.log_interval_steps"] == "512"
    history = client.get_metric_history(run.info.run_id, "CumSteps")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [
        float(r["CumSteps"]) for r in rows(run_dir)
    ]


def test_log_to_names_an_unknown_output(tmp_path, capsys):
    argv = ["train", "ppo", "--steps", "256", "--log-to", "tensorboard,neptune"]
    assert main([*argv, "--log-dir", str(tmp_path)]) == 2
    assert "unknown output 'neptune'" in capsys.readouterr().err
