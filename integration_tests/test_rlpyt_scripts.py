"""rlpyt users' launch scripts, in the shapes rlpyt's documentation and examples give them, with
only their imports changed to `from rl_suite import ...` and their step counts made small.

Each test is one script shape: the calls as an rlpyt user writes them (counts written as floats
such as `1e3`, default settings left out), run for a few thousand steps. A script that breaks
here would break for a user who moves from rlpyt."""

import csv
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from rl_suite import (
    A2C,
    DQN,
    SAC,
    AlternatingAtariLstmAgent,
    AlternatingSampler,
    AsyncRlEval,
    AsyncSerialSampler,
    AtariDqnAgent,
    AtariEnv,
    AtariFfAgent,
    AtariTrajInfo,
    DbCpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    MinibatchRl,
    MinibatchRlEval,
    SacAgent,
    SerialSampler,
    logger_context,
    make_affinity,
)
from rl_suite import make as gym_make

GAME = "pong"


def rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def train(runner, tmp_path, name, config):
    with logger_context(tmp_path, 0, name, config) as run_dir:
        runner.train()
    return rows(run_dir)


def test_example_1_dqn_serial_counts_as_floats(tmp_path):
    """DQN on Atari with the serial sampler; rlpyt's scripts write counts as floats."""
    sampler = SerialSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=dict(game=GAME),
        eval_env_kwargs=dict(game=GAME),
        batch_T=4,
        batch_B=1,
        max_decorrelation_steps=0,
        eval_n_envs=1,
        eval_max_steps=500,
        eval_max_trajectories=1,
    )
    algo = DQN(min_steps_learn=1e3, replay_size=2e4)
    runner = MinibatchRlEval(
        algo=algo,
        agent=AtariDqnAgent(),
        sampler=sampler,
        n_steps=2e3,
        log_interval_steps=1e3,
        affinity=dict(cuda_idx=None),
    )
    progress = train(runner, tmp_path, "dqn_" + GAME, dict(game=GAME))
    assert [int(r["CumSteps"]) for r in progress] == [0, 1000, 2000]
    assert float(progress[-1]["CumUpdates"]) > 0  # learning began at 1e3 steps


def test_example_2_sac_with_gym_make(tmp_path):
    """SAC on a MuJoCo task made by `gym_make` (the `mujoco` extra brings what it needs)."""
    pytest.importorskip("mujoco")
    env_id = "Hopper-v5"
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=1,
        batch_B=1,
        max_decorrelation_steps=0,
        eval_n_envs=2,
        eval_max_steps=int(4e2),
        eval_max_trajectories=2,
    )
    runner = MinibatchRlEval(
        algo=SAC(min_steps_learn=4e2, batch_size=64),
        agent=SacAgent(),
        sampler=sampler,
        n_steps=6e2,
        log_interval_steps=3e2,
        affinity=dict(cuda_idx=None),
    )
    progress = train(runner, tmp_path, "sac_" + env_id, dict(env_id=env_id))
    assert int(progress[-1]["CumSteps"]) == 600
    assert float(progress[-1]["CumUpdates"]) > 0


def test_example_3_a2c_gpu_sampler_agent_on_cpu(tmp_path):
    """A2C with the action-server sampler and its workers, the agent on the CPU."""
    sampler = GpuSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=dict(game=GAME),
        batch_T=5,
        batch_B=8,
        max_decorrelation_steps=100,
    )
    runner = MinibatchRl(
        algo=A2C(),
        agent=AtariFfAgent(),
        sampler=sampler,
        n_steps=2e3,
        log_interval_steps=1e3,
        affinity=dict(cuda_idx=None, workers_cpus=list(range(2))),
    )
    progress = train(runner, tmp_path, "a2c_" + GAME, dict(game=GAME))
    assert int(progress[-1]["CumSteps"]) >= 2000


def test_example_4_a2c_alternating_sampler_recurrent_agent(tmp_path):
    """A recurrent agent on single frames, with the alternating action server and environments
    that wait for the next batch to reset (so that no sequence holds a reset)."""
    sampler = AlternatingSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=dict(game=GAME, num_img_obs=1),
        CollectorCls=GpuWaitResetCollector,
        batch_T=20,
        batch_B=4,
        max_decorrelation_steps=100,
    )
    runner = MinibatchRl(
        algo=A2C(),
        agent=AlternatingAtariLstmAgent(),  # (one recurrent state per group)
        sampler=sampler,
        n_steps=2e3,
        log_interval_steps=1e3,
        affinity=dict(cuda_idx=None, workers_cpus=list(range(2))),
    )
    progress = train(runner, tmp_path, "a2c_" + GAME, dict(game=GAME))
    assert int(progress[-1]["CumSteps"]) >= 2000


