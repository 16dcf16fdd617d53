"""The trainer through its command line: short real runs, their directories, resume after a
kill, evaluation, plots, and the refusals that come before anything starts."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

import rl_suite
from rl_suite._cli import main

# A short PPO run on CartPole: 4 iterations of 8 x 32 steps, logged every 2.
TINY = [
    "--steps",
    "1024",
    "--set",
    "runner.log_interval_steps=512",
    "--set",
    "sampler.eval_n_envs=2",
]
TINY += ["--set", "sampler.eval_max_trajectories=2"]


def _rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_train_leaves_a_run_directory_with_progress_checkpoint_and_config(tmp_path, capsys):
    assert main(["train", "ppo", "--env", "CartPole-v1", "--log-dir", str(tmp_path), *TINY]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "run_0"
    assert "preset: cartpole" in out and f"run directory: {run_dir}" in out
    rows = _rows(run_dir)
    assert [int(r["CumSteps"]) for r in rows] == [0, 512, 1024]
    assert {"Iteration", "ReturnAverage", "ReturnStd", "StepsPerSecond"} <= rows[0].keys()
    assert (run_dir / "params.pt").is_file() and (run_dir / "debug.log").is_file()
    config = rl_suite.load_config(run_dir)
    assert config["algo_kwargs"]["epochs"] == 20 and config["steps"] == 1024
    if rl_suite._plot.have_matplotlib():
        assert (run_dir / "curve.png").stat().st_size > 0
    # The same directory again is refused: nothing is overwritten.
    assert main(["train", "ppo", "--log-dir", str(tmp_path), *TINY]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [0, 512, 1024]


def test_a_run_too_short_to_end_an_episode_succeeds_and_says_so(tmp_path, capsys):
    """No return column yet (Pendulum's episodes last 200 steps): no curve, and no error
    after a training that went well."""
    argv = ["train", "ppo", "--env", "Pendulum-v1", "--log-dir", str(tmp_path), "--steps", "256"]
    argv += ["--set", "runner.log_interval_steps=128", "--set", "runner.evaluate=False"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "last average return none (no episode ended)" in out
    assert "no episode has ended yet" in out and not (tmp_path / "run_0" / "curve.png").exists()


def test_a_run_that_failed_before_logging_leaves_its_directory_usable(tmp_path, capsys):
    dqn = ["train", "dqn", "--env", "CartPole-v1", "--log-dir", str(tmp_path), *TINY]
    # Learning from step 0 is refused at start-up: the replay cannot fill a batch yet.
    bad = ["--set", "algo_kwargs.min_steps_learn=0", "--set", "algo_kwargs.batch_size=4096"]
    assert main([*dqn, *bad]) == 2
    assert "min_steps_learn" in capsys.readouterr().err
    assert main(dqn) == 0  # the same directory again: nothing was logged there to keep
    assert [int(r["CumSteps"]) for r in _rows(tmp_path / "run_0")][-1] == 1024


def test_eval_plays_the_trained_agent(tmp_path, capsys):
    config = rl_suite.make_config("cartpole", steps=512, seed=3)
    config = rl_suite.apply_overrides(config, ["runner.evaluate=False"])
    run_dir = rl_suite.train(config, tmp_path)
    assert run_dir == tmp_path / "run_3"
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "3", "--deterministic"]) == 0
    out = capsys.readouterr().out
    assert out.count("episode ") == 3 and "mean return over 3 episodes" in out
    infos = rl_suite.evaluate(run_dir, episodes=2)
    assert len(infos) == 2 and all(info.Length >= 8 for info in infos)


def test_cpu_sampler_with_workers_trains(tmp_path):
    args = ["train", "a2c", "--log-dir", str(tmp_path), "--sampler", "cpu", "--workers", "2"]
    assert main([*args, "--steps", "800", "--set", "runner.log_interval_steps=400"]) == 0
    assert [int(r["CumSteps"]) for r in _rows(tmp_path / "run_0")] == [0, 400, 800]


def _ctrl_c_raises_in_child() -> None:
    """Run in the child before it starts: SIGINT as in a terminal (Python then raises
    KeyboardInterrupt), even when this test run was started with SIGINT ignored (a shell's
    background job), which children would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_q_value_policy_gradients_are_refused_several_processes(tmp_path, capsys):
    code = main(["train", "sac", "--processes", "2", "--log-dir", str(tmp_path)])
    assert code == 2
    assert "does not work for sac" in capsys.readouterr().err
    assert not (tmp_path / "run_0").exists()


def _kill_after_rows(command, run_dir, rows, env=None):
    """Run ``command`` and SIGKILL it with every process it started (as a scheduler's cgroup
    kill does; torchrun's workers are not in its process group) once ``run_dir`` has
    ``rows`` rows; returns the steps logged."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if (run_dir / "progress.csv").exists() and len(_rows(run_dir)) >= rows:
                break
            time.sleep(0.05)
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
    finally:
        tree = psutil.Process(process.pid)
        for child in [tree, *tree.children(recursive=True)]:
            child.kill()
        process.wait()
    return [int(r["CumSteps"]) for r in _rows(run_dir)]


def test_two_processes_train_together_and_resume_after_a_kill(tmp_path):
    """--processes 2: one progress.csv (rank 0's), each iteration counting both processes'
    batches; killed (the whole group), the run resumes in two processes to its end."""
    run_dir = tmp_path / "run_0"
    command = [sys.executable, "-m", "rl_suite", "train", "ppo", "--log-dir", str(tmp_path)]
    command += ["--processes", "2", "--steps", "40960", "--set", "runner.log_interval_steps=512"]
    command += ["--set", "runner.evaluate=False"]
    killed_at = _kill_after_rows(command, run_dir, 2)
    assert killed_at[:2] == [512, 1024] and killed_at[-1] < 40960
    assert json.loads((run_dir / "params.json").read_text())["config"]["runner"]["processes"] == 2
    assert main(["resume", str(run_dir)]) == 0
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == list(range(512, 40960 + 1, 512))
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0  # its agent plays


def test_an_asynchronous_run_trains_and_a_finished_one_resumes_to_its_end(tmp_path, capsys):
    """--async: the sampler in its own process, rows by sampler steps as usual (a stopped
    or killed one resumes: test_preemption.py)."""
    args = ["train", "dqn", "--async", "--log-dir", str(tmp_path), "--steps", "1536"]
    assert main([*args, "--set", "runner.log_interval_steps=512"]) == 0
    run_dir = tmp_path / "run_0"
    rows = _rows(run_dir)
    assert [int(r["CumSteps"]) for r in rows] == [0, 512, 1024, 1536]
    assert float(rows[-1]["ReplayRatio"]) == 32  # the preset's, once learning has started
    assert main(["resume", str(run_dir)]) == 0  # (nothing left to do)
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [0, 512, 1024, 1536]


def test_train_runs_as_a_torchrun_job_and_resumes_as_one(tmp_path):
    """`torchrun ... -m rl_suite train`: the processes form one run, which rank 0 logs;
    killed, `torchrun ... -m rl_suite resume` continues it to its end."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    command = [*torchrun, "--master-port", str(rl_suite.find_port()), "-m", "rl_suite"]
    command += ["train", "ppo", "--log-dir", str(tmp_path), "--steps", "40960"]
    command += ["--set", "runner.log_interval_steps=512", "--set", "runner.evaluate=False"]
    run_dir = tmp_path / "run_0"
    killed_at = _kill_after_rows(command, run_dir, 2, env)
    assert killed_at[:2] == [512, 1024] and killed_at[-1] < 40960
    assert json.loads((run_dir / "params.json").read_text())["config"]["runner"]["processes"] == 2
    command = [*torchrun, "--master-port", str(rl_suite.find_port()), "-m", "rl_suite"]
    command += ["resume", str(run_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == list(range(512, 40960 + 1, 512))


def test_a_killed_run_resumes_where_its_checkpoint_left_it(tmp_path):
    """A run killed mid-way continues from its last checkpoint with `resume`, appending to
    the same progress.csv: every logged step count once, in order, up to the end."""
    command = [sys.executable, "-m", "rl_suite", "train", "ppo", "--log-dir", str(tmp_path)]
    # A row (and checkpoint) every iteration, 160 of them: the run is far from its end when
    # the third row appears, however slowly this test process gets to see it.
    command += ["--steps", "40960", "--set", "runner.log_interval_steps=256"]
    command += ["--set", "runner.evaluate=False"]
    run_dir = tmp_path / "run_0"
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_ctrl_c_raises_in_child,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if (run_dir / "progress.csv").exists() and len(_rows(run_dir)) >= 3:
                break
            time.sleep(0.05)
        assert process.poll() is None, process.stderr.read().decode()
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=60) == 130
        assert "interrupted (`rl-suite resume RUN_DIR` continues" in process.stderr.read().decode()
    finally:
        process.kill()
    killed_at = [int(r["CumSteps"]) for r in _rows(run_dir)]
    assert killed_at[-1] < 40960
    assert main(["resume", str(run_dir)]) == 0
    steps = [int(r["CumSteps"]) for r in _rows(run_dir)]
    assert steps == list(range(256, 40960 + 1, 256))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "NoSuchEnv-v0"], "cannot make environment 'NoSuchEnv-v0'"),
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--preset", "cartpole-a2c"], "preset 'cartpole-a2c' is for a2c, not ppo"),
        (["--set", "sampler.batch=3"], "unknown setting 'sampler.batch'"),
        (["--set", "algo_kwargs.no_such_option=1"], "unexpected keyword argument"),
        (["--device", "tpu"], "device must be 'cpu', 'cuda' or 'cuda:N'"),
        (["--device", "cuda:7"], "torch sees"),
        (["--workers", "2"], "sampler.workers applies to the cpu and gpu samplers"),
        (["--sampler", "cpu", "--workers", "9"], "from 1 to batch_B=8"),
        (["--set", "algo_kwargs.epochs=0"], "epochs"),
        (["--set", "runner.processes=0"], "runner.processes must be a positive int"),
        (["--async"], "runner.asynchronous needs a replay algorithm (dqn, catdqn"),
        (["--device", "cuda", "--processes", "2"], "torch sees"),
    ],
)
def test_bad_training_requests_fail_before_anything_starts(tmp_path, capsys, args, message):
    code = main(["train", "ppo", "--log-dir", str(tmp_path), *args, "--steps", "256"])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # no run directory made


