"""Sweep files (checked before anything starts), their grid of variants, a sweep run's share of
the machine, and the plot and report of a sweep, from a synthetic sweep directory. The real
sweep, through the queue, is in integration_tests/test_sweep.py."""

import json
from pathlib import Path

import numpy as np
import pytest

from rl_launch import ExperimentsSummary, RunResult
from rl_suite._cli import main
from rl_suite._plot import is_sweep, seed_band, sweep_runs
from rl_suite._sweep import load_sweep, variant_config
from rl_suite._sweep_launch import sweep_report
from rl_suite._sweep_run import run_affinity

SPEC = {
    "preset": "cartpole",
    "steps": 1024,
    "overrides": ["runner.log_interval_steps=512"],
    "grid": [
        [
            {"name": "fast", "overrides": ["algo_kwargs.learning_rate=1e-3"]},
            {"name": "slow", "overrides": ["algo_kwargs.learning_rate=1e-4"]},
        ]
    ],
    "seeds": 2,
}


def _file(tmp_path, **changes):
    spec = {**SPEC, **changes}
    path = tmp_path / "lr.json"
    path.write_text(json.dumps({k: v for k, v in spec.items() if v is not None}))
    return path


def _variant(name, *overrides):
    return {"name": name, "overrides": list(overrides)}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seed": 3}, "unknown key(s) ['seed']; known: title, preset"),
        ({"preset": None}, "give a 'preset' or an 'algo'"),
        ({"preset": "nope"}, "unknown preset 'nope'"),
        ({"algo": "a2c"}, "preset 'cartpole' is for ppo, not a2c"),
        ({"seeds": "2"}, "'seeds' must be an int >= 1, got '2'"),
        ({"cpu_per_run": 99}, "cpu_per_run=99 is more than"),
        ({"overrides": ["sampler.batch=3"]}, "unknown setting 'sampler.batch'"),
        ({"overrides": "sampler.batch_B=3"}, "'overrides' must be a list of 'key=value'"),
        ({"grid": []}, "'grid' must be a non-empty list of levels"),
        ({"grid": [[_variant("a", "learning_rate")]]}, "grid[0][0] ('a'): an override is"),
        ({"grid": [[{"name": "a", "override": []}]]}, "grid[0][0]: unknown key(s) ['override']"),
        ({"grid": [[{"overrides": ["seed=1"]}]]}, "grid[0][0] has no 'name'"),
        ({"grid": [[_variant("a"), _variant("b")]]}, "grid[0]: no variant overrides anything"),
        ({"grid": [[_variant("a", "seed=1"), _variant("a", "seed=2")]]}, "dir_names repeat"),
        ({"grid": [[_variant("a", "sampler.batch=1")]]}, "unknown setting 'sampler.batch'"),
        (
            {"grid": [[_variant("a", "algo_kwargs.learnin_rate=1")]]},
            "variant 'a': algo_kwargs: PPO.__init__() got an unexpected keyword argument",
        ),
        (
            {"grid": [[_variant("a", "algo_kwargs.clip=1"), _variant("b")]]},
            "grid[0][1] ('b') does not set algo_kwargs.clip",
        ),
        (
            {"grid": [[_variant("a", "steps=512")], [_variant("b", "steps=256")]]},
            "grid: variant level 1: key 'steps' clashes",
        ),
    ],
)
def test_bad_sweep_files_fail_before_anything_starts(tmp_path, capsys, changes, message):
    sweep_dir = tmp_path / "sweep"
    assert main(["sweep", str(_file(tmp_path, **changes)), "--log-dir", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert f"rl-suite sweep: error: sweep file {tmp_path / 'lr.json'}" in err
    assert message in err
    assert not sweep_dir.exists()


def test_null_seeds_are_refused(tmp_path, capsys):
    path = _file(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "seeds": None}))
    assert main(["sweep", str(path), "--log-dir", str(tmp_path / "sweep")]) == 2
    assert "'seeds' must be an int >= 1, got None" in capsys.readouterr().err


