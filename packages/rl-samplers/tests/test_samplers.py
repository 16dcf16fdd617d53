"""Samplers and collectors with a toy env and agent: same data serially and in parallel,
episode boundaries, evaluation limits, and failing workers."""

import multiprocessing as mp
import time

import numpy as np
import pytest
import torch
from sampler_toys import CountingEnv, EchoAgent, RankAgent, assert_same

from rl_samplers import (
    AlternatingSampler,
    CpuSampler,
    CpuWaitResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    NoOverlapAlternatingSampler,
    SerialSampler,
)

PARALLEL = [CpuSampler, GpuSampler, AlternatingSampler, NoOverlapAlternatingSampler]

CONFIG = dict(batch_T=6, batch_B=4, max_decorrelation_steps=5)


@pytest.fixture(params=["fork", "forkserver", "spawn"])
def start_method(request):
    if request.param not in mp.get_all_start_methods():
        pytest.skip(f"no {request.param} here")
    return request.param


@pytest.mark.parametrize("parallel_cls", PARALLEL)
def test_parallel_batches_equal_serial_batches(start_method, parallel_cls):
    serial = SerialSampler(CountingEnv, {}, **CONFIG)
    discount = {"discount": 0.5}  # (reaches the workers whatever their start method)
    serial.initialize(EchoAgent(), seed=3, bootstrap_value=True, traj_info_kwargs=discount)
    with parallel_cls(CountingEnv, {}, start_method=start_method, **CONFIG) as parallel:
        parallel.initialize(EchoAgent(), seed=3, bootstrap_value=True, traj_info_kwargs=discount)
        for itr in range(3):
            (a, infos_a), (b, infos_b) = serial.obtain_samples(itr), parallel.obtain_samples(itr)
            assert_same(a, b)
            key = lambda info: (info.Length, info.Return, info.DiscountedReturn)  # noqa: E731
            assert sorted(map(key, infos_a)) == sorted(map(key, infos_b))
            assert any(info.DiscountedReturn != info.Return for info in infos_b)
    assert not mp.active_children()


def test_each_worker_tells_its_agent_copy_which_environments_it_steps():
    """``collector_initialize(global_B, env_ranks)`` in every worker: the agent acting for
    environments 2 and 3 (rank 1 of world size 2, so 6 and 7 of 8) knows it."""
    with CpuSampler(CountingEnv, {}, batch_T=3, batch_B=4, max_decorrelation_steps=0) as sampler:
        sampler.initialize(
            RankAgent(), seed=0, affinity={"workers_cpus": [0, 0]}, rank=1, world_size=2
        )
        samples, _ = sampler.obtain_samples(0)
    ranks = samples.agent.agent_info.value
    assert ranks.tolist() == [[4.0, 5.0, 6.0, 7.0]] * 3


def test_reset_collector_marks_episode_boundaries():
    sampler = SerialSampler(
        CountingEnv, {"n_actions": 4}, batch_T=30, batch_B=2, max_decorrelation_steps=0
    )
    agent = EchoAgent()
    sampler.initialize(agent, seed=0)
    samples, infos = sampler.obtain_samples(0)
    obs, done = samples.env.observation.numpy(), samples.env.done.numpy()
    action, prev_action = samples.agent.action.numpy(), samples.agent.prev_action.numpy()
    reward, prev_reward = samples.env.reward.numpy(), samples.env.prev_reward.numpy()
    for b in range(2):
        for t in range(1, 30):
            if done[t - 1, b]:  # a fresh episode: time 0, null previous action and reward
                assert obs[t, b, 0] == 0 and prev_action[t, b] == 0 and prev_reward[t, b] == 0
            else:
                assert obs[t, b, 0] == obs[t - 1, b, 0] + 1
                assert (
                    prev_action[t, b] == action[t - 1, b] and prev_reward[t, b] == reward[t - 1, b]
                )
    assert len(infos) == done.sum() and agent.resets.count(0) == done[:, 0].sum()
    assert sum(info.Length for info in infos) <= 60


def test_wait_reset_collector_waits_for_the_batch_end():
    sampler = SerialSampler(
        CountingEnv,
        {"horizon": 4},  # (some episodes end in a time-out)
        batch_T=12,
        batch_B=3,
        CollectorCls=CpuWaitResetCollector,
        max_decorrelation_steps=0,
    )
    sampler.initialize(EchoAgent(), seed=1)
    timeouts = 0
    for itr in range(12):
        samples, _ = sampler.obtain_samples(itr)
        done = samples.env.done.numpy()
        for b in range(3):
            first = np.flatnonzero(done[:, b])
            if len(first):  # once done, done for the rest of the batch, and no new episode
                assert done[first[0] :, b].all()
                assert (samples.env.reward[first[0] + 1 :, b] == 0).all()
                assert not samples.env.env_info.timeout[first[0] + 1 :, b].any()  # none stale
        timeouts += int(samples.env.env_info.timeout.sum())
    assert timeouts > 0
    restarted = np.flatnonzero(done[-1])
    samples, _ = sampler.obtain_samples(12)
    assert (samples.env.observation[0, restarted, 0] == 0).all()  # reset before the next batch


