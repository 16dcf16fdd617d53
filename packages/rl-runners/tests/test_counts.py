"""Counts as rlpyt's scripts write them (``n_steps=50e6``, ``log_interval_steps=1e5``): an
integral float is stored as an int, and 1.5 or -1 are still refused with the message."""

import tempfile

import pytest
from rl_runners_toys import make, make_async

from rl_runners import AsyncRl, MinibatchRl, ProgBarCounter, logger, logger_context


def minibatch(**kwargs):
    algo, agent, sampler = make()
    return MinibatchRl(algo, agent, sampler, **{"n_steps": 64, **kwargs})


def snapshot_gap(gap):
    with (
        tempfile.TemporaryDirectory() as log_dir,
        logger_context(log_dir, 0, "n", snapshot_mode="gap", snapshot_gap=gap),
    ):
        return logger.get_snapshot_gap()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda v: minibatch(n_steps=v).n_steps, "n_steps must be a positive integer"),
        (
            lambda v: minibatch(log_interval_steps=v).log_interval_steps,
            "log_interval_steps must be a positive integer",
        ),
        (
            lambda v: minibatch(log_traj_window=v).log_traj_window,
            "log_traj_window must be a positive integer",
        ),
        (
            lambda v: AsyncRl(*make_async(), n_steps=64, max_sampler_lead=v).max_sampler_lead,
            "max_sampler_lead must be a positive integer",
        ),
        (snapshot_gap, "snapshot_gap must be an int >= 1"),
        (lambda v: ProgBarCounter(v).total_count, "total_count must be >= 1"),
    ],
)
def test_counts_accept_integral_floats(call, match):
    count = call(8.0)
    assert count == 8 and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=match):
            call(bad)
