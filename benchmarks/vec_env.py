"""Vectorised environments: PPO on thousands of batched torch CartPoles, rl-suite against
rsl_rl, environment steps per second of training.

    python benchmarks/vec_env.py                  # 4096 envs, 2 warm-up + 50 timed iterations
    python benchmarks/vec_env.py --quick          # 256 envs, 1 + 3 iterations; checks it works
    python benchmarks/vec_env.py --envs 8192 --iterations 20 --threads 2 --seeds 2
    python benchmarks/vec_env.py --device cuda    # environments and networks on the GPU

Both libraries train PPO on the same environment, ``rl_samplers.TorchCartPole`` (gymnasium's
CartPole-v1 dynamics written in torch: one ``step`` advances every environment in a few tensor
operations, a done environment resets inside it), with the same network and the same PPO
settings. We time a fixed number of training iterations (rollout of ``batch_T`` steps of every
environment, then the update) after a warm-up and report env steps/s. The issue's target:
ours at least 1.2 x rsl_rl's.

The action formulation
----------------------

CartPole's action is discrete (0 pushes left, 1 pushes right), but rsl_rl (``rsl-rl-lib`` 5.x)
has no categorical policy: its output distributions are ``GaussianDistribution``,
``HeteroscedasticGaussianDistribution`` and ``BetaDistribution``, all continuous. So both sides
get the same continuous formulation: a diagonal Gaussian policy over ONE real-valued action,
which the environment thresholds, ``a > 0`` pushing right and ``a <= 0`` pushing left
(``ContinuousCartPole`` below, a ``BatchEnv`` around ``TorchCartPole`` with the action space
``FloatBox(-inf, inf, (1,))``). rl-suite steps that ``BatchEnv`` through its
``BatchedSampler``; rsl_rl steps the very same object through ``RslRlCartPole``, a thin adapter
that gives it rsl_rl's ``VecEnv`` interface (observations as a ``TensorDict`` with one group,
``"policy"``, given to both actor and critic; ``dones`` = terminated or truncated;
``extras["time_outs"]`` = truncated and not terminated; the running episode length as
``episode_length_buf``). The adapter is registered as a virtual subclass of rsl_rl's
``VecEnv`` after checking that it has every member the installed version declares.

Settings, the same on both sides
--------------------------------

Given as rl-suite's argument, then rsl_rl's ``train_cfg`` entry:

- rollout: 24 steps of every environment per iteration, ``BatchedSampler(make_env,
  batch_T=24, batch_B=4096)`` / ``num_steps_per_env=24`` on the ``VecEnv`` of 4096 envs;
- policy: an MLP, hidden [256, 128, 64] with ELU, linear output for the mean of a Gaussian
  whose log std is one learned parameter, initially 0 (std 1): ``MujocoFfAgent`` (a
  ``GaussianPgAgent``) with ``MujocoFfModel(hidden_sizes=[256, 128, 64],
  hidden_nonlinearity=ELU, mu_nonlinearity=None, init_log_std=0)`` / actor ``MLPModel``
  (``hidden_dims=[256, 128, 64]``, ``activation="elu"``) with ``GaussianDistribution
  (init_std=1.0, std_type="log")``;
- value function: a separate MLP of the same sizes and activation (ours keeps the pair's
  weights stacked: small batches run as one batched MLP, CPU batches of 1,024 rows or more as
  the two MLPs in cache-sized chunks of rows) / critic ``MLPModel``; torch.nn.Linear's
  default initialisation on both (rsl_rl initialises nothing else for a Gaussian);
- PPO: 5 epochs x 4 minibatches of single steps (``epochs``, ``minibatches`` /
  ``num_learning_epochs``, ``num_mini_batches``); ratio clip 0.2 and value clip 0.2
  (``ratio_clip``, ``value_clip`` / ``clip_param``, ``use_clipped_value_loss=True``);
  discount 0.99, GAE lambda 0.95; entropy bonus 0.01;
- value loss: ``value_loss_coeff=2.0`` on ``0.5 * (v - R)^2`` / ``value_loss_coef=1.0`` on
  ``(v - R)^2``: the same loss;
- Adam at 1e-3, adapted to the KL: ``desired_kl=0.01, linear_lr_schedule=False`` /
  ``schedule="adaptive", desired_kl=0.01`` (both divide the rate by 1.5 above twice the
  target, multiply it by 1.5 below half of it, within [1e-5, 1e-2], at every minibatch);
- gradient norm clipped at 1.0, the policy's and the value function's each on its own
  (``clip_grad_separately=True`` / rsl_rl's ``clip_grad_norm_`` on the actor, then the critic);
- advantages normalised over the whole batch: ``normalize_advantage=True`` /
  ``normalize_advantage_per_mini_batch=False`` (its default);
- no observation normalisation (``normalize_observation=False`` / ``obs_normalization=False``).

Both sides' networks have the same number of parameters (printed per run). What still differs, each
side keeping its own way:

- time limits (500 steps): ours records the time-out in ``env_info`` and uses the time-limit
  form of GAE (the time-out step's return is its own value, and the step is left out of the
  loss); rsl_rl adds ``gamma * V(s_t)`` to the reward of a time-out step and trains on it;
- minibatches: ours draws a new random split of the batch at every epoch, rsl_rl draws one per
  update and reuses it for all 5 epochs;
- advantage normalisation: ours over the valid steps (time-outs left out), std floored at
  1e-6; rsl_rl over every step, std + 1e-8;
- Adam: ours runs torch's ``fused`` implementation (rl-algos' default), rsl_rl torch's default
  (``foreach``): the same update;
- random streams (seeds) differ, so the runs differ step by step;
- per step, rsl_rl checks the observations, rewards and dones for NaN (its default,
  ``check_for_nan=True``) and builds a ``TensorDict`` of the observation (its interface).

What runs and what is measured
------------------------------

Each run is its own fresh process, started with ``spawn``: a new interpreter that sets
``torch.set_num_threads`` first (1 by default, ``--threads``), then imports its own library
and the environment (both import ``rl_samplers`` for ``TorchCartPole``; the rsl_rl run imports
nothing else of rl-suite). The training's console output goes to /dev/null.

- rl-suite: ``rl_runners.OnPolicyRunner(PPO, MujocoFfAgent, BatchedSampler)`` inside a
  ``logger_context`` on a temporary directory (a ``progress.csv`` row every iteration, no
  snapshots); ``learn(warm-up)`` (startup included), then ``learn(iterations)`` timed.
- rsl_rl: ``rsl_rl.runners.OnPolicyRunner(env, train_cfg, log_dir, device)`` logging into a
  temporary directory (TensorBoard scalars and a console report every iteration, a checkpoint
  after its first iteration and at the end of each ``learn``); ``learn(warm-up)``, then
  ``learn(iterations)`` timed. Its logger would also record the ``git status`` and ``git
  diff`` of the repository holding rsl_rl (found by searching upwards, so this repository when
  rsl_rl lives in its ``.venv`` or ``.nox``): the benchmark empties that list, so no git
  command runs.

steps/s = iterations x batch_T x envs / seconds of the timed ``learn`` (``perf_counter``, after
``torch.cuda.synchronize`` on a GPU), the same on both sides; the startup and the warm-up are
left out. The return is the mean of the last 100 episodes completed during training (ours:
``ReturnAverage`` of the last ``progress.csv`` row, its trajectory window of 100; rsl_rl: its
logger's ``rewbuffer``, the last 100), printed with the final learning rate and action std so
that equal learning is visible (CartPole-v1's maximum is 500). With ``--seeds N`` each library
runs once per seed (``--first-seed`` on), alternately first; the ratio uses the summed steps over the summed
seconds. The load average printed before and after says whether the machine was quiet:
compare only quiet runs.

``--quick``: 256 envs, 1 warm-up and 3 timed iterations per run, one seed; it checks that the
benchmark still works, and its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

# The environment, shared by both runs: every spawned run re-imports this module, so it holds
# only what both need (torch and rl_samplers' environments); each library is imported inside
# its own run.
from rl_samplers import BatchedSampler, BatchEnv, FloatBox, TorchCartPole

SPEED_TARGET = 1.2  # ours / rsl_rl, env steps/s
STEPS_PER_ENV = 24  # batch_T / num_steps_per_env
EPOCHS = 5
MINIBATCHES = 4
DISCOUNT = 0.99
GAE_LAMBDA = 0.95
RATIO_CLIP = 0.2  # rsl_rl's clip_param clips the value too: the same value_clip for ours
ENTROPY_COEF = 0.01
VALUE_LOSS_COEF = 1.0  # rsl_rl's, on (v - R)^2; ours is twice it, on 0.5 * (v - R)^2
LEARNING_RATE = 1e-3
DESIRED_KL = 0.01
MAX_GRAD_NORM = 1.0
HIDDEN = (256, 128, 64)
INIT_STD = 1.0  # ours: log std 0
RETURN_WINDOW = 100  # episodes behind the reported return (both sides' default window)


@dataclass(frozen=True)
class Settings:
    envs: int
    iterations: int  # timed
    warmup: int  # iterations before the timed ones (after the startup)
    threads: int
    device: str
    hidden: tuple[int, ...]
    compile: bool = False  # ours only: compiled updates (on the CPU with aot_eager)

    @property
    def batch_steps(self) -> int:
        return STEPS_PER_ENV * self.envs


@dataclass(frozen=True)
class Run:
    library: str
    seed: int
    threads: int  # torch.get_num_threads() in the run's process
    parameters: int  # of the policy and value networks together
    steps: int  # env steps in the timed iterations
    seconds: float
    mean_return: float  # of the last RETURN_WINDOW episodes completed during training
    learning_rate: float  # at the end (both adapt it)
    action_std: float  # at the end

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


# ---------------------------------------------------------------------------- the environment


def push_right(action: torch.Tensor) -> torch.Tensor:
    """CartPole's discrete action from the policy's one real-valued action ``[B, 1]``: 1 (push
    right) where it is positive, else 0 (push left)."""
    return (action[..., 0] > 0).to(torch.int64)


class ContinuousCartPole(BatchEnv):
    """``TorchCartPole`` driven by one real-valued action per environment (see
    ``push_right``): the environment both libraries train on."""

    def __init__(self, num_envs: int, device: Any = "cpu", seed: int | None = None):
        self.cartpole = TorchCartPole(num_envs, device=device, seed=seed)
        self.num_envs, self.device = self.cartpole.num_envs, self.cartpole.device
        self.max_episode_steps = self.cartpole.max_episode_steps
        self.observation_space = self.cartpole.observation_space
        self.action_space = FloatBox(-np.inf, np.inf, shape=(1,))

    def seed(self, seed: int | None) -> None:
        self.cartpole.seed(seed)

    def reset(self) -> torch.Tensor:
        return self.cartpole.reset()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.cartpole.step(push_right(action))


class RslRlCartPole:
    """rsl_rl's ``VecEnv`` interface over a ``ContinuousCartPole`` (registered as a virtual
    subclass of ``rsl_rl.env.VecEnv`` by ``check_vec_env``; not a subclass here, so that
    rl-suite's run never imports rsl_rl)."""

    OBS_GROUP = "policy"

    def __init__(self, env: ContinuousCartPole):
        from tensordict import TensorDict

        self._TensorDict = TensorDict
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = 1
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.cfg: dict[str, Any] = {}
        self._observations = self._group(env.reset())

    def _group(self, observation: torch.Tensor) -> Any:
        return self._TensorDict(
            {self.OBS_GROUP: observation}, batch_size=[self.num_envs], device=self.device
        )

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """The steps of each environment's current episode (its time-limit counter)."""
        return self.env.cartpole.elapsed

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:  # learn(init_at_random_ep_len)
        self.env.cartpole.elapsed = value.to(torch.int64)

    def get_observations(self) -> Any:
        return self._observations

    def reset(self) -> tuple[Any, dict[str, Any]]:
        self._observations = self._group(self.env.reset())
        return self._observations, {}

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict]:
        observation, reward, terminated, truncated = self.env.step(actions)
        self._observations = self._group(observation)
        dones = (terminated | truncated).to(torch.int64)
        return self._observations, reward, dones, {"time_outs": truncated & ~terminated}


