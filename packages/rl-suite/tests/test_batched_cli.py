"""The batched path from the command line: ``torch:`` and ``vec:`` environments with
``--num-envs``, trained by ``BatchedSampler`` + ``OnPolicyRunner`` with the ``batched``
preset (PPO in rsl_rl's style); short real runs in-process, and the refusals that come
before anything starts."""

import csv

import gymnasium
import pytest
import torch

import rl_suite
from rl_suite._cli import main
from rl_suite._config import default_preset


def _rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def _train(tmp_path, env, num_envs, steps, *more):
    args = ["train", "ppo", "--env", env, "--num-envs", str(num_envs), "--steps", str(steps)]
    return main([*args, "--log-dir", str(tmp_path), *more])


@pytest.mark.parametrize("env", ["torch:cartpole", "vec:CartPole-v1"])
def test_batched_cartpole_trains_evaluates_and_resumes(tmp_path, capsys, env):
    # 16 envs x 24 steps = 384 steps per iteration; a row every 2 iterations.
    assert _train(tmp_path, env, 16, 1536, "--set", "runner.log_interval_steps=768") == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "run_0"
    assert "preset: batched" in out and f"run directory: {run_dir}" in out
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [768, 1536]
    assert float(_rows(run_dir)[-1]["ReturnAverage"]) > 0
    config = rl_suite.load_config(run_dir)
    assert config["sampler"]["kind"] == "batched" and config["sampler"]["batch_B"] == 16
    assert config["algo_kwargs"]["desired_kl"] == 0.01 and not config["runner"]["evaluate"]
    # Evaluation plays one gymnasium CartPole-v1 (the dynamics torch:cartpole follows).
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert "mean return over 2 episodes" in capsys.readouterr().out
    # A run stopped early resumes from its checkpoint up to its steps.
    params = run_dir / "params.json"
    params.write_text(params.read_text().replace('"steps": 1536', '"steps": 2304'))
    assert main(["resume", str(run_dir)]) == 0
    assert [int(r["CumSteps"]) for r in _rows(run_dir)] == [768, 1536, 2304]


def test_torch_pendulum_trains_a_gaussian_policy(tmp_path):
    sets = ["--set", "env_kwargs.max_episode_steps=50", "--set", "runner.log_interval_steps=960"]
    assert _train(tmp_path, "torch:pendulum", 8, 1920, *sets) == 0
    rows = _rows(tmp_path / "run_0")
    assert int(rows[-1]["CumSteps"]) == 1920 and float(rows[-1]["LengthAverage"]) == 50
    assert rl_suite.load_config(tmp_path / "run_0")["env_kwargs"] == {"max_episode_steps": 50}