def test_sweep_files_that_cannot_be_read_or_would_overwrite(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{'preset': 1}")
    assert main(["sweep", str(tmp_path / "bad.json")]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sweep.json").write_text("{}")
    assert main(["sweep", str(_file(tmp_path)), "--log-dir", str(tmp_path / "old")]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err


def test_grid_levels_cross_into_variants(tmp_path, capsys, monkeypatch):
    """Levels cross in order, the last fastest; a variant that leaves out a key its level
    sweeps keeps the base value; the default directory is runs/sweep-<title>."""
    grid = [
        SPEC["grid"][0],
        [_variant("b8"), _variant("b4", "sampler.batch_B=4", "sampler.batch_T=64")],
    ]
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(_file(tmp_path, grid=grid, title="demo"))
    assert sweep.sweep_dir == tmp_path / "runs" / "sweep-demo" and sweep.seeds == 2
    assert sweep.log_dirs == ["fast/b8", "fast/b4", "slow/b8", "slow/b4"]
    assert sweep.variants[0] == {
        "algo_kwargs": {"learning_rate": 1e-3},
        "sampler": {"batch_B": 8, "batch_T": 32},  # the cartpole preset's
    }
    config = variant_config(sweep.base_config, sweep.variants[3], seed=1)
    assert config["algo_kwargs"]["learning_rate"] == 1e-4
    assert config["algo_kwargs"]["epochs"] == 20  # the preset's, kept
    assert (config["sampler"]["batch_B"], config["sampler"]["batch_T"], config["seed"]) == (
        4,
        64,
        1,
    )
    assert (config["steps"], config["runner"]["log_interval_steps"]) == (1024, 512)
    assert main(["sweep", str(tmp_path / "lr.json"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sweep demo: 4 variants x 2 seeds = 8 runs" in out and "  slow/b4: {" in out
    assert not (tmp_path / "runs").exists()


def test_a_sweep_run_uses_its_slots_cpus():
    slot = {
        "master_cpus": [2, 3],
        "master_torch_threads": 2,
        "workers_cpus": [[2], [3]],
        "worker_torch_threads": 1,
        "cuda_idx": None,
        "alternating": False,
        "set_affinity": True,
    }
    serial = _config()
    assert run_affinity(serial, slot) == {
        "master_cpus": [2, 3],
        "master_torch_threads": 2,
        "worker_torch_threads": 1,
        "set_affinity": True,
    }
    cpu = _config(sampler={"kind": "cpu", "batch_B": 1}, torch_threads=1)
    assert run_affinity(cpu, slot)["workers_cpus"] == [[2]]  # no more workers than envs
    assert run_affinity(cpu, slot)["master_torch_threads"] == 1  # the config's own
    three = _config(sampler={"kind": "cpu", "workers": 3})
    assert run_affinity(three, slot)["workers_cpus"] == [[2], [3], [2]]


def _config(**changes):
    from rl_suite import make_config

    return make_config(**changes)


def _run(variant_dir, run_ID, steps, returns):
    run_dir = variant_dir / f"run_{run_ID}"
    run_dir.mkdir(parents=True)
    rows = ["CumSteps,ReturnAverage"] + [f"{s},{r}" for s, r in zip(steps, returns, strict=True)]
    (run_dir / "progress.csv").write_text("\n".join(rows) + "\n")
    return run_dir


@pytest.fixture
def sweep_dir(tmp_path):
    """Two variants of two seeds; in the first, the seeds logged at different steps, and a
    run failed before its first row."""
    root = tmp_path / "sweep"
    for name, lr in (("lr-a", 1e-3), ("lr-b", 1e-4)):
        (root / name).mkdir(parents=True)
        (root / name / "variant.json").write_text(json.dumps({"algo": {"lr": lr}}))
    _run(root / "lr-a", 0, [0, 100, 200], [10, 30, 50])
    _run(root / "lr-a", 1, [0, 50, 150, 250], [20, 20, 40, 60])
    (root / "lr-a" / "run_2").mkdir()  # failed: no progress.csv
    _run(root / "lr-b", 0, [0, 100, 200], [10, 10, ""])
    _run(root / "lr-b", 10, [0, 100, 200], [30, 50, 70])
    return root


def test_sweep_runs_are_grouped_by_variant_and_aligned(sweep_dir):
    groups = sweep_runs(sweep_dir)
    assert {name: [run.name for run in runs] for name, runs in groups.items()} == {
        "lr-a": ["run_0", "run_1"],
        "lr-b": ["run_0", "run_10"],
    }
    assert is_sweep(sweep_dir) and not is_sweep(sweep_dir / "lr-a" / "run_0")
    band = seed_band(groups["lr-a"])
    # Every step either seed logged, within the range both cover (0 to 200).
    np.testing.assert_array_equal(band.steps, [0, 50, 100, 150, 200])
    seed0 = np.array([10, 20, 30, 40, 50])
    seed1 = np.array([20, 20, 30, 40, 50])  # 30 at 100 and 50 at 200: interpolated
    np.testing.assert_allclose(band.mean, (seed0 + seed1) / 2)
    np.testing.assert_allclose(band.low, np.minimum(seed0, seed1))
    np.testing.assert_allclose(band.high, np.maximum(seed0, seed1))
    band = seed_band(groups["lr-b"])  # the empty cell is skipped: up to step 100
    assert band.n_runs == 2 and list(band.steps) == [0, 100] and list(band.mean) == [20, 30]


def test_plot_draws_a_sweep(sweep_dir, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "lr-a: 2 runs\nlr-b: 2 runs\n" in out
    assert (sweep_dir / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(sweep_dir), "--y", "Nope", "--out", str(sweep_dir / "x.png")]) == 2
    assert "no column 'Nope'" in capsys.readouterr().err


def test_sweep_report_lists_every_run_and_the_failed_ones_logs(sweep_dir):
    runs = [
        RunResult(sweep_dir / "lr-a", 0, 0, 0),
        RunResult(sweep_dir / "lr-a", 2, 1, 1),
        RunResult(sweep_dir / "lr-b", 10, 1, 0),
    ]
    lines = sweep_report(ExperimentsSummary(sweep_dir, tuple(runs))).splitlines()
    assert lines[1].split() == ["lr-a", "0", "200", "50.0", "ok"]
    assert lines[2].split() == ["lr-a", "2", "-", "-", "FAILED", "(exit", "code", "1)"]
    assert lines[3].split() == ["lr-b", "10", "200", "70.0", "ok"]
    stderr = Path(sweep_dir / "lr-a" / "run_2" / "stderr.log")
    assert lines[4] == f"failed: {stderr.parent} (see {stderr})"


def test_sweep_report_shows_the_steps_of_a_run_with_no_finished_episode(sweep_dir):
    run_dir = sweep_dir / "lr-b" / "run_3"
    run_dir.mkdir()
    (run_dir / "progress.csv").write_text("Iteration,CumSteps\n0,64\n1,128\n")
    report = sweep_report(ExperimentsSummary(sweep_dir, (RunResult(sweep_dir / "lr-b", 3, 0, 0),)))
    assert report.splitlines()[1].split() == ["lr-b", "3", "128", "-", "ok"]
