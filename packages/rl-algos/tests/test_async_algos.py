"""The replay algorithms in asynchronous mode (agents and batches from the other test modules):
``async_initialize`` builds the shared-memory form of the replay buffer ``initialize`` would
build and no optimizer; ``optim_initialize`` follows in the optimizer's process;
``optimize_agent(samples=None)`` trains from the replay alone, learning from sampler iteration
``min_itr_learn``, reading under the buffer's lock; ``samples_to_buffer`` fills the buffer
from another process, as the runner's memory copier does."""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp

import numpy as np
import pytest
import torch
from test_cat_dqn import CatAgent
from test_dqn import QAgent, indexed_samples
from test_dqn import examples as q_examples
from test_qpg_algos import FakeDdpgAgent, FakeSacAgent, random_samples
from test_qpg_algos import examples as qpg_examples
from test_r2d1 import R2d1Agent, rollout, small_r2d1
from test_r2d1 import examples as r2d1_examples

from rl_algos import DDPG, DQN, SAC, TD3, CategoricalDQN
from rl_arrays import BatchSpec
from rl_replay import AsyncUniformReplayBuffer, RWLock, UniformReplayBuffer

REPLAY = dict(batch_size=8, min_steps_learn=16, replay_size=256)


def _q_agent():
    return QAgent(torch.nn.Linear(2, 2))


def _r2d1_samples(agent, seed):
    return rollout(agent, 4, 2, seed=seed)[0]


# name: (algorithm, agent, examples, one [T=4, B=2] batch from (agent, seed)); every
# algorithm takes 2 updates per batch (replay_ratio 2 of 8-sample batches, updates_per_sync 2).
CASES = {
    "dqn": (
        lambda: DQN(replay_ratio=2, updates_per_sync=2, **REPLAY),
        _q_agent,
        q_examples,
        lambda agent, seed: indexed_samples(4, 2, 2, seed=seed),
    ),
    "dqn-prioritized-timelimit": (
        lambda: DQN(
            replay_ratio=2,
            updates_per_sync=2,
            prioritized_replay=True,
            bootstrap_timelimit=True,
            **REPLAY,
        ),
        _q_agent,
        q_examples,
        lambda agent, seed: indexed_samples(4, 2, 2, seed=seed),
    ),
    "catdqn": (
        lambda: CategoricalDQN(V_min=-2, V_max=2, replay_ratio=2, updates_per_sync=2, **REPLAY),
        lambda: CatAgent(torch.nn.Linear(2, 2 * 5), 2, 5),
        q_examples,
        lambda agent, seed: indexed_samples(4, 2, 2, seed=seed),
    ),
    "r2d1": (  # prioritized sequences with input priorities; batches of (2 + 2) * 4 samples
        lambda: small_r2d1(replay_ratio=4, updates_per_sync=2),
        R2d1Agent,
        r2d1_examples,
        _r2d1_samples,
    ),
    "ddpg": (
        lambda: DDPG(replay_ratio=2, updates_per_sync=2, **REPLAY),
        FakeDdpgAgent,
        qpg_examples,
        lambda agent, seed: random_samples(4, 2, seed=seed),
    ),
    "td3": (
        lambda: TD3(replay_ratio=2, updates_per_sync=2, **REPLAY),
        lambda: FakeDdpgAgent(twin=True, target_noise=torch.tensor([0.1, -0.2])),
        qpg_examples,
        lambda agent, seed: random_samples(4, 2, seed=seed),
    ),
    "sac": (
        lambda: SAC(replay_ratio=2, updates_per_sync=2, **REPLAY),
        FakeSacAgent,
        qpg_examples,
        lambda agent, seed: random_samples(4, 2, seed=seed),
    ),
}
SPEC = BatchSpec(4, 2)


def _weights(agent):
    """Every tensor of a fake agent (models and targets)."""
    if hasattr(agent, "state_dict"):
        return [t for module in agent.state_dict().values() for t in module.values()]
    return [*agent.model.state_dict().values(), *agent.target_model.state_dict().values()]


def make(case, mode):
    """(algo, agent, batch maker) initialized in ``mode`` ("sync" or "async", the latter
    with its optimizer built), from the same seed each time."""
    make_algo, make_agent, examples, batch = CASES[case]
    torch.manual_seed(0)
    algo, agent = make_algo(), make_agent()
    if mode == "sync":
        algo.initialize(agent, n_itr=10, batch_spec=SPEC, examples=examples())
    else:
        algo.async_initialize(agent, 10, SPEC, mid_batch_reset=True, examples=examples())
        algo.optim_initialize(rank=0)
    return algo, agent, batch


@pytest.mark.parametrize("case", list(CASES))
def test_async_initialize_gives_the_shared_form_of_the_replay_and_no_optimizer(case):
    sync, _, _ = make(case, "sync")
    make_algo, make_agent, examples, _ = CASES[case]
    algo = make_algo()
    buffer = algo.async_initialize(make_agent(), 10, SPEC, True, examples())
    assert buffer is algo.replay_buffer
    # The synchronous run's buffer class, asked for its shared-memory form by the option.
    assert type(buffer) is type(sync.replay_buffer)
    assert buffer.shared_memory and not sync.replay_buffer.shared_memory
    assert isinstance(buffer.rw_lock, RWLock) and sync.replay_buffer.rw_lock is None
    assert (algo.min_itr_learn, algo.sampler_bs) == (sync.min_itr_learn, sync.sampler_bs)
    assert algo.updates_per_optimize == algo.updates_per_sync == 2
    with pytest.raises(RuntimeError, match="optim_initialize"):
        algo.optimize_agent(0, sampler_itr=algo.min_itr_learn)
    with pytest.raises(RuntimeError, match="optim_initialize"):
        algo.optim_state_dict()