@pytest.mark.parametrize("env", ["vec:CartPole-v1", "vec:Pendulum-v1"])
def test_vector_env_returns_in_the_log_are_the_envs_own(tmp_path, monkeypatch, env):
    """gymnasium's own episode statistics of the very env the run stepped (its
    RecordEpisodeStatistics wrapper) give the log's return and length columns."""
    made = []
    make_vec = gymnasium.make_vec

    def recording_make_vec(*args, **kwargs):
        made.append(gymnasium.wrappers.vector.RecordEpisodeStatistics(make_vec(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(gymnasium, "make_vec", recording_make_vec)
    # 4 envs x 24 steps x 20 iterations: 2 whole Pendulum episodes (200 steps) per env.
    assert _train(tmp_path, env, 4, 1920, "--set", "runner.log_interval_steps=1920") == 0
    (vector_env,) = [e for e in made if e.num_envs == 4]  # (the others: one-env probes)
    returns, lengths = list(vector_env.return_queue), list(vector_env.length_queue)
    assert len(returns) >= 8  # (the queues keep the last 100, as the run's window does)
    (row,) = _rows(tmp_path / "run_0")
    assert float(row["ReturnAverage"]) == pytest.approx(sum(returns) / len(returns), rel=1e-5)
    assert float(row["ReturnMin"]) == pytest.approx(min(returns), rel=1e-5)
    assert float(row["ReturnMax"]) == pytest.approx(max(returns), rel=1e-5)
    assert float(row["LengthAverage"]) == pytest.approx(sum(lengths) / len(lengths))


def test_a_critic_observation_gives_an_asymmetric_agent(tmp_path):
    sets = ["env_kwargs.observation=positions", "env_kwargs.critic_observation=full"]
    sets = [arg for s in sets for arg in ("--set", s)]
    fix = ["--set", "algo_kwargs.clip_grad_separately=False"]
    assert _train(tmp_path, "torch:cartpole", 8, 384, *sets, *fix, "--dry-run") == 0
    config = rl_suite.make_config("batched", env="torch:cartpole", steps=384)
    config = rl_suite.apply_overrides(config, [*sets[1::2], fix[1], "sampler.batch_B=8"])
    runner = rl_suite.build(config)
    assert type(runner.agent).__name__ == "AsymmetricCategoricalPgAgent"
    assert type(runner).__name__ == "OnPolicyRunner"


def test_dry_run_shows_the_batched_configuration(tmp_path, capsys):
    assert _train(tmp_path, "torch:cartpole", 64, 20_000, "--dry-run") == 0
    out = capsys.readouterr().out
    assert '"kind": "batched"' in out and '"batch_B": 64' in out and '"batch_T": 24' in out
    assert '"hidden_nonlinearity": "ELU"' in out and "would log to" in out
    assert not (tmp_path / "run_0").exists()
    assert default_preset("ppo", "vec:Acrobot-v1") == default_preset("ppo", "torch:x") == "batched"


CUDA_REFUSAL = [] if torch.cuda.is_available() else [(["--device", "cuda"], "torch sees 0 GPU")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        *CUDA_REFUSAL,
        (["--env", "torch:foo"], "unknown torch environment 'torch:foo'; there are torch:cartpole"),
        (["--env", "vec:Nope-v0"], "cannot make environment 'vec:Nope-v0'"),
        (["--preset", "cartpole"], "set sampler.kind=batched, or use the 'batched' preset"),
        (["--env", "CartPole-v1", "--sampler", "batched"], "write vec:CartPole-v1"),
        (["--workers", "2"], "set sampler.workers=None"),
        (["--set", "runner.evaluate=True"], "without workers or evaluation: set runner.evaluate"),
        (["--processes", "2"], "set runner.processes=1"),
        (["--set", "agent.model_kwargs.hidden_nonlinearity=Foo"], "torch.nn activation"),
        (["--set", "env_kwargs.critic_observation=full"], "clip_grad_separately"),
    ],
)
def test_bad_batched_requests_fail_before_anything_starts(tmp_path, capsys, args, message):
    base = ["train", "ppo", "--log-dir", str(tmp_path), "--env", "torch:cartpole"]
    assert main([*base, "--num-envs", "4", *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run_0").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ppo", "--env", "ale:pong", "--preset", "atari"], "or use the 'atari-batched' preset"),
        (
            ["a2c", "--env", "ale:pong"],
            "the presets for batched envs are ppo's, none is made for a2c",
        ),
        (["a2c", "--env", "torch:cartpole", "--preset", "cartpole-a2c"], "none is made for a2c"),
    ],
)
def test_a_batched_env_on_another_sampler_is_pointed_to_a_preset_that_fits(capsys, args, message):
    """``ale:`` games get the ``atari-batched`` preset (``batched`` would make 4096 games),
    and no algorithm is sent to a preset made for another."""
    assert main(["train", *args, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "set sampler.kind=batched" in err and message in err
    assert "--preset batched" not in err


def test_only_on_policy_algorithms_train_batched_envs(capsys):
    assert main(["train", "dqn", "--env", "torch:cartpole", "--dry-run"]) == 2
    assert "batched environments train ppo or a2c, not dqn" in capsys.readouterr().err


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize(("env", "num_envs"), [("torch:cartpole", 4096), ("vec:CartPole-v1", 64)])
def test_batched_envs_train_on_the_gpu(tmp_path, env, num_envs):
    """torch: envs step on the GPU, vec: envs on the CPU with the agent on the GPU."""
    steps = 2 * 24 * num_envs
    assert _train(tmp_path, env, num_envs, steps, "--device", "cuda") == 0
    assert int(_rows(tmp_path / "run_0")[-1]["CumSteps"]) == steps


@pytest.mark.parametrize(
    "threads", ["env_kwargs.vector_kwargs={'num_threads': 1}", "env_kwargs.num_threads=1"]
)
def test_atari_on_ales_vector_env_trains_ppo_with_the_atari_model(tmp_path, threads):
    """ale:pong: Pong on ale-py's vector env, AtariEnv's frames (PPO's Atari model trains on
    it), the raw game score logged beside the clipped return; eval plays one atari:pong,
    without the settings AtariEnv does not take (ALE's threads, either way they were set)."""
    pytest.importorskip("ale_py.vector_env")
    config = rl_suite.make_config("atari", env="ale:pong", steps=32, seed=0)
    short = ["sampler.kind=batched", "sampler.batch_T=8", "sampler.batch_B=2"]
    short += ["sampler.max_decorrelation_steps=0", "runner.evaluate=False"]
    short += ["runner.log_interval_steps=16", "algo_kwargs.epochs=1", "algo_kwargs.minibatches=1"]
    short += ["env_kwargs.horizon=6", threads]
    config = rl_suite.apply_overrides(config, short)
    runner = rl_suite.build(config)
    assert type(runner.agent).__name__ == "AtariFfAgent"
    assert type(runner).__name__ == "OnPolicyRunner"
    run_dir = rl_suite.train(config, tmp_path)
    rows = _rows(run_dir)
    assert [int(r["CumSteps"]) for r in rows] == [16, 32]
    assert float(rows[-1]["LengthAverage"]) == 6  # (the horizon: no game of Pong is shorter)
    assert float(rows[-1]["GameScoreAverage"]) <= 0 and float(rows[-1]["ReturnAverage"]) <= 0
    # Evaluation plays the single-env equivalent (AtariEnv), without the vector's settings.
    (info,) = rl_suite.evaluate(run_dir, episodes=1)
    assert info.Length == 6 and info.GameScore == info.Return
