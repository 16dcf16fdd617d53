"""What keeps a long run safe: stop signals, the non-finite guard and the run directory's lock."""

import multiprocessing as mp
import signal
import sys

import pytest
import torch
from rl_runners_toys import make
from test_resume import N_STEPS, assert_same_run, progress, resume, runner_for, train

from rl_runners import (
    FiniteGuard,
    MinibatchRl,
    NonFiniteError,
    RunDirInUse,
    load_checkpoint,
    logger_context,
)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    runner = runner_for(MinibatchRl, N_STEPS)
    return runner, train(runner, tmp_path_factory.mktemp("full"))


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_checkpoints_mid_interval_and_resume_ends_as_an_unstopped_run(
    full, tmp_path, stop_signal
):
    """A real signal in iteration 4 (mid-interval: rows come every 2): the iteration ends,
    a snapshot of it is written, and the resumed run's rows and weights are the uninterrupted
    run's exactly."""
    stopped = runner_for(
        MinibatchRl, N_STEPS, sampler_kwargs=dict(signal_at=4, stop_signal=stop_signal)
    )
    run_dir = train(stopped, tmp_path)
    assert stopped.stopped_by == signal.Signals(stop_signal).name
    assert load_checkpoint(run_dir)["next_itr"] == 5  # the iteration under way was finished
    assert signal.getsignal(stop_signal) in (signal.SIG_DFL, signal.default_int_handler)
    resumed = runner_for(MinibatchRl, N_STEPS)
    resume(resumed, run_dir)
    assert resumed.stopped_by is None
    assert_same_run(full[0], full[1], resumed, run_dir)


def test_a_second_stop_signal_stops_at_once(tmp_path):
    class SignalsTwice(MinibatchRl):
        def _one_iteration(self, itr):
            super()._one_iteration(itr)
            if itr == 2:
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)

    algo, agent, sampler = make()
    runner = SignalsTwice(algo, agent, sampler, n_steps=N_STEPS, seed=5, log_interval_steps=16)
    with pytest.raises(SystemExit) as exit_info:
        train(runner, tmp_path)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert ("shutdown",) in sampler.calls  # (the sampler is still shut down)


def test_a_non_finite_reward_stops_the_run_and_keeps_the_good_checkpoint(tmp_path):
    runner = runner_for(MinibatchRl, N_STEPS, sampler_kwargs=dict(nan_at=5))
    with pytest.raises(NonFiniteError, match=r"non-finite reward .* in iteration 5"):
        train(runner, tmp_path)
    run_dir = tmp_path / "run_0"
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["next_itr"] == 4  # the snapshot before it, not overwritten
    assert all(torch.isfinite(v).all() for v in checkpoint["agent_state_dict"].values())
    assert [r["Iteration"] for r in progress(run_dir)[1]] == ["1", "3"]


class Diverging:
    """OptInfo fields as the algorithms give them: lists of floats, or tensors."""

    def __init__(self, as_tensors):
        self.as_tensors = as_tensors

    def opt_info(self, loss, grad_norm=1.0):
        from rl_runners_toys import OptInfo

        if self.as_tensors:
            return OptInfo(torch.tensor([loss]), torch.tensor([grad_norm]))
        return OptInfo([loss], [grad_norm])


@pytest.mark.parametrize("as_tensors", [False, True])
def test_the_guard_names_the_first_non_finite_quantity(as_tensors):
    fields = Diverging(as_tensors)
    guard = FiniteGuard(["loss", "gradNorm", "entropy"], env="Toy-v0")
    assert guard.names == ["observation", "reward", "loss", "gradNorm", "parameters"]
    samples = type("S", (), {"observation": torch.zeros(2, 3), "reward": torch.zeros(2)})()
    weights = [torch.ones(3)]
    guard.observe(0, samples, fields.opt_info(1.0), weights)
    guard.check()
    guard.observe(1, samples, fields.opt_info(2.0, float("inf")), weights)
    weights[0][1] = float("nan")
    guard.observe(2, samples, fields.opt_info(float("nan")), weights)
    with pytest.raises(
        NonFiniteError, match=r"non-finite gradNorm \(of the update\).* iteration 1"
    ):
        guard.check()


def test_the_guard_reads_the_device_once_per_check_and_never_in_observe(monkeypatch):
    reads = []
    for name in ("item", "tolist", "__bool__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor,
            name,
            lambda t, *a, _o=original, _n=name, **k: reads.append(_n) or _o(t, *a, **k),
        )
    guard = FiniteGuard(["loss"])
    samples = type("S", (), {"observation": torch.zeros(64, 3), "reward": torch.zeros(64)})()
    for itr in range(50):
        guard.observe(itr, samples, Diverging(True).opt_info(1.0), [torch.ones(4), torch.ones(2)])
    assert reads == []
    guard.check()
    guard.check()
    monkeypatch.undo()
    assert reads.count("tolist") == 2 and len(reads) <= 3  # (+ the first loss, read once)


def test_a_loss_grown_by_orders_of_magnitude_is_warned_of_once(capsys):
    guard = FiniteGuard(["loss"])
    samples = type("S", (), {"observation": torch.zeros(1), "reward": torch.zeros(1)})()
    for itr, loss in enumerate([2.0, 50.0, 3e5, 1e9]):
        guard.observe(itr, samples, Diverging(False).opt_info(loss), [])
        guard.check()
    out = capsys.readouterr().out
    assert out.count("WARNING: loss grew from 2 (its first value) to 3e+05") == 1


def _hold_run_dir(log_dir, started, release):
    with logger_context(log_dir, 0, "held", override_prefix=True):
        started.set()
        release.wait(30)


def test_one_writer_per_run_directory_and_a_crashed_one_frees_it(tmp_path):
    ctx = mp.get_context("fork" if sys.platform == "linux" else "spawn")
    started, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_run_dir, args=(tmp_path, started, release))
    holder.start()
    assert started.wait(30)
    second = logger_context(tmp_path, 0, "second", override_prefix=True)
    with pytest.raises(RunDirInUse, match=f"in use by process {holder.pid} "), second:
        pass
    holder.kill()  # a crash: the system releases its lock
    holder.join()
    with logger_context(tmp_path, 0, "after", override_prefix=True) as run_dir:
        (run_dir / ".params.pt.999.tmp").write_bytes(b"a killed writer's")
    with logger_context(tmp_path, 0, "again", override_prefix=True) as run_dir:
        assert not list(run_dir.glob(".*.tmp"))  # removed by the next writer


def test_a_checkpoint_of_another_model_is_refused_in_one_line(tmp_path):
    run_dir = train(runner_for(MinibatchRl, N_STEPS // 2), tmp_path)
    checkpoint = load_checkpoint(run_dir)
    checkpoint["agent_state_dict"]["weight"] = torch.zeros(2, 7)  # (another model's shape)
    torch.save(checkpoint, run_dir / "params.pt")
    with pytest.raises(ValueError, match=r"does not fit this run's agent .*size mismatch"):
        resume(runner_for(MinibatchRl, N_STEPS), run_dir)
