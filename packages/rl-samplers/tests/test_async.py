"""The asynchronous samplers: each in a process of its own, double-buffered, with the
parameters refreshed from the training process before each batch; the batches they write
are the serial sampler's."""

import multiprocessing as mp

import pytest
from sampler_toys import CountingEnv, EchoAgent, assert_same, run_async_sampler

from rl_arrays import torchify_buffer
from rl_samplers import (
    AsyncAlternatingSampler,
    AsyncCpuSampler,
    AsyncGpuSampler,
    AsyncNoOverlapAlternatingSampler,
    AsyncSerialSampler,
    CpuResetCollector,
    CpuWaitResetCollector,
    DbCpuResetCollector,
    DbCpuWaitResetCollector,
    DbGpuResetCollector,
    DbGpuWaitResetCollector,
    GpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    SerialSampler,
)

CONFIG = dict(batch_T=6, batch_B=4, max_decorrelation_steps=5)
PARALLEL = [AsyncCpuSampler, AsyncGpuSampler, AsyncAlternatingSampler]


class SamplerProcess:
    """The sampler's process and the semaphores of its double buffer."""

    def __init__(self, sampler, start_method, n_itr, lock_step, seed=3):
        self.agent = EchoAgent()
        self.double_buffer, _ = sampler.async_initialize(
            self.agent, bootstrap_value=True, seed=seed
        )
        ctx = mp.get_context(start_method)
        self.ready = [ctx.Semaphore(0) for _ in range(2)]
        # Lock step: the test says when each batch may start; otherwise both halves are free.
        self.copied = [ctx.Semaphore(0 if lock_step else 1) for _ in range(2)]
        self.infos = ctx.Queue()
        args = (sampler, n_itr, self.ready, self.copied, self.infos)
        # Not a daemon: a daemon process may not start the sampler's workers.
        self.process = ctx.Process(target=run_async_sampler, args=args)
        self.process.start()

    def batch(self, db_idx):
        assert self.ready[db_idx].acquire(timeout=60), "the sampler's process did not answer"
        return torchify_buffer(self.double_buffer[db_idx]), self.infos.get(timeout=10)

    def finish(self):
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.terminate()
        assert self.process.exitcode == 0


def _sampler(sampler_cls, start_method=None):
    kwargs = {} if sampler_cls is AsyncSerialSampler else {"start_method": start_method}
    return sampler_cls(CountingEnv, {}, **CONFIG, **kwargs)


@pytest.mark.parametrize(
    "sampler_cls, start_method",
    [
        (AsyncSerialSampler, "fork"),
        *[(cls, "fork") for cls in [*PARALLEL, AsyncNoOverlapAlternatingSampler]],
        (AsyncSerialSampler, "spawn"),
        (AsyncCpuSampler, "spawn"),
        (AsyncGpuSampler, "forkserver"),
    ],
)
def test_double_buffered_batches_equal_serial_batches(sampler_cls, start_method):
    serial = SerialSampler(CountingEnv, {}, **CONFIG)
    serial.initialize(EchoAgent(), seed=3, bootstrap_value=True)
    run = SamplerProcess(_sampler(sampler_cls, start_method), start_method, 4, lock_step=False)
    try:
        for itr in range(4):
            samples, infos = run.batch(itr % 2)  # (the other half may be being written)
            expected, expected_infos = serial.obtain_samples(itr)
            assert_same(expected, samples)
            assert sorted(infos) == sorted((i.Length, i.Return) for i in expected_infos)
            run.copied[itr % 2].release()
    finally:
        run.finish()
    assert not mp.active_children()


@pytest.mark.parametrize(
    "sampler_cls, db_collector, sync_cls, collector",
    [
        (AsyncSerialSampler, DbCpuResetCollector, SerialSampler, CpuResetCollector),
        (AsyncCpuSampler, DbCpuWaitResetCollector, SerialSampler, CpuWaitResetCollector),
        (AsyncGpuSampler, DbGpuResetCollector, GpuSampler, GpuResetCollector),
        (AsyncGpuSampler, DbGpuWaitResetCollector, GpuSampler, GpuWaitResetCollector),
    ],
)
def test_rlpyt_double_buffer_collectors(sampler_cls, db_collector, sync_cls, collector):
    """rlpyt's scripts name a double-buffer collector (rlpyt.samplers.async_.collectors); both
    halves then hold the batches of the synchronous sampler with the matching collector."""
    with sync_cls(CountingEnv, {}, **CONFIG, CollectorCls=collector) as sync:
        sync.initialize(EchoAgent(), seed=3, bootstrap_value=True)
        sampler = sampler_cls(CountingEnv, {}, **CONFIG, CollectorCls=db_collector)
        run = SamplerProcess(sampler, "fork", 2, lock_step=False)
        try:
            for itr in range(2):
                samples, _ = run.batch(itr)
                assert_same(sync.obtain_samples(itr)[0], samples)
                run.copied[itr].release()
        finally:
            run.finish()


@pytest.mark.parametrize("sampler_cls", [AsyncSerialSampler, *PARALLEL])
def test_each_batch_uses_the_latest_trained_parameters(sampler_cls):
    serial_agent = EchoAgent()
    serial = SerialSampler(CountingEnv, {}, **CONFIG)
    serial.initialize(serial_agent, seed=3, bootstrap_value=True)
    run = SamplerProcess(_sampler(sampler_cls, "fork"), "fork", 3, lock_step=True)
    try:
        for itr in range(3):
            run.agent.weight += 1  # "training" in this process, on the shared model
            serial_agent.weight += 1
            run.copied[itr % 2].release()
            samples, _ = run.batch(itr % 2)
            assert_same(serial.obtain_samples(itr)[0], samples)
    finally:
        run.finish()


def test_misuse_is_refused():
    sampler = AsyncCpuSampler(CountingEnv, {}, **CONFIG)
    with pytest.raises(RuntimeError, match="after async_initialize"):
        sampler.initialize()
    sampler.async_initialize(EchoAgent(), seed=0)
    with pytest.raises(ValueError, match="db_idx must be 0 or 1"):
        sampler.obtain_samples(0, db_idx=2)


@pytest.mark.parametrize("sampler_cls", [AsyncSerialSampler, *PARALLEL])
def test_evaluation_in_the_sampler_process(sampler_cls):
    """(Both stages may also run in one process.)"""
    sampler = sampler_cls(
        CountingEnv,
        {"max_len": 3},
        eval_n_envs=2,
        eval_max_steps=100,
        eval_max_trajectories=5,
        **CONFIG,
    )
    agent = EchoAgent()
    sampler.async_initialize(agent, seed=0)
    sampler.initialize({"master_torch_threads": 1})
    with sampler:
        agent.shared_weight += 1  # (one process: the trained weight is the agent's shared one)
        infos = sampler.evaluate_agent(0)
        assert len(infos) == 5 and all(info.Length <= 3 for info in infos)
        assert sampler.agent.weight.item() == 1  # refreshed before evaluating
        assert isinstance(sampler.obtain_samples(1, db_idx=1), list)
    assert not mp.active_children()
