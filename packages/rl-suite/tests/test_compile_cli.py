"""``--compile``, the alternating sampler and the ``atari-fast`` preset on the command line."""

from __future__ import annotations

import json

import pytest
import torch

from rl_runners import logger_context
from rl_suite._cli import _parser, _train_config, main
from rl_suite._config import PRESET_ABOUT, PRESETS
from rl_suite._trainer import build

FAST = '{"backend": "aot_eager"}'  # (inductor takes a minute to compile on a small CPU)
pytestmark = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 11),
    reason="compile needs torch 2.11",  # (rl_algos refuses it before, naming the version)
)


def config_of(*argv: str) -> dict:
    return _train_config(_parser().parse_args(["train", *argv]))


def test_compile_flag_sets_the_algorithm_option(capsys):
    assert config_of("sac", "--compile")["algo_kwargs"]["compile"] is True
    assert "compile" not in config_of("sac")["algo_kwargs"]
    assert main(["train", "ppo", "--compile", "--steps", "400", "--dry-run"]) == 0
    assert '"compile": true' in capsys.readouterr().out


def test_atari_fast_is_listed_with_its_expected_time(capsys):
    assert PRESETS["atari-fast"]["algo_kwargs"]["compile"] is True
    assert PRESETS["atari-fast"]["sampler"]["kind"] == "alternating"
    assert "score of 20" in PRESET_ABOUT["atari-fast"]
    assert main(["list"]) == 0
    assert "atari-fast" in capsys.readouterr().out


ALTERNATING = ("--sampler", "alternating", "--workers", "2")


@pytest.mark.parametrize(
    "algo, sampler",
    [("ppo", ALTERNATING), ("dqn", ALTERNATING), ("sac", ())],
)
def test_a_compiled_run_trains_with_the_real_agents(tmp_path, algo, sampler):
    config = config_of(
        algo,
        *sampler,
        "--steps",
        "1024" if sampler else "400",
        "--seed",
        "1",
        "--set",
        f"algo_kwargs.compile={FAST}",
        "--set",
        "runner.evaluate=False",
        *(["--set", "algo_kwargs.min_steps_learn=300"] if algo != "ppo" else []),
    )
    runner = build(config)
    assert bool(sampler) == (type(runner.sampler).__name__ == "AlternatingSampler")
    assert runner.algo.compile == json.loads(FAST)
    with logger_context(tmp_path, 1, algo):
        runner.train()
    assert runner.algo.update_counter > 0


def test_a_run_shorter_than_the_log_interval_stops_at_its_steps():
    """The runner trains whole log intervals: the interval shrinks to a shorter run."""
    config = config_of("dqn", "--env", "atari:pong", "--steps", "3000")
    assert config["runner"]["log_interval_steps"] == 3000
    assert config_of("dqn", "--env", "atari:pong")["runner"]["log_interval_steps"] == 1_000_000


def test_ale_envs_get_the_batched_atari_preset(capsys):
    assert main(["train", "ppo", "--env", "ale:pong", "--steps", "2048", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "preset: atari-batched" in out and "would log to" in out


def test_batched_sampler_on_an_atari_id_points_to_ale(capsys):
    argv = ["train", "ppo", "--env", "atari:pong", "--sampler", "batched", "--dry-run"]
    assert main(argv) == 2
    assert "write ale:pong" in capsys.readouterr().err
