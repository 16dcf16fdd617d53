"""Counts as rlpyt's scripts write them (``steps=1e6``, ``--set sampler.batch_T=16.0``): an
integral float is taken as the int, and 1.5 or -1 are still refused with the message."""

import json
import tempfile
from pathlib import Path

import pytest

import rl_suite
from rl_suite._config import make_config
from rl_suite._demo import fill_samples
from rl_suite._run_affinity import config_affinity, process_count
from rl_suite._sweep import load_sweep


def built(**changes):
    return rl_suite.build(make_config("cartpole", **changes))


def sweep(**changes):
    spec = {"title": "counts", "preset": "cartpole", "steps": 1024, "seeds": 1, **changes}
    spec["grid"] = [[{"name": f"b{b}", "overrides": [f"sampler.batch_B={b}"]} for b in (4, 8)]]
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "sweep.json").write_text(json.dumps(spec))
        return load_sweep(Path(root) / "sweep.json", log_dir=Path(root) / "runs")


@pytest.mark.parametrize(
    "call, value, match",
    [
        (lambda v: built(steps=v).n_steps, 2048.0, "n_steps must be a positive integer"),
        (
            lambda v: built(sampler={"batch_T": v}).sampler.batch_spec.T,
            16.0,
            "T must be a positive integer",
        ),
        (
            lambda v: built(runner={"log_interval_steps": v}).log_interval_steps,
            1024.0,
            "log_interval_steps must be a positive integer",
        ),
        (
            lambda v: built(sampler={"eval_max_trajectories": v}).sampler.eval_max_trajectories,
            4.0,
            "eval_max_trajectories must be >= 1",
        ),
        (
            lambda v: config_affinity(make_config(torch_threads=v))["master_torch_threads"],
            2.0,
            "torch_threads must be a positive int or None",
        ),
        (
            lambda v: len(
                config_affinity(make_config(sampler={"kind": "cpu", "workers": v}))["workers_cpus"]
            ),
            4.0,
            "sampler.workers must be an int from 1 to batch_B=8",
        ),
        (
            lambda v: process_count(make_config(runner={"processes": v})),
            2.0,
            "runner.processes must be a positive int",
        ),
        (
            lambda v: fill_samples(4, 2, v, "fork").env.reward.shape[1],
            2.0,
            "n_workers must be an integer from 1 to B=2",
        ),
        (lambda v: sweep(seeds=v).seeds, 2.0, "'seeds' must be an int >= 1"),
        (lambda v: sweep(steps=v).base_config["steps"], 512.0, "'steps' must be an int >= 1"),
    ],
)
def test_counts_accept_integral_floats(call, value, match):
    count = call(value)
    assert count == value and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=match):
            call(bad)


def test_evaluate_refuses_a_bad_episode_count(tmp_path):
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match="episodes must be a positive int"):
            rl_suite.evaluate(tmp_path, episodes=bad)
