import csv
import math
import os
import sys
import typing
from types import SimpleNamespace

import psutil
import pytest
import torch
from rl_runners_toys import (
    StatelessToySampler,
    ToyAgent,
    ToyAlgo,
    ToySampler,
    ToyTrajInfo,
    WaitResetCollector,
    make,
)

import rl_runners
from rl_runners import MinibatchRl, MinibatchRlEval, logger_context
from rl_runners._minibatch_rl import mid_batch_reset
from rl_runners._process import SMALL_MODEL_PARAMETERS, default_torch_threads
from rl_runners._protocols import protocol_members

RUNNER_COLUMNS = [
    "Iteration",
    "CumTime (s)",
    "CumSteps",
    "CumCompletedTrajs",
    "CumUpdates",
    "StepsPerSecond",
    "UpdatesPerSecond",
    "ReplayRatio",
    "CumReplayRatio",
]
STATS = ["Average", "Std", "Median", "Min", "Max"]


def read_progress(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def run(tmp_path, runner_cls=MinibatchRl, snapshot_mode="none", name="toy", **kwargs):
    algo, agent, sampler = make(kwargs.pop("sampler_kwargs", None))
    runner = runner_cls(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=kwargs.pop("n_steps", 48),
        seed=kwargs.pop("seed", 3),
        log_interval_steps=kwargs.pop("log_interval_steps", 16),
        **kwargs,
    )
    with logger_context(tmp_path, 0, name, snapshot_mode=snapshot_mode) as run_dir:
        runner.train()
    return runner, run_dir


def test_progress_csv_has_one_row_per_log_interval_with_rlpyt_columns(tmp_path):
    runner, run_dir = run(tmp_path)  # 8 steps a batch, log every 2 iterations, 6 iterations
    assert (runner.n_itr, runner.log_interval_itrs) == (6, 2)
    header, rows = read_progress(run_dir)
    assert header[: len(RUNNER_COLUMNS)] == RUNNER_COLUMNS
    assert {"NewCompletedTrajs", "StepsInTrajWindow"} <= set(header)
    for name in ("Length", "Return", "DiscountedReturn", "loss", "gradNorm"):
        assert [name + s for s in STATS] == [c for c in header if c.startswith(name)]
    assert not any("private" in c for c in header)
    assert [int(r["Iteration"]) for r in rows] == [1, 3, 5]
    assert [int(r["CumSteps"]) for r in rows] == [16, 32, 48]
    assert [int(r["CumUpdates"]) for r in rows] == [4, 8, 12]  # two SGD steps an iteration
    assert [float(r["ReplayRatio"]) for r in rows] == [2.0, 2.0, 2.0]
    assert all(float(r["StepsPerSecond"]) > 0 for r in rows)
    assert all(r[f"loss{s}"] != "" for r in rows for s in STATS)


def test_n_itr_rounds_up_to_whole_log_intervals():
    algo, agent, sampler = make()
    runner = MinibatchRl(algo, agent, sampler, n_steps=60, log_interval_steps=24)
    assert (runner.log_interval_itrs, runner.n_itr) == (3, 9)  # 7 iterations -> 9
    runner = MinibatchRl(algo, agent, sampler, n_steps=1e3, log_interval_steps=1)
    assert (runner.log_interval_itrs, runner.n_itr) == (1, 125)


def test_trajectory_statistics_over_the_window(tmp_path):
    script = {
        0: [ToyTrajInfo(2, 1.0), ToyTrajInfo(4, 5.0)],
        1: [ToyTrajInfo(3, -2.0)],
        2: [],
        3: [ToyTrajInfo(6, 10.0), ToyTrajInfo(1, 4.0)],
    }
    _, run_dir = run(
        tmp_path,
        n_steps=32,
        log_traj_window=3,
        sampler_kwargs=dict(script=script),
    )
    _, rows = read_progress(run_dir)
    first, second = rows
    returns = [1.0, 5.0, -2.0]
    assert float(first["ReturnAverage"]) == pytest.approx(sum(returns) / 3)
    assert float(first["ReturnStd"]) == pytest.approx(torch.tensor(returns).std(correction=0))
    assert float(first["ReturnMedian"]) == 1.0
    assert (float(first["ReturnMin"]), float(first["ReturnMax"])) == (-2.0, 5.0)
    assert int(first["NewCompletedTrajs"]) == 3
    assert int(first["StepsInTrajWindow"]) == 9
    window = [-2.0, 10.0, 4.0]  # the window keeps the last three
    assert float(second["ReturnAverage"]) == pytest.approx(sum(window) / 3)
    assert float(second["ReturnMedian"]) == 4.0
    assert (int(second["LengthMin"]), int(second["LengthMax"])) == (1, 6)
    assert int(second["NewCompletedTrajs"]) == 2
    assert int(second["CumCompletedTrajs"]) == 5


def test_trajectory_columns_appear_when_the_first_trajectory_completes(tmp_path):
    script = {2: [ToyTrajInfo(2, 1.0)]}
    _, run_dir = run(tmp_path, n_steps=32, sampler_kwargs=dict(script=script))
    header, rows = read_progress(run_dir)
    assert header.index("ReturnAverage") > header.index("gradNormMax")  # appended
    assert rows[0]["ReturnAverage"] == ""  # the column came after the first row
    assert float(rows[1]["ReturnAverage"]) == 1.0


def test_startup_and_loop_call_the_components_as_rlpyt(tmp_path):
    algo = ToyAlgo()
    agent = ToyAgent()
    sampler = ToySampler(CollectorCls=WaitResetCollector)
    runner = MinibatchRl(
        algo, agent, sampler, n_steps=16, seed=7, affinity=dict(cuda_idx=None), log_interval_steps=8
    )
    with logger_context(tmp_path, 1, "calls"):
        runner.train()
    name, init = sampler.calls[0]
    assert name == "initialize"
    assert init["seed"] == 7 and init["bootstrap_value"] is True
    assert init["traj_info_kwargs"] == {"discount": 0.99}
    assert (init["rank"], init["world_size"]) == (0, 1)
    assert algo.init_kwargs["n_itr"] == 2
    assert algo.init_kwargs["batch_spec"] is sampler.batch_spec
    assert algo.init_kwargs["mid_batch_reset"] is False  # from the sampler's collector class
    assert algo.init_kwargs["examples"] == {"example": "examples"}
    assert agent.calls == [
        ("to_device", None),
        ("sample_mode", 0),
        ("train_mode", 0),
        ("sample_mode", 1),
        ("train_mode", 1),
    ]
    assert sampler.calls[1:] == [
        ("obtain_samples", 0),
        ("obtain_samples", 1),
        ("shutdown",),
    ]
    assert algo.optimize_calls == [0, 1]
    assert mid_batch_reset(make()[2]) is True


def test_updates_are_counted_from_the_opt_info_without_update_counter(tmp_path):
    algo, agent, sampler = make(algo_kwargs=dict(count_updates=False))
    runner = MinibatchRl(algo, agent, sampler, n_steps=24, log_interval_steps=8)
    with logger_context(tmp_path, 0, "count") as run_dir:
        runner.train()
    _, rows = read_progress(run_dir)
    assert [int(r["CumUpdates"]) for r in rows] == [2, 4, 6]


def test_eval_runner_evaluates_before_training_and_at_each_interval(tmp_path):
    eval_infos = [ToyTrajInfo(5, 2.0), ToyTrajInfo(7, 4.0)]
    runner, run_dir = run(
        tmp_path, MinibatchRlEval, n_steps=48, sampler_kwargs=dict(eval_script=eval_infos)
    )
    sampler, agent = runner.sampler, runner.agent
    evals = [c[1] for c in sampler.calls if c[0] == "evaluate_agent"]
    assert evals == [0, 1, 3, 5]
    assert agent.calls.index(("eval_mode", 0)) < agent.calls.index(("sample_mode", 0))
    assert ("eval_mode", 5) in agent.calls
    header, rows = read_progress(run_dir)
    assert [int(r["Iteration"]) for r in rows] == [0, 1, 3, 5]
    assert [int(r["CumSteps"]) for r in rows] == [0, 16, 32, 48]
    assert math.isnan(float(rows[0]["StepsPerSecond"]))
    assert all(int(r["TrajsInEval"]) == 2 and int(r["StepsInEval"]) == 12 for r in rows)
    assert all(float(r["ReturnAverage"]) == 3.0 for r in rows)
    assert {"CumTrainTime", "CumEvalTime"} <= set(header)
    assert "NewCompletedTrajs" not in header


@pytest.mark.parametrize(("stop_return", "rows_at"), [(3.0, [0, 1]), (3.5, [0, 1, 3, 5])])
def test_eval_runner_stops_once_an_evaluation_reaches_stop_return(tmp_path, stop_return, rows_at):
    """Evaluations return 2 and 4 (mean 3): a bar of 3 ends the run after the first
    evaluation during training (the one before training does not count), 3.5 never."""
    eval_infos = [ToyTrajInfo(5, 2.0), ToyTrajInfo(7, 4.0)]
    runner, run_dir = run(
        tmp_path,
        MinibatchRlEval,
        n_steps=48,
        sampler_kwargs=dict(eval_script=eval_infos),
        stop_return=stop_return,
    )
    _, rows = read_progress(run_dir)
    assert [int(r["Iteration"]) for r in rows] == rows_at
    assert runner.sampler.calls[-1] == ("shutdown",)
    with pytest.raises(ValueError, match="stop_return"):
        MinibatchRlEval(*make(), n_steps=8, stop_return=float("nan"))


def test_eval_runner_needs_an_evaluating_sampler():
    class NoEval:
        batch_spec = ToySampler().batch_spec

        def initialize(self, agent, **kwargs): ...

        def obtain_samples(self, itr): ...

        def shutdown(self): ...

    with pytest.raises(TypeError, match=r"sampler .*evaluate_agent"):
        MinibatchRlEval(ToyAlgo(), ToyAgent(), NoEval(), n_steps=8)
    MinibatchRl(ToyAlgo(), ToyAgent(), NoEval(), n_steps=8)  # training alone needs none


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(n_steps=7), ValueError, r"n_steps=7 is less than one sampler batch \(.* = 8\)"),
        (dict(n_steps=0), ValueError, "n_steps must be a positive integer"),
        (dict(n_steps=2.5), ValueError, "n_steps must be a positive integer"),
        (dict(n_steps="100"), ValueError, "n_steps must be a positive integer"),
        (dict(log_interval_steps=0), ValueError, "log_interval_steps"),
        (dict(log_traj_window=0), ValueError, "log_traj_window"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(affinity=[0]), TypeError, "affinity"),
    ],
)
def test_bad_arguments_raise_before_any_work(kwargs, error, match):
    algo, agent, sampler = make()
    args = dict(algo=algo, agent=agent, sampler=sampler, n_steps=64) | kwargs
    with pytest.raises(error, match=match):
        MinibatchRl(**args)
    assert sampler.calls == [] and agent.calls == [] and algo.init_kwargs is None