def check_vec_env(adapter: type) -> None:
    """Register ``adapter`` as an rsl_rl ``VecEnv`` once it has every member the installed
    rsl_rl declares (its annotated attributes and abstract methods)."""
    from rsl_rl.env import VecEnv

    declared = set(getattr(VecEnv, "__annotations__", {})) | set(VecEnv.__abstractmethods__)
    probe = adapter(ContinuousCartPole(1))
    missing = sorted(name for name in declared if not hasattr(probe, name))
    if missing:
        raise RuntimeError(
            f"this rsl_rl's VecEnv declares {', '.join(missing)}, which {adapter.__name__} "
            "lacks: its interface changed, update the adapter"
        )
    VecEnv.register(adapter)


# ---------------------------------------------------------------------------------- the runs


def set_threads(threads: int) -> int:
    """``torch.set_num_threads(threads)`` unless 0 (torch's default); the count in effect."""
    if threads > 0:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def quiet_stdout() -> None:
    """Send this process's stdout (the trainings' console logs) to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def count_parameters(modules: list[torch.nn.Module]) -> int:
    return sum(p.numel() for module in modules for p in module.parameters())


def run_ours(settings: Settings, seed: int) -> Run:
    threads = set_threads(settings.threads)
    import functools

    from rl_agents import MujocoFfAgent
    from rl_algos import PPO
    from rl_runners import OnPolicyRunner, logger_context

    device = torch.device(settings.device)
    sampler = BatchedSampler(
        functools.partial(ContinuousCartPole, device=device),
        batch_T=STEPS_PER_ENV,
        batch_B=settings.envs,
    )
    agent = MujocoFfAgent(
        model_kwargs=dict(
            hidden_sizes=list(settings.hidden),
            hidden_nonlinearity=torch.nn.ELU,
            mu_nonlinearity=None,
            init_log_std=float(np.log(INIT_STD)),
            normalize_observation=False,
        )
    )
    algo = PPO(
        discount=DISCOUNT,
        learning_rate=LEARNING_RATE,
        value_loss_coeff=2 * VALUE_LOSS_COEF,
        entropy_loss_coeff=ENTROPY_COEF,
        clip_grad_norm=MAX_GRAD_NORM,
        clip_grad_separately=True,
        gae_lambda=GAE_LAMBDA,
        minibatches=MINIBATCHES,
        epochs=EPOCHS,
        ratio_clip=RATIO_CLIP,
        linear_lr_schedule=False,
        normalize_advantage=True,
        desired_kl=DESIRED_KL,
        value_clip=RATIO_CLIP,
        # On the CPU, inductor needs a C++ compiler and minutes: aot_eager checks the path.
        compile=settings.compile and (device.type != "cpu" or {"backend": "aot_eager"}),
    )
    affinity = {"cuda_idx": device.index or 0} if device.type == "cuda" else None
    runner = OnPolicyRunner(
        algo,
        agent,
        sampler,
        n_steps=(settings.warmup + settings.iterations) * settings.batch_steps,
        seed=seed,
        affinity=affinity,
        log_interval_steps=settings.batch_steps,  # a row every iteration, as rsl_rl logs
        log_traj_window=RETURN_WINDOW,
    )
    quiet_stdout()
    with (
        tempfile.TemporaryDirectory(prefix="vec-env-bench-", ignore_cleanup_errors=True) as log_dir,
        runner,
        logger_context(log_dir, seed, "vec_env", snapshot_mode="none") as run_dir,
    ):
        runner.learn(settings.warmup)
        synchronize(settings.device)
        start = time.perf_counter()
        runner.learn(settings.iterations)
        synchronize(settings.device)
        seconds = time.perf_counter() - start
        with open(Path(run_dir) / "progress.csv", newline="") as f:
            last = list(csv.DictReader(f))[-1]
    total = (settings.warmup + settings.iterations) * settings.batch_steps
    if int(last["CumSteps"]) != total:
        raise RuntimeError(f"rl-suite trained {last['CumSteps']} steps, not {total}")
    return Run(
        library="rl-suite",
        seed=seed,
        threads=threads,
        parameters=count_parameters([agent.model]),
        steps=settings.iterations * settings.batch_steps,
        seconds=seconds,
        mean_return=float(last["ReturnAverage"]),
        learning_rate=float(algo.optimizer.param_groups[0]["lr"]),
        action_std=float(agent.model.log_std.detach().exp().mean()),
    )


def rsl_rl_config(settings: Settings) -> dict[str, Any]:
    """rsl_rl's ``train_cfg`` with the settings above (rsl-rl-lib 5.x layout)."""
    mlp = {
        "class_name": "rsl_rl.models:MLPModel",
        "hidden_dims": list(settings.hidden),
        "activation": "elu",
        "obs_normalization": False,
    }
    return {
        "num_steps_per_env": STEPS_PER_ENV,
        "save_interval": 10**9,  # a checkpoint after the first iteration and at each learn's end
        "obs_groups": {"actor": [RslRlCartPole.OBS_GROUP], "critic": [RslRlCartPole.OBS_GROUP]},
        "logger": "tensorboard",
        "actor": {
            **mlp,
            "distribution_cfg": {
                "class_name": "rsl_rl.modules:GaussianDistribution",
                "init_std": INIT_STD,
                "std_type": "log",
            },
        },
        "critic": dict(mlp),
        "algorithm": {
            "class_name": "rsl_rl.algorithms:PPO",
            "num_learning_epochs": EPOCHS,
            "num_mini_batches": MINIBATCHES,
            "clip_param": RATIO_CLIP,
            "gamma": DISCOUNT,
            "lam": GAE_LAMBDA,
            "value_loss_coef": VALUE_LOSS_COEF,
            "entropy_coef": ENTROPY_COEF,
            "learning_rate": LEARNING_RATE,
            "max_grad_norm": MAX_GRAD_NORM,
            "optimizer": "adam",
            "use_clipped_value_loss": True,
            "schedule": "adaptive",
            "desired_kl": DESIRED_KL,
            "normalize_advantage_per_mini_batch": False,
            "use_mixed_precision": False,
        },
    }


