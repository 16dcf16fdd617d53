"""Learning, for real: the trainer's presets reach a stated evaluation return within a step
budget.

Each case trains one run per seed in ``RL_SUITE_LEARNING_SEEDS`` (comma-separated; default
``0``, what CI runs) and passes when at least 4 of every 5 seeds reach the bar (all of them
with fewer than 5 seeds). A run's score is its best mean evaluation return over the
evaluations logged within the budget; a run ends early at the first evaluation that reaches
the bar (``runner.stop_return``). With ``RL_SUITE_LEARNING_RESULTS`` set to a file, one
JSON line per run is appended to it (the ``learning`` nox session prints them as a table).
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import rl_suite

SEEDS = [int(seed) for seed in os.environ.get("RL_SUITE_LEARNING_SEEDS", "0").split(",")]

# case: (preset, step budget, bar, extra settings)
CASES = {
    "ppo-cartpole": ("cartpole", 100_000, 475, []),
    "a2c-cartpole": ("cartpole-a2c", 500_000, 475, []),
    "recurrent-ppo-masked-cartpole": ("cartpole-masked-lstm", 300_000, 400, []),
    "gaussian-ppo-inverted-pendulum": ("inverted-pendulum", 150_000, 900, []),
    "dqn-cartpole": ("cartpole-dqn", 100_000, 475, []),
    "prioritized-dqn-cartpole": ("cartpole-dqn-prioritized", 100_000, 475, []),
    "catdqn-cartpole": ("cartpole-catdqn", 100_000, 475, []),
    "sac-pendulum": ("pendulum-sac", 20_000, -200, []),
    "td3-pendulum": ("pendulum-td3", 20_000, -200, []),
    "ddpg-pendulum": ("pendulum-ddpg", 20_000, -250, []),
}


def best_return(preset, steps, seed, log_dir, overrides=()):
    """Train ``preset`` for ``steps``; the best logged mean evaluation return."""
    config = rl_suite.make_config(preset, steps=steps, seed=seed)
    config = rl_suite.apply_overrides(config, ["runner.snapshot_mode='none'", *overrides])
    run_dir = rl_suite.train(config, log_dir)
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    returns = [float(r["ReturnAverage"]) for r in rows if int(r["CumSteps"]) <= steps]
    return max(returns), int(rows[-1]["CumSteps"])


def _record(case, seed, best, bar, steps_done):
    path = os.environ.get("RL_SUITE_LEARNING_RESULTS")
    if path:
        result = dict(case=case, seed=seed, best_return=best, bar=bar, steps=steps_done)
        with open(path, "a") as f:
            f.write(json.dumps(result) + "\n")


def required_passes(n_seeds):
    """4 of 5 (rounded up for other counts: every seed when fewer than 5)."""
    return n_seeds - n_seeds // 5


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_preset_reaches_its_return(case, tmp_path):
    preset, steps, bar, overrides = CASES[case]
    if preset == "inverted-pendulum":
        pytest.importorskip("mujoco", reason="InvertedPendulum-v5 needs gymnasium[mujoco]")
    results = {}
    overrides = [*overrides, f"runner.stop_return={bar}"]  # reached: no need to go on
    for seed in SEEDS:
        best, steps_done = best_return(preset, steps, seed, tmp_path / case, overrides)
        _record(case, seed, best, bar, steps_done)
        results[seed] = best
    passes = sum(best >= bar for best in results.values())
    assert passes >= required_passes(len(SEEDS)), f"best returns by seed: {results}, bar {bar}"


@pytest.mark.slow
def test_masked_cartpole_needs_memory(tmp_path):
    """The recurrent preset's task, with a feed-forward agent: it must stay far below the
    bar, or the recurrent result would not show memory at work."""
    preset, steps, bar, overrides = CASES["recurrent-ppo-masked-cartpole"]
    best, steps_done = best_return(
        preset, steps, SEEDS[0], tmp_path, [*overrides, "agent.recurrent=False"]
    )
    _record("feed-forward-ppo-masked-cartpole (must fail)", SEEDS[0], best, bar, steps_done)
    assert best < bar / 2


@pytest.mark.slow
def test_atari_with_the_serial_sampler_checkpoints_and_resumes_exactly(tmp_path):
    """PPO on Pong in one process (the serial sampler): each snapshot keeps the emulators'
    states (the first one used to fail, pickling the ALE), and a run resumed from the first
    snapshot ends as the uninterrupted one, row for row and weight for weight."""
    command = [
        sys.executable, "-m", "rl_suite", "train", "ppo", "--preset", "atari",
        "--env", "atari:pong", "--sampler", "serial", "--steps", "4096", "--seed", "3",
        "--set", "runner.log_interval_steps=2048", "--set", "runner.snapshot_mode='all'",
        "--set", "sampler.max_decorrelation_steps=100", "--set", "runner.evaluate=False",
        "--set", "torch_threads=1",
    ]  # fmt: skip
    whole = tmp_path / "whole"
    subprocess.run([*command, "--log-dir", str(whole)], check=True, timeout=900)
    (run_dir,) = whole.iterdir()
    snapshots = sorted(run_dir.glob("itr_*.pt"), key=lambda p: int(p.stem[4:]))
    assert len(snapshots) == 2
    first = snapshots[0]
    resumed = tmp_path / "resumed" / run_dir.name
    shutil.copytree(run_dir, resumed)  # then cut back to the first snapshot
    for later in snapshots[1:]:
        (resumed / later.name).unlink()
        for companion in resumed.glob(f"{later.stem}_*"):
            companion.unlink()
    state_file = rl_suite.load_checkpoint(first)["sampler_file"]
    with np.load(run_dir / state_file) as state:  # the emulator's state, as bytes
        assert any(state[k].dtype == np.uint8 and state[k].size > 1000 for k in state.files)
    subprocess.run(
        [sys.executable, "-m", "rl_suite", "resume", str(resumed / first.name)],
        check=True,
        timeout=900,
    )
    final = snapshots[-1].name
    a = rl_suite.load_checkpoint(run_dir / final)["agent_state_dict"]
    b = rl_suite.load_checkpoint(resumed / final)["agent_state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _rows_without_times(run_dir) == _rows_without_times(resumed)


def _rows_without_times(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    timed = ("Time", "PerSecond")
    return [{k: v for k, v in r.items() if not any(t in k for t in timed)} for r in rows]