def test_an_algorithm_that_cannot_act_in_the_action_space_is_refused():
    spaces = rl_suite._choices.probe_spaces(rl_suite.make_config(env="CartPole-v1"))
    config = rl_suite.make_config(env="CartPole-v1")
    assert rl_suite._choices.agent_class(config, spaces) is rl_suite.CategoricalFfAgent
    continuous = rl_suite._choices.probe_spaces(rl_suite.make_config(env="Pendulum-v1"))
    assert rl_suite._choices.agent_class(config, continuous) is rl_suite.MujocoFfAgent
    rl_suite._choices.ACTION_KINDS["ppo"].discard("continuous")
    try:
        with pytest.raises(ValueError, match="ppo cannot act in CartPole-v1's action space"):
            rl_suite._choices.agent_class(config, continuous)
    finally:
        rl_suite._choices.ACTION_KINDS["ppo"].add("continuous")


def test_plot_draws_several_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    for seed in (0, 1):
        run_dir = tmp_path / f"run_{seed}"
        run_dir.mkdir()
        rows = ["CumSteps,ReturnAverage,ReturnStd", "0,10,1", f"100,{20 + seed},2"]
        (run_dir / "progress.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "both.png"
    assert main(["plot", str(tmp_path / "run_0"), str(tmp_path / "run_1"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(tmp_path / "run_0"), "--y", "Nope"]) == 2
    assert "no column 'Nope'" in capsys.readouterr().err


def test_list_and_module_entry_point(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "algorithms: a2c, ppo, dqn, catdqn, r2d1, ddpg, td3, sac" in out
    assert all(name in out for name in rl_suite.PRESETS)
    result = subprocess.run(
        [sys.executable, "-m", "rl_suite", "--version"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.stdout.strip() == f"rl-suite {rl_suite.__version__}"
    assert json.loads(json.dumps(rl_suite.make_config("atari")))["env"] == "atari:pong"


# Q-learning presets cut to a few iterations: learning starts after the second batch.
def _tiny_q(preset, tmp_path, *changes):
    config = rl_suite.make_config(preset, steps=2048, seed=1)
    short = ["runner.log_interval_steps=1024", "sampler.eval_n_envs=2"]
    short += ["sampler.eval_max_trajectories=2", "algo_kwargs.min_steps_learn=512"]
    short += ["algo_kwargs.replay_ratio=1"]
    return rl_suite.apply_overrides(config, [*short, *changes])


@pytest.mark.parametrize("preset", ["cartpole-dqn", "cartpole-catdqn", "cartpole-r2d1"])
def test_q_learning_presets_train(tmp_path, preset):
    changes = ["sampler.batch_T=32", "algo_kwargs.store_rnn_state_interval=8"]
    changes += ["algo_kwargs.warmup_T=8", "algo_kwargs.batch_T=16", "algo_kwargs.batch_B=4"]
    run_dir = rl_suite.train(
        _tiny_q(preset, tmp_path, *(changes if "r2d1" in preset else [])), tmp_path
    )
    rows = _rows(run_dir)
    assert [int(r["CumSteps"]) for r in rows] == [0, 1024, 2048]
    assert int(rows[-1]["CumUpdates"]) > 0
    assert all(float(r["lossAverage"]) < float("inf") for r in rows[1:])
    checkpoint = torch.load(run_dir / "params.pt", weights_only=True)
    assert checkpoint["agent_state_dict"]["epsilon"]["itr_max"] > 0  # the schedule is kept


def test_a_resumed_q_learning_run_keeps_its_replay_buffer(tmp_path):
    """With checkpoint_replay the replay buffer is saved beside each checkpoint and loaded on
    resume: after resuming, the buffer holds every step of the whole run."""
    config = _tiny_q("cartpole-dqn", tmp_path, "runner.checkpoint_replay=True")
    run_dir = rl_suite.train(config, tmp_path)
    assert len(list(run_dir.glob("replay-*.npz"))) == 1  # the last checkpoint's only
    params = json.loads((run_dir / "params.json").read_text())
    params["config"]["steps"] = 3072  # one more log interval
    (run_dir / "params.json").write_text(json.dumps(params))
    runner = rl_suite.build(rl_suite.load_config(run_dir))
    with rl_suite.logger_context(run_dir.parent, 1, "resume", override_prefix=True):
        runner.resume(run_dir)
    assert runner.algo.replay_buffer.t_total * 8 == 3072
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [0, 1024, 2048, 3072]


@pytest.mark.parametrize(
    ("algo", "env", "message"),
    [
        ("dqn", "Pendulum-v1", "dqn cannot act in Pendulum-v1's action space"),
        ("sac", "CartPole-v1", "sac cannot act in CartPole-v1's action space"),
        ("td3", "CartPole-v1", "it takes continuous actions"),
    ],
)
def test_an_algorithm_is_refused_an_action_space_it_cannot_act_in(
    tmp_path, capsys, algo, env, message
):
    assert main(["train", algo, "--env", env, "--log-dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# DDPG, TD3 and SAC presets cut to a few iterations with small networks: 200 steps without
# learning, then one update of 32 per step.
def _tiny_qpg(preset, steps, *changes):
    config = rl_suite.make_config(preset, steps=steps, seed=2)
    small = {"hidden_sizes": [32, 32]}
    short = ["runner.log_interval_steps=200", "sampler.eval_n_envs=2"]
    short += ["sampler.eval_max_steps=400", "sampler.eval_max_trajectories=2"]
    short += ["algo_kwargs.min_steps_learn=200", "algo_kwargs.batch_size=32"]
    short += ["algo_kwargs.replay_ratio=32", f"agent.model_kwargs={small}"]
    short += [f"agent_kwargs.q_model_kwargs={small}"]
    return rl_suite.apply_overrides(config, [*short, *changes])


@pytest.mark.parametrize(
    ("preset", "targets", "optimizers"),
    [
        ("pendulum-ddpg", ["target_model", "target_q_model"], ["mu_optimizer", "q_optimizer"]),
        (
            "pendulum-td3",
            ["target_model", "target_q_model", "target_q2_model"],
            ["mu_optimizer", "q_optimizer"],
        ),
        (
            "pendulum-sac",
            ["target_q1_model", "target_q2_model"],
            ["pi_optimizer", "q_optimizer", "alpha_optimizer", "log_alpha"],
        ),
    ],
)
def test_q_value_policy_gradient_presets_train_and_checkpoint_everything(
    tmp_path, preset, targets, optimizers
):
    run_dir = rl_suite.train(_tiny_qpg(preset, 400), tmp_path)
    rows = _rows(run_dir)
    assert [int(r["CumSteps"]) for r in rows] == [0, 200, 400]
    assert int(rows[-1]["CumUpdates"]) == 200
    assert all(int(r["TrajsInEval"]) == 2 for r in rows)
    checkpoint = torch.load(run_dir / "params.pt", weights_only=True)
    assert {"model", *targets} <= checkpoint["agent_state_dict"].keys()
    assert {*optimizers, "update_counter"} <= checkpoint["optimizer_state_dict"].keys()


def test_a_resumed_sac_run_continues_as_if_never_stopped(tmp_path):
    """SAC stopped after 400 steps and resumed to 600 (with its replay buffer) logs the same
    last row as a run of 600 steps in one go: the optimizers, the temperature, the target
    networks, the replay and the environments all came back."""
    replay = "runner.checkpoint_replay=True"
    straight = rl_suite.train(_tiny_qpg("pendulum-sac", 600, replay), tmp_path / "straight")
    run_dir = rl_suite.train(_tiny_qpg("pendulum-sac", 400, replay), tmp_path / "resumed")
    params = json.loads((run_dir / "params.json").read_text())
    params["config"]["steps"] = 600  # one more log interval
    (run_dir / "params.json").write_text(json.dumps(params))
    rl_suite.resume(run_dir)
    rows, expected = _rows(run_dir), _rows(straight)
    assert [int(r["CumSteps"]) for r in rows] == [0, 200, 400, 600]
    timeless = [key for key in expected[-1] if "Time" not in key and "PerSecond" not in key]
    assert {key: rows[-1][key] for key in timeless} == {key: expected[-1][key] for key in timeless}


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_non_finite_rewards_stop_the_run_with_one_line_naming_them(
    tmp_path, capsys, monkeypatch, algo
):
    """Rewards turn NaN after 300 steps: one line naming the reward, the iteration and the
    environment; no checkpoint is written with NaN weights (PPO used to fail sampling from a
    NaN policy, DQN to finish with every weight NaN)."""
    monkeypatch.syspath_prepend(os.path.dirname(__file__))  # (crashing_env)
    env = "crashing_env:NanRewardCartPole-v1"
    args = ["train", algo, "--env", env, "--set", "env_kwargs.nan_at=300", "--steps", "8000"]
    assert main([*args, "--log-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the environment ({env}) returned a non-finite reward" in err[0]
    checkpoint = tmp_path / "run_0" / "params.pt"
    if checkpoint.exists():
        weights = torch.load(checkpoint, weights_only=True)["agent_state_dict"]
        tensors = [weights]
        while any(isinstance(t, dict) for t in tensors):  # (DQN's: model and target)
            tensors = [v for t in tensors for v in (t.values() if isinstance(t, dict) else [t])]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()]
        assert tensors and all(torch.isfinite(t).all() for t in tensors)