AGENT_MEMBERS = ["to_device", "sample_mode", "train_mode", "state_dict", "load_state_dict"]
SAMPLER_MEMBERS = ["batch_spec", "initialize", "obtain_samples", "shutdown"]


def test_the_protocols_declare_what_the_runners_check():
    algo = ["opt_info_fields", "initialize", "optimize_agent", "optim_state_dict"]
    async_algo = ["opt_info_fields", "replay_ratio", "async_initialize", "optim_initialize"]
    members = {
        "SamplerProtocol": SAMPLER_MEMBERS,
        "AgentProtocol": AGENT_MEMBERS,
        "AlgoProtocol": [*algo, "load_optim_state_dict"],
        "InferenceAgentProtocol": [*AGENT_MEMBERS, "inference_policy"],
        "AsyncSamplerProtocol": ["batch_spec", "async_initialize", *SAMPLER_MEMBERS[1:]],
        "AsyncAgentProtocol": ["to_device", "train_mode", "state_dict", "send_shared_memory"],
        "AsyncAlgoProtocol": [
            *async_algo,
            "samples_to_buffer",
            "optimize_agent",
            "optim_state_dict",
        ],
    }
    for name, expected in members.items():
        protocol = getattr(rl_runners, name)
        assert protocol_members(protocol) == expected
        if sys.version_info >= (3, 13):
            assert set(expected) == typing.get_protocol_members(protocol)


