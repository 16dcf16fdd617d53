"""Counts as rlpyt's scripts write them (``replay_size=1e6``): an integral float is stored as an
int, and 1.5 or -1 are still refused with the message naming the argument."""

import numpy as np
import pytest
from replay_world import World

from rl_replay import (
    SumTree,
    UniformReplayBuffer,
    UniformSequenceReplayBuffer,
    discount_return_n_step,
)

EXAMPLE = World(B=1).example()
RNN_EXAMPLE = World(B=1, rnn=True).example()


def filled(buffer_cls, *args, **kwargs):
    world = World(B=1, rnn=buffer_cls is UniformSequenceReplayBuffer, seed=0)
    buffer = buffer_cls(world.example(), *args, **kwargs)
    buffer.append_samples(world.chunk(40))
    return buffer


def sum_tree_sample(n):
    tree = SumTree(16, 1, 1, 1)
    tree.advance(10)
    return len(tree.sample(n)[0])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda v: UniformReplayBuffer(EXAMPLE, v, 1).size, "size must be a positive integer"),
        (lambda v: UniformReplayBuffer(EXAMPLE, 80, v).B, "B must be a positive integer"),
        (
            lambda v: UniformReplayBuffer(EXAMPLE, 80, 1, n_step_return=v).n_step_return,
            "n_step_return must be a positive integer",
        ),
        (
            lambda v: UniformSequenceReplayBuffer(RNN_EXAMPLE, 80, 1, v).rnn_state_interval,
            "rnn_state_interval must be >= 0",
        ),
        (
            lambda v: UniformSequenceReplayBuffer(RNN_EXAMPLE, 80, 1, 1, batch_T=v).batch_T,
            "batch_T must be a positive integer",
        ),
        (
            lambda v: (
                filled(UniformSequenceReplayBuffer, 80, 1, 1).sample_batch(2, v).action.shape[0]
            ),
            "batch_T must be a positive integer",
        ),
        (
            lambda v: len(filled(UniformReplayBuffer, 80, 1).sample_batch(v).action),
            "batch_B must be a positive integer",
        ),
        (
            lambda v: len(filled(UniformReplayBuffer, 80, 1).sample_batches(1, v).action),
            "n_batches must be a positive integer",
        ),
        (
            lambda v: len(discount_return_n_step(np.zeros(20), np.zeros(20), v, 0.9)[0]) - 5,
            "n_step must be >= 1",
        ),
        (lambda v: SumTree(v, 2, 1, 1).T, r"T must be (an int|>= 1)"),
        (sum_tree_sample, r"n must be (an int|>= 1)"),
    ],
)
def test_counts_accept_integral_floats(call, match):
    count = call(8.0)
    assert count == 8 and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises((ValueError, TypeError), match=match):
            call(bad)