@pytest.mark.parametrize("parallel_cls", [GpuSampler, AlternatingSampler])
def test_gpu_wait_reset_collector_matches_the_cpu_one(parallel_cls):
    config = dict(batch_T=12, batch_B=4, max_decorrelation_steps=3)
    serial = SerialSampler(CountingEnv, {}, CollectorCls=CpuWaitResetCollector, **config)
    serial.initialize(EchoAgent(), seed=4)
    with parallel_cls(CountingEnv, {}, CollectorCls=GpuWaitResetCollector, **config) as parallel:
        parallel.initialize(EchoAgent(), seed=4)
        for itr in range(3):
            (a, _), (b, _) = serial.obtain_samples(itr), parallel.obtain_samples(itr)
            assert a.env.done[-1].any()  # (some env did wait)
            assert_same(a, b)


def test_bootstrap_value_is_the_value_after_the_last_step():
    sampler = SerialSampler(CountingEnv, {}, **CONFIG)
    sampler.initialize(EchoAgent(), seed=2, bootstrap_value=True)
    samples, _ = sampler.obtain_samples(0)
    after = np.where(samples.env.done[-1], 0, samples.env.observation[-1, :, 0] + 1)
    np.testing.assert_array_equal(samples.agent.bootstrap_value.numpy(), after)


def test_seeds_make_runs_reproducible_and_distinct():
    def batch(seed):
        sampler = SerialSampler(CountingEnv, {}, **CONFIG)
        sampler.initialize(EchoAgent(), seed=seed)
        return sampler.obtain_samples(0)[0].env.observation.clone()

    assert torch.equal(batch(5), batch(5)) and not torch.equal(batch(5), batch(6))


@pytest.mark.parametrize("sampler_cls", [SerialSampler, *PARALLEL])
def test_evaluation_respects_its_limits(sampler_cls):
    sampler = sampler_cls(
        CountingEnv,
        {"max_len": 3},
        eval_n_envs=2,
        eval_max_steps=100,
        eval_max_trajectories=5,
        **CONFIG,
    )
    sampler.initialize(EchoAgent(), seed=0)
    infos = sampler.evaluate_agent(0)
    assert len(infos) == 5 and all(info.Length <= 3 for info in infos)
    long_episodes = sampler_cls(
        CountingEnv, {"max_len": 50}, eval_n_envs=2, eval_max_steps=10, **CONFIG
    )
    long_episodes.initialize(EchoAgent(), seed=0)  # 5 steps per env: no episode can finish
    assert long_episodes.evaluate_agent(0) == []
    if sampler_cls is not SerialSampler:  # training goes on after evaluating, in step
        serial = SerialSampler(CountingEnv, {"max_len": 3}, **CONFIG)
        serial.initialize(EchoAgent(), seed=0)
        assert_same(serial.obtain_samples(0)[0], sampler.obtain_samples(0)[0])
    sampler.shutdown()
    long_episodes.shutdown()


def test_uneven_evaluation_split():
    """More workers than evaluation envs: the idle worker just reports back."""
    with GpuSampler(CountingEnv, {}, eval_n_envs=1, eval_max_steps=20, **CONFIG) as sampler:
        sampler.initialize(EchoAgent(), seed=0, affinity={"workers_cpus": [0, 1]})
        assert len(sampler.evaluate_agent(0)) >= 1
    with CpuSampler(CountingEnv, {}, eval_n_envs=1, eval_max_steps=20, **CONFIG) as sampler:
        sampler.initialize(EchoAgent(), seed=0, affinity={"workers_cpus": [0, 1]})
        assert len(sampler.evaluate_agent(0)) >= 1