def run_rsl_rl(settings: Settings, seed: int) -> Run:
    threads = set_threads(settings.threads)
    from rsl_rl.runners import OnPolicyRunner

    check_vec_env(RslRlCartPole)
    torch.manual_seed(seed)
    env = RslRlCartPole(ContinuousCartPole(settings.envs, device=settings.device, seed=seed))
    quiet_stdout()
    with tempfile.TemporaryDirectory(
        prefix="vec-env-bench-", ignore_cleanup_errors=True
    ) as log_dir:
        runner = OnPolicyRunner(env, rsl_rl_config(settings), log_dir, settings.device)
        runner.logger.git_status_repos.clear()  # no git status / diff of whatever repo holds it
        runner.learn(settings.warmup)
        synchronize(settings.device)
        start = time.perf_counter()
        runner.learn(settings.iterations)
        synchronize(settings.device)
        seconds = time.perf_counter() - start
        runner.logger.stop_logging_writer()
        writer = runner.logger.writer
        if writer is not None and hasattr(writer, "close"):
            writer.close()
    total = (settings.warmup + settings.iterations) * settings.batch_steps
    if runner.logger.tot_timesteps != total:
        raise RuntimeError(f"rsl_rl trained {runner.logger.tot_timesteps} steps, not {total}")
    returns = list(runner.logger.rewbuffer)
    actor = runner.alg.get_policy()
    return Run(
        library="rsl_rl",
        seed=seed,
        threads=threads,
        parameters=count_parameters([actor, runner.alg.critic]),
        steps=settings.iterations * settings.batch_steps,
        seconds=seconds,
        mean_return=statistics.fmean(returns) if returns else float("nan"),
        learning_rate=float(runner.alg.learning_rate),
        action_std=float(actor.distribution.log_std_param.detach().exp().mean()),
    )