@pytest.mark.parametrize("case", list(CASES))
def test_training_from_the_replay_alone_equals_training_with_the_samples(case):
    """The same batches, appended as the memory copier would, give the same updates."""
    sync, sync_agent, batch = make(case, "sync")
    algo, agent, _ = make(case, "async")
    assert sync.updates_per_optimize == algo.updates_per_optimize == 2
    for itr in range(4):
        samples = batch(sync_agent, itr)
        expected = sync.optimize_agent(itr, samples)
        algo.replay_buffer.append_samples(algo.samples_to_buffer(samples))
        opt_info = algo.optimize_agent(100 + itr, sampler_itr=itr)  # (itr: the optimizer's)
        assert opt_info == expected
    assert algo.update_counter == sync.update_counter == 2 * (4 - sync.min_itr_learn)
    for got, expected in zip(_weights(agent), _weights(sync_agent), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_learning_starts_at_min_itr_learn_counted_in_sampler_iterations():
    algo, agent, batch = make("dqn", "async")
    assert algo.min_itr_learn == 2  # 16 steps of 8 per iteration
    assert agent.epsilon_itr_min_max == (2, 1e6 // 8)  # the schedule, in sampler iterations
    for itr in range(3):
        algo.replay_buffer.append_samples(algo.samples_to_buffer(batch(agent, itr)))
    assert all(not v for v in algo.optimize_agent(50, sampler_itr=1))
    assert [len(v) for v in algo.optimize_agent(0, sampler_itr=2)] == [2, 2, 2]
    assert algo.update_counter == 2


class RecordingLock:
    """Stands in for a buffer's RWLock and records which side each access took."""

    def __init__(self):
        self.taken = []

    @contextlib.contextmanager
    def read_lock(self):
        self.taken.append("read")
        yield

    @contextlib.contextmanager
    def write_lock(self):
        self.taken.append("write")
        yield


def test_replay_reads_and_priority_updates_hold_the_buffer_lock():
    algo, agent, batch = make("dqn-prioritized-timelimit", "async")
    for itr in range(3):
        algo.replay_buffer.append_samples(algo.samples_to_buffer(batch(agent, itr)))
    algo.replay_buffer.rw_lock = lock = RecordingLock()
    algo.optimize_agent(0, sampler_itr=2)
    assert lock.taken == ["read", "write"] * 2  # sample a batch, update its priorities


def _copy_batches(samples_to_buffer, replay_buffer, batches):
    """The memory copier's work, in a child process."""
    for samples in batches:
        replay_buffer.append_samples(samples_to_buffer(samples))


@pytest.mark.parametrize(
    "case, method",
    [
        ("dqn-prioritized-timelimit", "fork"),
        ("r2d1", "fork"),
        ("dqn-prioritized-timelimit", "spawn"),
    ],
)
def test_a_copier_process_fills_the_replay_the_optimizer_trains_from(case, method):
    sync, sync_agent, batch = make(case, "sync")
    algo, _, _ = make(case, "async")
    batches = [batch(sync_agent, itr) for itr in range(4)]
    # (this module by its plain name, so that spawn's child can import the target)
    target = importlib.import_module("test_async_algos")._copy_batches
    ctx = mp.get_context(method)
    process = ctx.Process(target=target, args=(algo.samples_to_buffer, algo.replay_buffer, batches))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    for samples in batches:
        sync.replay_buffer.append_samples(sync.samples_to_buffer(samples))
    for name, value in sync.replay_buffer.state_dict().items():
        np.testing.assert_array_equal(algo.replay_buffer.state_dict()[name], value, err_msg=name)
    opt_info = algo.optimize_agent(0, sampler_itr=3)
    assert len(opt_info.loss) == 2 and algo.update_counter == 2


def test_misuse_gives_clear_errors():
    with pytest.raises(RuntimeError, match="initialize"):
        DQN().optimize_agent(0)
    with pytest.raises(RuntimeError, match="initialize"):
        DQN().optim_initialize()
    sync, _, _ = make("dqn", "sync")
    with pytest.raises(ValueError, match="async_initialize"):
        sync.optimize_agent(5)  # no samples, and no shared replay to train from
    with pytest.raises(ValueError, match="Async"):
        DQN(ReplayBufferCls=UniformReplayBuffer, **REPLAY).async_initialize(
            _q_agent(), 10, SPEC, True, q_examples()
        )
    algo = DQN(ReplayBufferCls=AsyncUniformReplayBuffer, **REPLAY)
    assert isinstance(
        algo.async_initialize(_q_agent(), 10, SPEC, True, q_examples()), AsyncUniformReplayBuffer
    )
    with pytest.raises(ValueError, match="sampler_n_itr"):
        DQN(**REPLAY).async_initialize(_q_agent(), 0, SPEC, True, q_examples())