@pytest.mark.parametrize("parallel_cls", PARALLEL)
def test_a_failing_worker_raises_in_the_parent_quickly(start_method, parallel_cls):
    sampler = parallel_cls(CountingEnv, {"crash_at": 20}, start_method=start_method, **CONFIG)
    sampler.initialize(EchoAgent(), seed=0)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="crashed on purpose"):
        for itr in range(20):
            sampler.obtain_samples(itr)
    assert time.monotonic() - began < 15
    assert not sampler.workers and not mp.active_children()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="T must be a positive integer"):
        SerialSampler(CountingEnv, {}, batch_T=0, batch_B=2)
    with pytest.raises(ValueError, match="eval_max_steps"):
        SerialSampler(CountingEnv, {}, batch_T=2, batch_B=2, eval_n_envs=2)
    with pytest.raises(ValueError, match="start_method"):
        CpuSampler(CountingEnv, {}, batch_T=2, batch_B=2, start_method="teleport")
    with pytest.raises(ValueError, match="3 workers cannot share 2"):
        CpuSampler(CountingEnv, {}, batch_T=2, batch_B=2).initialize(
            EchoAgent(), affinity={"workers_cpus": [0, 1, 0]}
        )


def test_workers_die_with_a_killed_main_process(tmp_path):
    """Even a main process killed without any cleanup leaves no worker behind."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "main.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from sampler_toys import CountingEnv, EchoAgent\n"
        "from rl_samplers import CpuSampler\n"
        "if __name__ == '__main__':\n"
        "    s = CpuSampler(CountingEnv, {}, batch_T=2, batch_B=2, start_method='spawn')\n"
        "    s.initialize(EchoAgent(), seed=0)\n"
        "    print(' '.join(str(p.pid) for p in s.workers), flush=True)\n"
        "    time.sleep(60)\n"
    )
    main = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in main.stdout.readline().split()]
    assert len(pids) == 2
    main.send_signal(signal.SIGKILL)
    main.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def _alive(pid):
    """Running, as opposed to gone or a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_alternating_samplers_need_an_even_number_of_workers():
    with pytest.raises(ValueError, match="even number of workers, got 3"):
        AlternatingSampler(CountingEnv, {}, batch_T=2, batch_B=6).initialize(
            EchoAgent(), affinity={"workers_cpus": [0, 1, 0]}
        )
    assert not mp.active_children()


@pytest.mark.parametrize("collector_cls", [None, CpuWaitResetCollector])
def test_serial_sampler_state_resumes_exactly(collector_cls):
    """A sampler loading another's state, as plain data (saved without pickle), carries on
    with its very next batch."""
    from test_env_state import plain

    kwargs = dict(eval_n_envs=1, eval_max_steps=10, **CONFIG)
    if collector_cls is not None:
        kwargs["CollectorCls"] = collector_cls
    first = SerialSampler(CountingEnv, {}, **kwargs)
    first.initialize(EchoAgent(), seed=1, bootstrap_value=True)
    for itr in range(2):
        first.obtain_samples(itr)
    state = first.state_dict()
    assert plain(state)
    second = SerialSampler(CountingEnv, {}, **kwargs)
    second.initialize(EchoAgent(), seed=99, bootstrap_value=True)  # (another seed: overwritten)
    second.load_state_dict(state)
    for itr in range(2, 4):
        (a, infos_a), (b, infos_b) = first.obtain_samples(itr), second.obtain_samples(itr)
        assert_same(a, b)
        assert [i.Return for i in infos_a] == [i.Return for i in infos_b]
    assert [i.Return for i in first.evaluate_agent(4)] == [
        i.Return for i in second.evaluate_agent(4)
    ]
    smaller = SerialSampler(CountingEnv, {}, batch_T=2, batch_B=3)
    smaller.initialize(EchoAgent())
    with pytest.raises(ValueError, match="saved state has 4 environments"):
        smaller.load_state_dict(first.state_dict())


@pytest.mark.parametrize("sampler_cls", [SerialSampler, CpuSampler])
def test_a_batch_that_cannot_fit_is_refused_before_any_worker_starts(sampler_cls, monkeypatch):
    monkeypatch.setattr("rl_arrays._memory.available_memory", lambda: 100)
    sampler = sampler_cls(CountingEnv, {}, **CONFIG)
    with pytest.raises(MemoryError, match=r"batch_T\*batch_B=24 needs .* batch_T\*batch_B <= \d"):
        sampler.initialize(EchoAgent(), seed=0)
    assert not mp.active_children()


def test_alternating_sampler_refuses_a_recurrent_agent_with_one_state():
    """Its two groups take turns: one recurrent state for both would mix their episodes."""
    agent = EchoAgent()
    agent.recurrent = True
    with (
        AlternatingSampler(CountingEnv, {}, **CONFIG) as sampler,
        pytest.raises(ValueError, match=r"Alternating\* agent"),
    ):
        sampler.initialize(agent, affinity={"workers_cpus": [0, 1]}, seed=0)
    assert not mp.active_children()
