"""Which sampler an Atari run on a GPU gets from the command line: the alternating one
instead of the preset's cpu sampler where it can run (an even number of workers, no
recurrent agent), decided on the configuration after ``--set``; a chosen one stays."""

from __future__ import annotations

import os

import pytest

from rl_suite._cli import _parser, _train_config


def sampler_of(*argv: str) -> str:
    return _train_config(_parser().parse_args(["train", *argv]))["sampler"]["kind"]


@pytest.fixture
def cores(monkeypatch):
    """Set the cores the cpu sampler's default worker count is taken from."""

    def set_cores(n: int) -> None:
        monkeypatch.setattr(os, "cpu_count", lambda: n)

    set_cores(16)
    return set_cores


PONG_ON_GPU = ("--env", "atari:pong", "--device", "cuda")


@pytest.mark.parametrize(
    "argv",
    [
        ("ppo", *PONG_ON_GPU),
        ("ppo", "--env", "atari:pong", "--set", "device=cuda"),  # (the device from --set)
        ("ppo", *PONG_ON_GPU, "--workers", "4"),
        ("dqn", *PONG_ON_GPU),
    ],
)
def test_alternating_where_it_can_run(cores, argv):
    assert sampler_of(*argv) == "alternating"


@pytest.mark.parametrize(
    "argv",
    [
        ("r2d1", *PONG_ON_GPU),  # (R2D1's agent is recurrent)
        ("ppo", *PONG_ON_GPU, "--set", "agent.recurrent=True"),
        ("ppo", *PONG_ON_GPU, "--num-envs", "5"),  # (5 workers by default)
        ("ppo", *PONG_ON_GPU, "--workers", "3"),
        ("ppo", *PONG_ON_GPU, "--set", "sampler.workers=1"),
        ("ppo", *PONG_ON_GPU, "--set", "sampler.kind=cpu"),  # (chosen)
        ("ppo", "--env", "atari:pong"),  # (on the CPU)
    ],
)
def test_the_cpu_sampler_stays_where_alternating_cannot_run_or_was_not_asked(cores, argv):
    assert sampler_of(*argv) == "cpu"


def test_the_default_worker_count_follows_the_cores(cores):
    cores(1)
    assert sampler_of("ppo", *PONG_ON_GPU) == "cpu"
    cores(3)  # (3 workers for 8 envs)
    assert sampler_of("ppo", *PONG_ON_GPU) == "cpu"
    cores(2)
    assert sampler_of("ppo", *PONG_ON_GPU) == "alternating"


def test_a_chosen_sampler_wins(cores):
    assert sampler_of("ppo", *PONG_ON_GPU, "--sampler", "gpu") == "gpu"
    assert sampler_of("r2d1", *PONG_ON_GPU, "--sampler", "alternating") == "alternating"