def in_fresh_process(func: Callable[..., Any], *args: object) -> Any:
    """Run func in a new interpreter (spawn), alone: it imports what it needs itself."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


# ---------------------------------------------------------------------------------- printing


def print_load(when: str) -> None:
    """Another process on the machine slows every figure: compare only quiet runs."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)


def print_runs(runs: list[Run]) -> None:
    print("\n(a) each run (return: mean of the last 100 training episodes; lr, std: at the end)")
    header = (
        f"{'library':<10}{'seed':>5}{'threads':>8}{'params':>9}{'env steps':>12}{'seconds':>9}"
        f"{'steps/s':>10}{'return':>8}{'lr':>10}{'std':>7}"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        print(
            f"{run.library:<10}{run.seed:>5}{run.threads:>8}{run.parameters:>9,}{run.steps:>12,}"
            f"{run.seconds:>9.2f}{run.steps_per_s:>10,.0f}{run.mean_return:>8.1f}"
            f"{run.learning_rate:>10.2e}{run.action_std:>7.3f}"
        )


def print_ratio(runs: list[Run]) -> None:
    sides = [[r for r in runs if r.library == name] for name in ("rl-suite", "rsl_rl")]
    rates = [sum(r.steps for r in side) / sum(r.seconds for r in side) for side in sides]
    returns = [statistics.fmean(r.mean_return for r in side) for side in sides]
    ratio = rates[0] / rates[1]
    print("\n(b) rl-suite / rsl_rl")
    header = (
        f"{'ours steps/s':>13}{'rsl_rl steps/s':>16}{'ratio':>7}{'target':>9}  {'':<8}"
        f"{'ours return':>12}{'rsl_rl return':>15}"
    )
    print(header)
    print("-" * len(header))
    print(
        f"{rates[0]:>13,.0f}{rates[1]:>16,.0f}{ratio:>7.2f}{f'>= {SPEED_TARGET:g}':>9}  "
        f"{'met' if ratio >= SPEED_TARGET else 'NOT met':<8}{returns[0]:>12.1f}{returns[1]:>15.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds: checks it still works")
    parser.add_argument("--envs", type=int, help="environments (default 4096; 256 with --quick)")
    parser.add_argument(
        "--iterations", type=int, help="timed iterations (default 50; 3 with --quick)"
    )
    parser.add_argument(
        "--warmup", type=int, help="iterations before the timed ones (default 2; 1 with --quick)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads in each run, 0: torch's default (1)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--seeds", type=int, default=1, help="runs per library, seeds 0.. (1)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (0)")
    parser.add_argument(
        "--hidden", type=int, nargs="+", default=list(HIDDEN), help="hidden sizes (256 128 64)"
    )
    parser.add_argument(
        "--compile", action="store_true", help="ours with compiled updates (CUDA graphs on a GPU)"
    )
    args = parser.parse_args()
    settings = Settings(
        envs=args.envs if args.envs is not None else 256 if args.quick else 4096,
        iterations=args.iterations if args.iterations is not None else 3 if args.quick else 50,
        warmup=args.warmup if args.warmup is not None else 1 if args.quick else 2,
        threads=args.threads,
        device=args.device,
        hidden=tuple(args.hidden),
        compile=args.compile,
    )
    if settings.envs < 1 or settings.iterations < 1 or settings.warmup < 1:
        parser.error("--envs, --iterations and --warmup must be at least 1")
    if settings.batch_steps < MINIBATCHES:
        parser.error(f"--envs x {STEPS_PER_ENV} steps must hold {MINIBATCHES} minibatches")
    if args.threads < 0 or args.first_seed < 0 or args.seeds < 1 or min(settings.hidden) < 1:
        parser.error(
            "--threads and --first-seed must be at least 0, --seeds and --hidden sizes at least 1"
        )
    try:
        device = torch.device(settings.device)
    except RuntimeError as error:
        parser.error(f"--device: {error}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda[:N], got {settings.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if args.quick:
        print(
            "--quick: a few iterations of a few hundred environments; these numbers mean nothing."
        )
    print(
        f"PPO on TorchCartPole (one Gaussian action, thresholded at 0), {settings.envs:,} envs x "
        f"{STEPS_PER_ENV} steps = {settings.batch_steps:,} steps per iteration, {EPOCHS} epochs "
        f"x {MINIBATCHES} minibatches, MLPs {list(settings.hidden)} ELU, on {settings.device}"
        f"{', ours compiled' if settings.compile else ''}; "
        f"{settings.warmup} warm-up + {settings.iterations} timed iterations per run, each run "
        "in its own fresh process (spawn), one at a time.",
        flush=True,
    )
    print_load("before")
    runs: list[Run] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        order = [run_ours, run_rsl_rl] if seed % 2 == 0 else [run_rsl_rl, run_ours]
        for func in order:
            start = time.perf_counter()
            run = in_fresh_process(func, settings, seed)
            print(
                f"  seed {seed}: {run.library} timed {run.steps:,} steps in {run.seconds:.2f} s "
                f"({time.perf_counter() - start:.1f} s wall for the whole run)",
                flush=True,
            )
            runs.append(run)
    print_runs(runs)
    print_ratio(runs)
    print_load("after")


if __name__ == "__main__":
    main()
