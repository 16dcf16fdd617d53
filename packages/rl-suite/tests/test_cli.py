import numpy as np
import pytest

import rl_arrays
import rl_replay
import rl_samplers
import rl_suite
from rl_suite._cli import main
from rl_suite._demo import GOAL, fill_samples


def test_reexports_every_implemented_package():
    packages = set().union(*(p.__all__ for p in rl_suite.PACKAGES))
    assert packages | set(rl_suite.TRAINER) == set(rl_suite.__all__)
    assert not packages & set(rl_suite.TRAINER)
    for package in rl_suite.PACKAGES:  # a name exported twice is one and the same object
        for name in package.__all__:
            assert getattr(rl_suite, name) is getattr(package, name), name
    assert rl_suite.namedarraytuple is rl_arrays.namedarraytuple
    assert rl_suite.SumTree is rl_replay.SumTree and rl_suite.AtariEnv is rl_samplers.AtariEnv
    assert rl_suite.PPO.__module__.startswith("rl_algos")


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_workers_fill_their_columns_of_the_shared_batch(start_method):
    samples = fill_samples(T=40, B=5, n_workers=2, start_method=start_method)
    action, prev_action = samples.agent.action, samples.agent.prev_action
    np.testing.assert_array_equal(prev_action[1:], action[:-1])  # each env's steps chain
    np.testing.assert_array_equal(samples.env.prev_reward[1:], samples.env.reward[:-1])
    assert samples.env.done.any()
    assert np.abs(samples.env.observation).max() < GOAL
    moves = np.diff(samples.env.observation[..., 0], axis=0)[~samples.env.done[:-1]]
    assert set(np.unique(moves)) <= {-1.0, 1.0}


def test_demo_command_prints_a_summary(capsys):
    assert main(["demo", "-T", "16", "-B", "4", "--workers", "2", "--start-method", "fork"]) == 0
    out = capsys.readouterr().out
    assert "Samples[T=16, B=4] (64 steps)" in out and "without a copy: True" in out


def test_demo_command_refuses_bad_input(capsys):
    assert main(["demo", "-B", "2", "--workers", "3"]) == 2
    assert "n_workers must be an integer from 1 to B=2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "-T", "0"])
    assert "must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("algo, preset", [("sac", "pendulum-sac"), ("dqn", "cartpole-dqn")])
def test_train_without_env_uses_one_the_algorithm_can_act_in(capsys, algo, preset):
    assert main(["train", algo, "--steps", "400", "--dry-run"]) == 0
    assert f"preset: {preset}" in capsys.readouterr().out
