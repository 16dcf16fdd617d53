"""SyncRl / SyncRlEval on the toy sampler, agent and algorithm, in real processes (gloo)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch
from rl_runners_toys import CheckedSyncRl, DdpToyAgent, RankedToySampler, ToyAgent, ToyAlgo

from rl_runners import SyncRl, SyncRlEval, find_port, logger_context


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def _make(runner_cls=CheckedSyncRl, n_steps=64, processes=2, sampler_kwargs=None, **kwargs):
    torch.manual_seed(0)
    sampler = RankedToySampler(batch_T=4, batch_B=2, **(sampler_kwargs or {}))
    return runner_cls(
        ToyAlgo(),
        DdpToyAgent(),
        sampler,
        n_steps=n_steps,
        seed=5,
        affinity=[{} for _ in range(processes)],
        log_interval_steps=16,
        **kwargs,
    )


def _ranks_left() -> list[psutil.Process]:
    """This process's children, but for multiprocessing's own helpers (the resource tracker
    and the forkserver live on for the session)."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if not any("resource_tracker" in a or "forkserver" in a for a in p.cmdline())
    ]


def _no_children_left():
    deadline = time.monotonic() + 10
    while _ranks_left() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _ranks_left() == []


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_ranks_train_in_step_with_identical_parameters(tmp_path, start_method):
    runner = _make(start_method=start_method)
    with logger_context(tmp_path, 0, "sync", snapshot_mode="last") as run_dir:
        runner.train()
    rows = _rows(run_dir)
    # Every iteration covers both ranks' batches of 8 steps.
    assert [int(r["CumSteps"]) for r in rows] == [16, 32, 48, 64]
    # Trajectories of both ranks are counted: env b ends an episode every 3 + b steps.
    per_rank = sum(64 // 2 // 2 // (3 + b) for b in range(2))
    assert int(rows[-1]["CumCompletedTrajs"]) in range(2 * per_rank - 2, 2 * per_rank + 1)
    assert runner.param_gaps == [0.0] * 4  # all-reduced gradients: the same update everywhere
    assert len(set(runner.param_norms)) == 4  # (and they did change)
    assert (run_dir / "params.pt").exists()
    assert _no_children_left()


def test_the_result_differs_from_one_process_alone(tmp_path):
    """Rank 0 trains on the other rank's data too (its parameters are not those of a
    single-process run on its own data)."""
    single = _make(processes=1)
    with logger_context(tmp_path, 0, "one"):
        single.train()
    double = _make(processes=2, n_steps=128)
    with logger_context(tmp_path, 1, "two"):
        double.train()
    assert single.param_norms[0] != double.param_norms[0]


def test_eval_stop_return_ends_every_rank(tmp_path):
    runner = _make(SyncRlEval, n_steps=160, sampler_kwargs={"eval_script": None}, stop_return=-1e9)
    with logger_context(tmp_path, 0, "sync") as run_dir:
        runner.train()
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [0, 16]
    assert _no_children_left()


@pytest.mark.parametrize("kill", [False, True], ids=["raises", "killed"])
def test_a_failing_rank_ends_the_run_with_its_error(tmp_path, kill):
    runner = _make(n_steps=640, sampler_kwargs={"fail_rank": 1, "fail_at": 3, "kill": kill})
    start = time.monotonic()
    with (
        logger_context(tmp_path, 0, "sync") as run_dir,
        pytest.raises(RuntimeError) as error,
    ):
        runner.train()
    assert time.monotonic() - start < 30
    expected = "rank 1 died (exit code -9)" if kill else "sampler failed at 3"
    assert expected in str(error.value)
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [16, 32, 48]  # the rows before it
    assert _no_children_left()


def test_a_failing_rank_0_stops_the_others(tmp_path):
    runner = _make(n_steps=640, sampler_kwargs={"fail_rank": 0, "fail_at": 3})
    with logger_context(tmp_path, 0, "sync"), pytest.raises(RuntimeError, match="failed at 3"):
        runner.train()
    assert _no_children_left()


def test_bad_requests_are_refused(tmp_path):
    algo, sampler = ToyAlgo(), RankedToySampler()
    with pytest.raises(TypeError, match="list of affinity dicts"):
        SyncRl(algo, DdpToyAgent(), sampler, 64, affinity={"cuda_idx": None})
    with pytest.raises(TypeError, match="data_parallel"):
        SyncRl(algo, ToyAgent(), sampler, 64, affinity=[{}, {}])
    with pytest.raises(ValueError, match="start_method"):
        SyncRl(algo, DdpToyAgent(), sampler, 64, affinity=[{}], start_method="thread")
    runner = SyncRl(algo, DdpToyAgent(), sampler, 64, affinity=[{}, {}])
    assert runner.itr_batch_size == 2 * 8  # weak scaling


def test_a_killed_job_resumes_from_its_snapshot_in_step(tmp_path):
    """Rank 1 killed in iteration 5: the job stops with rows and a snapshot up to iteration
    4; a new job resumes there (every rank from the same weights) and ends in step."""
    killed = _make(n_steps=128, sampler_kwargs={"fail_rank": 1, "fail_at": 5, "kill": True})
    with logger_context(tmp_path, 0, "sync", snapshot_mode="last"), pytest.raises(RuntimeError):
        killed.train()
    run_dir = tmp_path / "run_0"
    assert torch.load(run_dir / "params.pt", weights_only=True)["next_itr"] == 5
    resumed = _make(n_steps=128)
    with logger_context(tmp_path, 0, "sync", snapshot_mode="last"):
        resumed.resume(run_dir)
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == list(range(16, 129, 16))
    assert resumed.param_gaps == [0.0] * 3  # the ranks in step after the resume
    assert _no_children_left()


def test_the_same_script_runs_under_torchrun(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import contextlib, os, sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from rl_runners_toys import CheckedSyncRl, DdpToyAgent, RankedToySampler, ToyAlgo
            from rl_runners import logger_context

            runner = CheckedSyncRl(
                ToyAlgo(), DdpToyAgent(), RankedToySampler(), 32, seed=1,
                log_interval_steps=16,
            )
            # Only rank 0 writes the run directory.
            if os.environ["RANK"] == "0":
                context = logger_context({str(tmp_path)!r}, 0, "torchrun")
            else:
                context = contextlib.nullcontext()
            with context:
                runner.train()
            if runner.rank == 0:
                print("GAPS", runner.param_gaps, flush=True)
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=1",
            "--nproc-per-node=2",
            "--master-port",
            str(find_port()),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GAPS [0.0, 0.0]" in result.stdout
    assert [int(r["CumSteps"]) for r in _rows(tmp_path / "run_0")] == [16, 32]