def test_only_an_evaluator_needs_eval_mode_and_evaluate_agent():
    algo, agent, sampler = make()
    bare_agent = SimpleNamespace(**{k: getattr(agent, k) for k in AGENT_MEMBERS})
    MinibatchRl(algo, bare_agent, sampler, n_steps=64)
    with pytest.raises(TypeError, match=r"agent \(SimpleNamespace\) lacks eval_mode; see .*AgentP"):
        MinibatchRlEval(algo, bare_agent, sampler, n_steps=64)
    bare_sampler = SimpleNamespace(**{k: getattr(sampler, k) for k in SAMPLER_MEMBERS})
    MinibatchRl(algo, agent, bare_sampler, n_steps=64)
    with pytest.raises(TypeError, match=r"sampler \(SimpleNamespace\) lacks evaluate_agent"):
        MinibatchRlEval(algo, agent, bare_sampler, n_steps=64)


def test_components_without_the_protocol_methods_are_refused():
    algo, agent, sampler = make()
    with pytest.raises(TypeError, match=r"agent \(object\) lacks to_device"):
        MinibatchRl(algo, object(), sampler, n_steps=64)
    with pytest.raises(TypeError, match=r"algo .*optim_state_dict"):
        MinibatchRl(object(), agent, sampler, n_steps=64)
    with pytest.raises(ValueError, match=r"batch_spec\.size"):
        bad = StatelessToySampler()
        bad.batch_spec = type("Spec", (), {"size": 0})()
        MinibatchRl(algo, agent, bad, n_steps=64)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_error_in_the_loop_shuts_the_sampler_down_and_keeps_the_log(tmp_path, error):
    algo, agent, sampler = make(dict(fail_at=5, fail_with=error))
    runner = MinibatchRl(algo, agent, sampler, n_steps=64, log_interval_steps=16)
    with (
        pytest.raises(error, match="sampler failed at 5"),
        logger_context(tmp_path, 0, "fail", snapshot_mode="last") as run_dir,
    ):
        runner.train()
    assert sampler.calls[-1] == ("shutdown",)
    header, rows = read_progress(run_dir)
    assert [int(r["Iteration"]) for r in rows] == [1, 3]
    assert all(len(r) == len(header) for r in rows)
    assert torch.load(run_dir / "params.pt", weights_only=True)["itr"] == 3
    if error is KeyboardInterrupt:
        assert "Interrupted after 5 iterations" in (run_dir / "debug.log").read_text()