def test_example_5_default_dqn_with_32_envs_stores_each_frame_once(tmp_path):
    """The default DQN (a replay of 1e6 steps) with 32 environments: rlpyt keeps each Atari frame
    once in its replay (about 8 GB here); storing every stacked frame would take 4x that."""
    sampler = GpuSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=dict(game=GAME),
        CollectorCls=GpuWaitResetCollector,
        eval_env_kwargs=dict(game=GAME),
        max_decorrelation_steps=0,
        eval_n_envs=2,
        eval_max_steps=int(1e3),
        eval_max_trajectories=2,
        batch_T=2,
        batch_B=32,
    )
    algo = DQN(batch_size=128)  # the rest by default
    runner = MinibatchRlEval(
        algo=algo,
        agent=AtariDqnAgent(),
        sampler=sampler,
        n_steps=2e3,
        log_interval_steps=1e3,
        affinity=dict(cuda_idx=None, workers_cpus=list(range(2))),
    )
    progress = train(runner, tmp_path, "dqn_" + GAME, dict(game=GAME))
    assert int(progress[-1]["CumSteps"]) >= 2000
    replay = algo.replay_buffer
    assert replay.samples.observation is None  # no stacked observations ...
    assert replay.samples_frames.shape[1:] == (32, 104, 80)  # ... one frame per step
    assert replay.samples_frames.nbytes < 9e9


@pytest.mark.skipif(
    {2, 3, 24, 25, 26, 27} <= os.sched_getaffinity(0), reason="this machine has those cores"
)
def test_example_7_an_affinity_for_another_machine_is_refused():
    """A hard-coded 16-core, 8-GPU affinity on a smaller machine: refused, saying why."""
    with pytest.raises(ValueError, match="may not use"):
        make_affinity(
            run_slot=0, n_cpu_core=16, n_gpu=8, hyperthread_offset=24, n_socket=2, gpu_per_run=2
        )


def test_atari_dqn_async_serial_with_the_double_buffer_collector(tmp_path):
    """The asynchronous runner with the serial sampler and rlpyt's `DbCpuResetCollector`."""
    affinity = make_affinity(
        run_slot=0, n_cpu_core=2, n_gpu=0, sample_gpu_per_run=0, async_sample=True
    )
    sampler = AsyncSerialSampler(
        EnvCls=AtariEnv,
        env_kwargs=dict(game=GAME),
        CollectorCls=DbCpuResetCollector,
        batch_T=5,
        batch_B=4,
        max_decorrelation_steps=100,
        eval_env_kwargs=dict(game=GAME),
        eval_n_envs=1,
        eval_max_steps=500,
        eval_max_trajectories=1,
    )
    algo = DQN(replay_ratio=8, min_steps_learn=1e3, replay_size=int(1e4))
    runner = AsyncRlEval(
        algo=algo,
        agent=AtariDqnAgent(),
        sampler=sampler,
        n_steps=2e3,
        log_interval_steps=1e3,
        affinity=affinity,
    )
    cpus = os.sched_getaffinity(0)
    progress = train(runner, tmp_path, "async_dqn_" + GAME, dict(game=GAME))
    assert int(progress[-1]["CumSteps"]) >= 2000
    assert np.isfinite(float(progress[-1]["CumUpdates"]))
    assert os.sched_getaffinity(0) == cpus  # (the affinity pinned this process while it ran)


@pytest.mark.slow
def test_rlpyt_example_1_runs_to_its_end_and_resumes(tmp_path, monkeypatch):
    """rlpyt's example_1.py, imports changed (examples/rlpyt/example_1.py): the serial
    sampler's snapshots keep the emulator (it crashed at the first one when they pickled
    the environment), and a resume continues the run where it stopped."""
    example = Path(__file__).resolve().parent.parent / "examples" / "rlpyt" / "example_1.py"
    spec = importlib.util.spec_from_file_location("rlpyt_example_1", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    run_dir = module.build_and_train(n_steps=1e3)
    assert [int(r["CumSteps"]) for r in rows(run_dir)] == [0, 1000]
    saved = list(run_dir.glob("sampler_state-*.npz"))
    assert len(saved) == 1 and (run_dir / "params.pt").exists()
    with np.load(saved[0]) as state:  # the ALE's state, as bytes
        assert any(state[key].dtype == np.uint8 and state[key].size > 1000 for key in state.files)

    # Resumed without a replay buffer (rlpyt's default: not in snapshots), learning waits for
    # min_steps_learn new steps again, as at the start; it drew from the empty buffer before.
    assert module.build_and_train(n_steps=2e3, resume=str(run_dir)) == run_dir
    progress = rows(run_dir)
    assert [int(r["CumSteps"]) for r in progress] == [0, 1000, 2000]
    assert "replay starts empty" in (run_dir / "debug.log").read_text()
