"""`rl-suite sweep CONFIG --engine ray`: the sweep's runs as Ray Tune trials on a local Ray
instance the tests start (ray.init(num_cpus=2)), a trial that dies midway continuing from its
checkpoint (Tune's retries, and Tuner.restore of a stopped sweep), and the checks made before
anything starts. The tests that need Ray skip without it (pip install "rl-suite[ray]"; the nox
session `ray` runs them)."""

import json
import os
import sys
from pathlib import Path

import pytest

from rl_suite._cli import main
from rl_suite._plot import have_matplotlib, read_progress
from rl_suite._sweep import load_sweep
from rl_suite._sweep_launch import run_sweep

TESTS = Path(__file__).resolve().parent  # holds crashing_env.py
STEPS = 2048  # 8 iterations of the cartpole preset's 8 envs x 32 steps; a row every 2
OVERRIDES = [
    "runner.log_interval_steps=512",
    "runner.evaluate=False",  # (evaluation episodes would step the crashing env too)
    "sampler.max_decorrelation_steps=0",
]
VARIANTS = [
    {"name": "lr-1e-3", "overrides": ["algo_kwargs.learning_rate=1e-3"]},
    {"name": "lr-1e-4", "overrides": ["algo_kwargs.learning_rate=1e-4"]},
]


def _file(tmp_path, name="sweep.json", **changes):
    spec = {
        "preset": "cartpole",
        "steps": STEPS,
        "overrides": OVERRIDES,
        "grid": [VARIANTS],
        **changes,
    }
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return path


def _crashing(tmp_path, **changes):
    """A sweep whose first env to take its 150th step ends its trial's process (once in all):
    in the 5th iteration, after the checkpoints at 512 and 1024 steps."""
    marker = str(tmp_path / "crashed")
    overrides = [*OVERRIDES, "env_kwargs.crash_at=150", f"env_kwargs.marker={marker!r}"]
    return _file(tmp_path, env="crashing_env:CrashOnceCartPole-v1", overrides=overrides, **changes)


def _info(run_dir):
    return json.loads((run_dir / "sweep_run.json").read_text())


# ----------------------------------------------------------------- without Ray


def test_the_ray_engine_without_ray_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # (as if it were not installed)
    sweep_dir = tmp_path / "sweep"
    assert (
        main(["sweep", str(_file(tmp_path)), "--engine", "ray", "--log-dir", str(sweep_dir)]) == 2
    )
    assert "pip install 'rl-suite[ray]'" in capsys.readouterr().err
    assert not sweep_dir.exists()


def test_the_local_engine_refuses_the_ray_settings(tmp_path, capsys):
    for key, value in [("gpu_per_run", 0.5), ("max_failures", 2)]:
        with pytest.raises(ValueError, match=f"{key!r} is read by the ray engine only"):
            load_sweep(_file(tmp_path, **{key: value}))
    assert main(["sweep", str(_file(tmp_path)), "--address", "auto"]) == 2
    assert "--address is for --engine ray" in capsys.readouterr().err


# ------------------------------------------------------ checks, with Ray installed


def test_ray_settings_are_checked_before_anything_starts(tmp_path):
    pytest.importorskip("ray")
    log_dir = tmp_path / "runs"
    bad = {
        "gpu_per_run": [-1, "1", 1.5, True, float("inf")],
        "max_failures": [-1, 0.5, None],
    }
    for key, values in bad.items():
        for value in values:
            with pytest.raises(ValueError, match=key):
                load_sweep(_file(tmp_path, **{key: value}), log_dir, engine="ray")
    refused = [
        ({"gpu_per_run": 0.5}, "set device='cuda'"),  # a GPU the runs would leave idle
        ({"overrides": ["device='cuda'"]}, "set gpu_per_run"),  # or Tune gives it no GPU
        ({"overrides": ["device='cuda:1'"], "gpu_per_run": 0.5}, "cuda:0"),
        ({"preset": "cartpole-dqn", "overrides": ["runner.asynchronous=True"]}, "local engine"),
    ]
    for changes, message in refused:
        with pytest.raises(ValueError, match=message):
            load_sweep(_file(tmp_path, **changes), log_dir, engine="ray")
    # A GPU share for runs on the GPU is checked here, on a machine that may have none.
    sweep = load_sweep(
        _file(tmp_path, overrides=["device='cuda'"], gpu_per_run=0.5), log_dir, engine="ray"
    )
    assert (sweep.gpu_per_run, sweep.cpu_per_run, sweep.max_failures) == (0.5, 1, 3)
    assert not log_dir.exists()