def test_an_error_during_startup_still_shuts_the_sampler_down(tmp_path):
    algo, agent, sampler = make()

    def broken(*args, **kwargs):
        raise RuntimeError("no optimizer")

    algo.initialize = broken
    runner = MinibatchRl(algo, agent, sampler, n_steps=16)
    with pytest.raises(RuntimeError, match="no optimizer"):
        runner.train()
    assert sampler.calls[-1] == ("shutdown",)


def test_a_failing_shutdown_does_not_hide_the_error(tmp_path):
    algo, agent, sampler = make(dict(fail_at=0))

    def shutdown():
        raise OSError("cannot close")

    sampler.shutdown = shutdown
    with pytest.raises(RuntimeError, match="sampler failed at 0"):
        MinibatchRl(algo, agent, sampler, n_steps=16).train()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_the_process_gets_its_cpus_and_threads_back_after_training(tmp_path):
    """A runner pins the process that trains (master_cpus, master_torch_threads) while it
    runs; a notebook or a test process that trains must not stay pinned afterwards."""
    cpus, threads = os.sched_getaffinity(0), torch.get_num_threads()
    affinity = {"master_cpus": [min(cpus)], "master_torch_threads": 1}
    runner, _ = run(tmp_path, affinity=affinity)
    assert runner.n_itr == 6  # (it ran)
    assert (os.sched_getaffinity(0), torch.get_num_threads()) == (cpus, threads)