# ------------------------------------------------------------- sweeps on Ray


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance of 2 CPUs; its workers (and this process) can import
    crashing_env (Ray's workers inherit this process's environment)."""
    ray = pytest.importorskip("ray")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), saved]))
    sys.path.insert(0, str(TESTS))
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        sys.path.remove(str(TESTS))
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def _check_runs(sweep_dir):
    """Both runs trained to the end, one row per log interval, no interval twice; returns
    their sweep_run.json."""
    infos = {}
    for variant in VARIANTS:
        run_dir = sweep_dir / variant["name"] / "run_0"
        assert read_progress(run_dir)["CumSteps"] == [512, 1024, 1536, STEPS]
        assert json.loads((run_dir / "params.json").read_text())["config"]["seed"] == 0
        assert (run_dir / "params.pt").is_file() and (run_dir / "stdout.log").is_file()
        infos[variant["name"]] = _info(run_dir)
        assert "finished" in infos[variant["name"]]
    return infos


def _resumed(infos):
    """The run that died: two attempts, the second from a checkpoint midway."""
    died = [name for name, info in infos.items() if len(info["attempts"]) == 2]
    assert len(died) == 1 and all(len(info["attempts"]) in (1, 2) for info in infos.values())
    assert 0 < infos[died[0]]["attempts"][1]["resumed_at_steps"] < STEPS
    return died[0]


def test_a_trial_that_dies_continues_from_its_checkpoint(local_ray, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    command = ["sweep", str(_crashing(tmp_path, max_failures=1)), "--engine", "ray"]
    assert main([*command, "--log-dir", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "crashed").exists()  # (the crash happened)
    died = _resumed(_check_runs(sweep_dir))
    assert f"{died}/run_0 died: it continues from its last checkpoint (retry 1 of 1)" in out
    table = out[out.index("variant ") :].splitlines()
    for variant in VARIANTS:
        row = next(line.split() for line in table if line.startswith(variant["name"]))
        assert row[1:3] == ["0", str(STEPS)] and row[-1] == "ok"
    # Tune's side: one checkpoint kept per trial, the run's snapshot with its sampler state.
    checkpoints = sorted((sweep_dir / "tune").glob("*/checkpoint_*"))
    assert len(checkpoints) == 2
    assert all(
        "params.pt" in (names := {p.name for p in c.iterdir()})
        and any(n.startswith("sampler_state-") for n in names)
        for c in checkpoints
    )
    if have_matplotlib():
        assert main(["plot", str(sweep_dir)]) == 0
        assert (sweep_dir / "sweep.png").stat().st_size > 0


def test_a_stopped_sweep_continues_where_it_stopped(local_ray, tmp_path):
    file, sweep_dir = _crashing(tmp_path, max_failures=0), tmp_path / "sweep"
    summary = run_sweep(load_sweep(file, sweep_dir, engine="ray"))
    [failed] = summary.failed  # no retries: the trial that died ends the sweep failed
    assert "Ray Tune: the trial failed" in failed.stderr.read_text()
    assert read_progress(failed.run_dir)["CumSteps"][-1] < STEPS
    with pytest.raises(FileExistsError, match="another Ray sweep"):
        load_sweep(_file(tmp_path, "other.json"), sweep_dir, engine="ray")
    with pytest.raises(FileExistsError, match="not empty"):  # (the local queue never continues)
        load_sweep(file, sweep_dir)

    again = load_sweep(file, sweep_dir, engine="ray")
    assert again.resumed
    summary = run_sweep(again)  # Tuner.restore: the failed trial continues, the other is done
    assert not summary.failed and len(summary.runs) == 2
    infos = _check_runs(sweep_dir)
    assert _resumed(infos) == failed.log_dir.name