class TensorInfoAlgo(ToyAlgo):
    """ToyAlgo leaving its diagnostics as 1-D tensors, as compiled algorithms do."""

    def optimize_agent(self, itr, samples):
        info = super().optimize_agent(itr, samples)
        return type(info)(*(torch.tensor(values) for values in info))


def test_diagnostics_left_as_tensors_are_read_once_per_row(tmp_path, monkeypatch):
    """The tensors wait in the runner until a row is written, and are read then, all in one
    ``tolist`` (and the non-finite guard's notes in one more); the row is the one their
    numbers would give."""
    progress = {}
    for name, algo_cls in [("floats", ToyAlgo), ("tensors", TensorInfoAlgo)]:
        _, agent, sampler = make()
        runner = MinibatchRl(algo_cls(), agent, sampler, n_steps=48, seed=3, log_interval_steps=16)
        reads: list[int] = []
        original = torch.Tensor.tolist

        def counted(t, reads=reads, original=original):
            reads.append(1)
            return original(t)

        monkeypatch.setattr(torch.Tensor, "tolist", counted)
        with logger_context(tmp_path / name, 0, name) as run_dir:
            runner.train()
        monkeypatch.undo()
        progress[name] = read_progress(run_dir)[1]
        if name == "tensors":
            assert len(reads) == 2 * len(progress[name]) == 6
    for key in ("lossAverage", "gradNormMax", "CumUpdates"):
        floats, tensors = ([float(r[key]) for r in progress[n]] for n in ("floats", "tensors"))
        assert tensors == pytest.approx(floats, rel=1e-6)


class _Sized:
    """An agent of ``n`` parameters on ``device``; a sampler with ``workers`` processes."""

    def __init__(self, n=0, device="cpu", workers=0):
        self.device = torch.device(device)
        self._parameters = [torch.zeros(n)]
        self.workers = [None] * workers

    def parameters(self):
        return iter(self._parameters)


def test_default_torch_threads_one_for_small_models_else_the_cores_workers_leave(monkeypatch):
    monkeypatch.setattr(psutil.Process, "cpu_affinity", lambda self: [0, 1, 2, 3])
    big = SMALL_MODEL_PARAMETERS
    assert default_torch_threads(_Sized(big - 1), _Sized()) == 1
    assert default_torch_threads(_Sized(big), _Sized()) == 4
    assert default_torch_threads(_Sized(big), _Sized(workers=3)) == 1
    assert default_torch_threads(_Sized(big), _Sized(workers=8)) == 1
    assert default_torch_threads(_Sized(big, device="meta"), _Sized()) == 1  # (not the CPU)


def test_a_runner_without_thread_settings_trains_on_the_default_and_restores_torchs(tmp_path):
    before = torch.get_num_threads()
    seen = []
    algo, agent, sampler = make()
    runner = MinibatchRl(algo, agent, sampler, n_steps=16, log_interval_steps=8)
    optimize = algo.optimize_agent

    def counting(itr, samples):
        seen.append(torch.get_num_threads())
        return optimize(itr, samples)

    algo.optimize_agent = counting
    with logger_context(tmp_path, 0, "threads"):
        runner.train()
    assert seen and set(seen) == {1}  # a linear toy model: one thread
    assert torch.get_num_threads() == before
