"""Learning: DQN in rl-suite and in stable-baselines3, on CartPole-v1 and on Pong.

    python benchmarks/learning_dqn.py                  # both: ~25 min on a quiet 2-core machine
    python benchmarks/learning_dqn.py --task cartpole  # ~7 min; --task pong: ~16 min
    python benchmarks/learning_dqn.py --task pong --pong-steps 9600  # a shorter Pong run
    python benchmarks/learning_dqn.py --quick          # under a minute; checks it still works
    python benchmarks/learning_dqn.py --seeds 4 --threads 1 0  # 0: torch's default thread count

The DQN companion of ``learning.py`` (PPO): the same rules (each run its own fresh process, the
same hyperparameters on both sides, train time measured the same way on both sides), two tasks.
We report training speed, as env steps/s and updates/s, and on CartPole the return reached.
The issue's target: ours at least 1.5 x SB3's env steps/s and updates/s on both tasks.

CartPole-v1, vanilla DQN with rl-baselines3-zoo's settings for SB3's DQN on CartPole-v1, for
49,920 env steps (the zoo trains 50k: 195 whole batches of 256). SB3's DQN is vanilla; ours is
the ``cartpole-dqn`` preset (double DQN, dueling heads, 3-step returns) with those turned off.
The benchmark checks our built runner before it starts and stops if the preset no longer
holds a value below. Both sides:

- 8 environments; 256 env steps between trainings, then 128 gradient steps on batches of 64
  (SB3: a ``DummyVecEnv`` of 8, ``train_freq=32``, counted in calls to ``env.step``, so 256 env
  steps, ``gradient_steps=128``; the zoo's single environment with ``train_freq=256``. Ours:
  ``batch_B=8``, ``batch_T=32``, ``batch_size=64``, ``replay_ratio=32``: 32 x 256 / 64 = 128
  updates per iteration), 24,576 updates in all;
- learning starts after 1,000 env steps: SB3 trains after a collection once ``num_timesteps >
  learning_starts=1000``, i.e. first after 1,024 steps (4 collections); ours
  ``min_steps_learn=1000``: first at iteration 1000 // 256 = 3, after the same 1,024 steps;
  before that both act uniformly at random;
- replay of 100,000 transitions (12,500 per environment), uniform; discount 0.99, 1-step
  returns, no double DQN (the target network's max), no dueling, no prioritized replay;
- Huber loss with threshold 1 (SB3 ``smooth_l1_loss``, ours ``delta_clip=1``), mean over the
  batch; gradient norm clipped at 10; Adam at a constant 2.3e-3 with eps 1e-8 (SB3's DQN keeps
  torch's default; ours is set to it: its own default is rlpyt's 0.01 / batch size). Ours also
  keeps its default implementation, ``fused=True`` (SB3: torch's default on CPU, a loop over
  the parameters): the same update, in one kernel;
- Q-network: MLP of 4 -> 256 -> 256 -> 2 with ReLU, torch's default initialisation (SB3
  ``net_arch=[256, 256]``; ours ``hidden_sizes=[256, 256], dueling=False``);
- target network: SB3 copies it (``tau=1``) every ``target_update_interval=10`` env steps,
  counted per call to ``env.step`` as ``max(10 // n_envs, 1)`` = every call here (every call in
  the zoo's 1-env run too: 10 // 1 steps); those calls all come while collecting, when the
  online network does not change, so in effect the target is the online network as it was at
  the end of the previous training, fixed during the 128 updates of each training. Ours
  (``target_update_interval=128`` updates, ``target_update_tau=1``) copies after every 128th
  update, the last of each iteration's: the same targets for every update;
- exploration: epsilon falls linearly from 1 to 0.04 (ours ``eps_final=0.04``) and stays there:
  SB3 over the first ``exploration_fraction=0.16`` of the run (7,987 steps), updated after each
  ``env.step``, one random draw for all 8 environments at once; ours ``eps_steps=7987``: from
  iteration 3 (``min_itr_learn``) to iteration 7987 // 256 = 31 (7,936 steps), updated once per
  iteration, one draw per environment. Before 1,024 steps both act at random (SB3 ignores epsilon
  until ``learning_starts``), so the schedules differ only between 1k and 8k steps (SB3's epsilon
  is lower there: 0.88 at 1k, ours 0.97);
- time limit (500 steps): SB3's replay (``handle_timeout_termination``) bootstraps the truncated
  transition from the final observation; ours (``bootstrap_timelimit=True``, which the preset
  leaves off) leaves it out of the loss, since it does not store the final observation. One
  transition in 500; no terminal value is taught for it on either side.

Pong: DQN with the Nature CNN for a fixed number of steps, only for speed (returns after so few
steps mean nothing and are not reported). Ours: the ``atari-dqn`` preset (rlpyt's
configuration) on ``atari:pong`` with the serial sampler; SB3: a ``DummyVecEnv`` stepping the
same number of environments in the run's process. Both sides:

- 16 environments, 2 steps each (32 env steps) between trainings of 8 updates on batches of
  32 (ours: the preset's ``batch_B=16``, ``batch_T=2``, ``replay_ratio=8``; SB3:
  ``train_freq=2``, ``gradient_steps=8``): one update per 4 env steps, as ``train_freq=4,
  gradient_steps=1`` on one environment; 25,600 env steps (800 batches: ``--pong-steps``
  changes it), learning from 5,000 (ours ``min_steps_learn``, SB3 ``learning_starts``: both
  first train after 5,024 steps), 5,152 updates; replay of 100,000 transitions (the zoo's
  Atari ``buffer_size``; the preset's is 1M);
- observations: 4 stacked 104x80 grayscale frames, each the max of the last two of 4 skipped
  frames, up to 30 no-ops at reset, rewards clipped to their sign, no sticky actions, no FIRE at
  reset, 27,000 steps per game at most (Pong has no lives to lose). Ours: ``AtariEnv``. SB3:
  ``gymnasium.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0, obs_type=
  "grayscale")`` in ``AtariPreprocessing(frame_skip=4, screen_size=(80, 104), noop_max=30)``,
  SB3's ``ClipRewardEnv`` and ``FrameStackObservation(4)``, the fastest Atari pipeline
  gymnasium has (``benchmarks/samplers.py``), rather than ``make_atari_env`` (84x84 frames,
  RGB converted in Python). Both shrink the 210x160 screen with OpenCV's ``INTER_AREA``: ours
  crops two rows and halves it exactly, gymnasium resizes the whole screen;
- the Nature CNN (32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1, no padding, ReLU, fc 512,
  one Q-value per action; ours ``paddings=[0, 0, 0]``: the preset's default is rlpyt's
  ``[0, 1, 1]``, a twice larger fc input) on frames scaled by 1/255; the same layers on the
  same 104x80 frames (a 3,456-wide flattened input), torch's default initialisation;
- Adam 1e-4 with eps 1e-8 (ours fused, as above), Huber 1, gradient norm 10, discount 0.99,
  vanilla 1-step DQN, target copied every 312 updates (ours ``target_update_interval=312``;
  SB3 ``target_update_interval=1248`` env steps = 78 calls of ``env.step`` = 39 trainings of 8
  updates; SB3 counts from the run's start, so its windows sit one batch before ours);
  epsilon from 1 to 0.01 by 10,000 steps (ours from 5,024, as above; SB3 from 0), so that most
  of the run acts greedily, with a forward pass per step on both sides (SB3 skips the network
  when its one draw says "all random"). Ours stores each frame once
  (``frame_buffer``), SB3 whole stacked observations, twice (``optimize_memory_usage=False``,
  its default and the zoo's); ours runs no time-limit bootstrap (a frame buffer has none), SB3
  its default; no time limit is reached in this many steps.

What runs, per run, in a fresh process (``spawn``) that imports only its own library and sets
``torch.set_num_threads`` (1 by default, on both sides) before anything else:

- rl-suite: ``rl_suite.train(config)``, the trainer as a user runs it (console log to
  /dev/null; SB3 runs with ``verbose=0``). CartPole: an evaluation of 16 episodes before training
  and every 39 iterations (5 times), a checkpoint each time. Pong: no evaluation, no checkpoint,
  one row of ``progress.csv`` at the end.
- SB3: ``DQN("MlpPolicy" | "CnnPolicy", DummyVecEnv(...), device="cpu", ...)`` learning for
  exactly as many env steps as ours; the benchmark checks that both did as many updates. Its
  environments have no ``Monitor`` wrapper (``make_vec_env`` would add one; ours records
  episode returns as it goes): SB3 at its leanest.

Measured, the same way on both sides:

- train s: the time spent training, evaluations excluded. Ours: ``CumTrainTime`` of the last row
  of ``progress.csv`` (from the end of the runner's startup to the last row, less the
  evaluations), or ``CumTime (s)`` when the run evaluates nothing (Pong); SB3:
  ``time.perf_counter`` around ``model.learn``. env steps/s = env steps / train s.
- update s: the time inside the training calls, ``time.perf_counter`` around each: SB3's
  ``DQN.train`` (sample the replay, loss, step; the learning-rate schedule and the logger's
  records), ours ``DQN.optimize_agent`` on an algorithm whose replay buffer has already been
  given the iteration's samples (the benchmark appends them just before, outside the timer, as
  SB3 stores transitions while collecting: the same work in the same order). updates/s =
  updates / update s: the learner's speed alone; env steps/s is that of the whole loop.
- wall s: building and training (ours with its evaluations and checkpoints). Printed only.
- return (CartPole): after training, outside all timing, 20 whole episodes of CartPole-v1 played
  greedily (DQN's evaluation: ``eps_eval=0``; SB3 ``deterministic=True``) one after another in
  one environment seeded 12345: ours ``rl_suite.evaluate(run_dir, episodes=20,
  deterministic=True)`` on the last checkpoint; SB3 ``evaluate_policy(model, env,
  n_eval_episodes=20, deterministic=True)``. Mean and standard deviation of the 20.

The runs go one at a time, ours first for even seeds and SB3 first for odd ones (2 seeds on
CartPole and 1 on Pong by default). The ratios use the mean times over the seeds; the return
condition holds when ours' mean return is at least SB3's, or both reach CartPole-v1's reward
threshold (475). The load average printed before and after says whether the machine was quiet:
compare only quiet runs.

``--quick``: 1,280 CartPole steps (5 iterations, 256 updates), 2 evaluation episodes; 320 Pong
steps (16 updates); one seed each.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
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

# Nothing heavy at module level: each spawned run re-imports this module, and must import only
# its own library.

EVAL_SEED = 12345  # of the evaluations after training (rl_suite.evaluate's default seed)
REWARD_THRESHOLD = 475.0  # CartPole-v1's: "solved"
SPEED_TARGET = 1.5  # ours / SB3, env steps/s and updates/s
ADAM_EPS = 1e-8  # torch's default, SB3's DQN's

# ---------------------------------------------------------------------------------- settings

CARTPOLE_ID = "CartPole-v1"
CARTPOLE_PRESET = "cartpole-dqn"
# rl-baselines3-zoo's DQN on CartPole-v1 (hyperparams/dqn.yml).
CARTPOLE = dict(
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1_000,
    gamma=0.99,
    target_update_interval=10,  # env steps (SB3 counts calls of env.step: see the docstring)
    train_freq=256,  # env steps between trainings
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    net_arch=[256, 256],
    max_grad_norm=10.0,  # SB3's default
)
CARTPOLE_ENVS = 8
CARTPOLE_T = CARTPOLE["train_freq"] // CARTPOLE_ENVS  # 32 steps per environment per iteration

PONG_ENV = "atari:pong"
PONG_PRESET = "atari-dqn"
PONG_GYM_ID = "ALE/Pong-v5"
PONG_ENVS = 16  # the preset's batch_B
PONG_T = 2  # the preset's batch_T
PONG = dict(
    learning_rate=1e-4,
    batch_size=32,
    gamma=0.99,
    replay_ratio=8,  # ours: each transition replayed 8 times: one update of 32 per 4 steps
    target_update_updates=312,  # the preset's, in updates
    max_grad_norm=10.0,
    exploration_final_eps=0.01,
)
PONG_UPDATES_PER_ITR = PONG["replay_ratio"] * PONG_ENVS * PONG_T // PONG["batch_size"]  # 8
OBS_SIZE = (104, 80)  # (height, width): AtariEnv's default
FRAME_SKIP = 4
NUM_IMG_OBS = 4
NATURE_PADDINGS = [0, 0, 0]


@dataclass(frozen=True)
class CartPoleSizes:
    itrs: int  # iterations of CARTPOLE_ENVS x CARTPOLE_T steps
    log_interval_itrs: int
    eps_steps: int  # epsilon reaches its final value (the zoo: 0.16 of the run)
    eval_episodes: int
    seeds: int

    @property
    def steps(self) -> int:
        return self.itrs * CARTPOLE_ENVS * CARTPOLE_T


@dataclass(frozen=True)
class PongSizes:
    itrs: int  # iterations of PONG_ENVS x PONG_T steps
    learning_starts: int
    eps_steps: int  # epsilon reaches its final value
    replay_size: int
    seeds: int

    @property
    def steps(self) -> int:
        return self.itrs * PONG_ENVS * PONG_T


@dataclass(frozen=True)
class Sizes:
    cartpole: CartPoleSizes
    pong: PongSizes


FULL = Sizes(
    cartpole=CartPoleSizes(
        itrs=195, log_interval_itrs=39, eps_steps=7_987, eval_episodes=20, seeds=2
    ),
    pong=PongSizes(itrs=800, learning_starts=5_000, eps_steps=10_000, replay_size=100_000, seeds=1),
)
QUICK = Sizes(
    cartpole=CartPoleSizes(itrs=5, log_interval_itrs=5, eps_steps=1_024, eval_episodes=2, seeds=1),
    pong=PongSizes(itrs=10, learning_starts=256, eps_steps=288, replay_size=2_048, seeds=1),
)


@dataclass(frozen=True)
class Run:
    task: str
    library: str
    seed: int
    threads: int  # torch.get_num_threads() in the run's process
    steps: int  # environment steps trained
    updates: int  # gradient steps
    train_s: float  # evaluations excluded
    update_s: float  # inside the training calls
    wall_s: float
    returns: list[float]  # of the evaluation episodes after training (none on Pong)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.train_s

    @property
    def updates_per_s(self) -> float:
        return self.updates / self.update_s if self.update_s > 0 else float("nan")


def set_threads(threads: int) -> int:
    """``torch.set_num_threads(threads)`` unless 0 (torch's default); the count in effect."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


# ---------------------------------------------------------------------------------- rl-suite


def cartpole_config(sizes: CartPoleSizes, seed: int, threads: int) -> dict[str, Any]:
    """The ``cartpole-dqn`` preset made vanilla (what differs from the zoo's settings)."""
    import rl_suite

    config = rl_suite.make_config(CARTPOLE_PRESET, seed=seed, steps=sizes.steps)
    return rl_suite.apply_overrides(
        config,
        [
            f"torch_threads={threads or None}",  # 0: torch's default (the preset sets 1)
            "algo_kwargs.double_dqn=False",
            "algo_kwargs.n_step_return=1",
            "algo_kwargs.bootstrap_timelimit=True",
            f"algo_kwargs.eps_steps={sizes.eps_steps}",
            f"algo_kwargs.optim_kwargs={{'eps': {ADAM_EPS!r}, 'fused': True}}",
            f"agent.model_kwargs={{'hidden_sizes': {CARTPOLE['net_arch']}, 'dueling': False}}",
            f"sampler.batch_B={CARTPOLE_ENVS}",
            f"sampler.batch_T={CARTPOLE_T}",
            f"runner.log_interval_steps={sizes.log_interval_itrs * CARTPOLE_ENVS * CARTPOLE_T}",
        ],
    )


def pong_config(sizes: PongSizes, seed: int, threads: int) -> dict[str, Any]:
    """The ``atari-dqn`` preset, serial, sized for a short run, with the Nature CNN."""
    import rl_suite

    config = rl_suite.make_config(PONG_PRESET, env=PONG_ENV, seed=seed, steps=sizes.steps)
    return rl_suite.apply_overrides(
        config,
        [
            f"torch_threads={threads or None}",  # 0: torch's default
            "sampler.kind='serial'",
            "sampler.max_decorrelation_steps=0",
            f"sampler.batch_B={PONG_ENVS}",
            f"sampler.batch_T={PONG_T}",
            f"algo_kwargs.replay_size={sizes.replay_size}",
            f"algo_kwargs.min_steps_learn={sizes.learning_starts}",
            f"algo_kwargs.eps_steps={sizes.eps_steps}",
            f"algo_kwargs.optim_kwargs={{'eps': {ADAM_EPS!r}, 'fused': True}}",
            f"agent.model_kwargs={{'paddings': {NATURE_PADDINGS}}}",
            "runner.evaluate=False",
            "runner.snapshot_mode='none'",
            f"runner.log_interval_steps={sizes.steps}",
        ],
    )


def check_runner(task: str, config: dict[str, Any], expected_steps: int) -> None:
    """Build (and start nothing of) our runner; stop if it does not hold the settings of the
    docstring (a preset changed under the benchmark)."""
    import torch

    import rl_suite

    runner = rl_suite.build(config)
    algo, agent = runner.algo, runner.agent
    if task == "cartpole":
        want: dict[str, Any] = {
            "discount": CARTPOLE["gamma"],
            "batch_size": CARTPOLE["batch_size"],
            "learning_rate": CARTPOLE["learning_rate"],
            "replay_size": CARTPOLE["buffer_size"],
            "min_steps_learn": CARTPOLE["learning_starts"],
            "target_update_interval": CARTPOLE["gradient_steps"],
            "clip_grad_norm": CARTPOLE["max_grad_norm"],
            "bootstrap_timelimit": True,
        }
        ratio = CARTPOLE["gradient_steps"] * CARTPOLE["batch_size"] / CARTPOLE["train_freq"]
        model = {"hidden_sizes": CARTPOLE["net_arch"], "dueling": False}
        eps_final, B, T = CARTPOLE["exploration_final_eps"], CARTPOLE_ENVS, CARTPOLE_T
    else:
        want = {
            "discount": PONG["gamma"],
            "batch_size": PONG["batch_size"],
            "learning_rate": PONG["learning_rate"],
            "target_update_interval": PONG["target_update_updates"],
            "clip_grad_norm": PONG["max_grad_norm"],
            "frame_buffer": True,
        }
        ratio = PONG["replay_ratio"]
        model = {"paddings": NATURE_PADDINGS}
        eps_final, B, T = PONG["exploration_final_eps"], PONG_ENVS, PONG_T
    want.update(
        replay_ratio=ratio,
        n_step_return=1,
        double_dqn=False,
        prioritized_replay=False,
        delta_clip=1.0,
        target_update_tau=1,
        optim_kwargs={"eps": ADAM_EPS, "fused": True},
    )
    wrong = {
        name: getattr(algo, name) for name, value in want.items() if getattr(algo, name) != value
    }
    if type(algo).__name__ != "DQN" or algo.OptimCls is not torch.optim.Adam:
        wrong["algorithm"] = f"{type(algo).__name__} with {algo.OptimCls.__name__}"
    if (agent.eps_init, agent.eps_final) != (1.0, eps_final):
        wrong["epsilon"] = (agent.eps_init, agent.eps_final)
    if config["agent"]["model_kwargs"] != model:
        wrong["model_kwargs"] = config["agent"]["model_kwargs"]
    sampler = config["sampler"]
    if (sampler["kind"], sampler["batch_B"], sampler["batch_T"]) != ("serial", B, T):
        wrong["sampler"] = sampler
    if runner.n_itr * runner.itr_batch_size != expected_steps:
        wrong["steps"] = runner.n_itr * runner.itr_batch_size
    if config["device"] != "cpu":
        wrong["device"] = config["device"]
    if wrong:
        raise RuntimeError(f"our {task} configuration no longer matches this benchmark: {wrong}")


def plan(sizes: Sizes, tasks: list[str]) -> None:
    if "cartpole" in tasks:
        config = cartpole_config(sizes.cartpole, seed=0, threads=1)
        check_runner("cartpole", config, sizes.cartpole.steps)
    if "pong" in tasks:
        check_runner("pong", pong_config(sizes.pong, seed=0, threads=1), sizes.pong.steps)


def time_our_updates() -> list[float]:
    """Make ``rl_algos.DQN.optimize_agent`` (in this process) add the time of its updates
    to the returned one-element list: its whole time less that of storing the samples in
    the replay buffer (``samples_to_buffer`` and ``append_samples``, timed apart)."""
    from rl_algos import DQN

    spent = [0.0]
    optimize_agent = DQN.optimize_agent

    def timed(self: Any, itr: int, samples: Any = None, sampler_itr: Any = None) -> Any:
        storing = [0.0]

        def untimed(func: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                start = time.perf_counter()
                try:
                    return func(*args)
                finally:
                    storing[0] += time.perf_counter() - start

            return call

        buffer = self.replay_buffer
        self.samples_to_buffer = untimed(self.samples_to_buffer)  # (instance attributes,
        buffer.append_samples = untimed(buffer.append_samples)  # removed after the call)
        start = time.perf_counter()
        try:
            return optimize_agent(self, itr, samples, sampler_itr)
        finally:
            spent[0] += time.perf_counter() - start - storing[0]
            del self.samples_to_buffer, buffer.append_samples

    DQN.optimize_agent = timed  # type: ignore[method-assign]
    return spent


def last_row(progress_csv: Path) -> dict[str, str]:
    with open(progress_csv, newline="") as f:
        return list(csv.DictReader(f))[-1]


def run_ours(task: str, sizes: Sizes, seed: int, threads: int) -> Run:
    threads = set_threads(threads)
    import rl_suite

    if task == "cartpole":
        config = cartpole_config(sizes.cartpole, seed, threads)
    else:
        config = pong_config(sizes.pong, seed, threads)
    update_s = time_our_updates()
    with (
        tempfile.TemporaryDirectory(prefix="learning-dqn-bench-") as log_dir,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
    ):
        start = time.perf_counter()
        run_dir = rl_suite.train(config, log_dir=log_dir)
        wall_s = time.perf_counter() - start
        row = last_row(run_dir / "progress.csv")
        returns = []
        if task == "cartpole":
            infos = rl_suite.evaluate(
                run_dir, episodes=sizes.cartpole.eval_episodes, deterministic=True, seed=EVAL_SEED
            )
            returns = [float(info.Return) for info in infos]
    return Run(
        task=task,
        library="rl-suite",
        seed=seed,
        threads=threads,
        steps=int(row["CumSteps"]),
        updates=int(row["CumUpdates"]),
        train_s=float(row.get("CumTrainTime") or row["CumTime (s)"]),
        update_s=update_s[0],
        wall_s=wall_s,
        returns=returns,
    )


# ---------------------------------------------------------------------------------- SB3


def make_cartpole() -> Any:
    import gymnasium

    return gymnasium.make(CARTPOLE_ID)


def make_pong() -> Any:
    """Pong as ours sees it (see the docstring), from gymnasium's wrappers and SB3's."""
    import ale_py
    import gymnasium
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
    from stable_baselines3.common.atari_wrappers import ClipRewardEnv

    gymnasium.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)  # no banner, as ours
    env = gymnasium.make(
        PONG_GYM_ID, frameskip=1, repeat_action_probability=0.0, obs_type="grayscale"
    )
    height, width = OBS_SIZE
    env = AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=FRAME_SKIP,
        screen_size=(width, height),  # gymnasium's order: (width, height)
        terminal_on_life_loss=False,
        grayscale_obs=True,
    )
    return FrameStackObservation(ClipRewardEnv(env), NUM_IMG_OBS)


def sb3_cartpole(sizes: CartPoleSizes, seed: int) -> Any:
    from stable_baselines3 import DQN
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DQN(
        "MlpPolicy",
        DummyVecEnv([make_cartpole] * CARTPOLE_ENVS),
        learning_rate=CARTPOLE["learning_rate"],
        buffer_size=CARTPOLE["buffer_size"],
        learning_starts=CARTPOLE["learning_starts"],
        batch_size=CARTPOLE["batch_size"],
        tau=1.0,
        gamma=CARTPOLE["gamma"],
        train_freq=CARTPOLE_T,  # calls of env.step: CARTPOLE_ENVS env steps each
        gradient_steps=CARTPOLE["gradient_steps"],
        target_update_interval=CARTPOLE["target_update_interval"],
        exploration_fraction=sizes.eps_steps / sizes.steps,
        exploration_initial_eps=1.0,
        exploration_final_eps=CARTPOLE["exploration_final_eps"],
        max_grad_norm=CARTPOLE["max_grad_norm"],
        policy_kwargs=dict(net_arch=CARTPOLE["net_arch"], optimizer_kwargs=dict(eps=ADAM_EPS)),
        seed=seed,
        device="cpu",
        verbose=0,
    )


def sb3_pong(sizes: PongSizes, seed: int) -> Any:
    from stable_baselines3 import DQN
    from stable_baselines3.common.vec_env import DummyVecEnv

    steps_per_update = PONG_ENVS * PONG_T // PONG_UPDATES_PER_ITR  # 4
    return DQN(
        "CnnPolicy",
        DummyVecEnv([make_pong] * PONG_ENVS),
        learning_rate=PONG["learning_rate"],
        buffer_size=sizes.replay_size,
        learning_starts=sizes.learning_starts,
        batch_size=PONG["batch_size"],
        tau=1.0,
        gamma=PONG["gamma"],
        train_freq=PONG_T,
        gradient_steps=PONG_UPDATES_PER_ITR,
        target_update_interval=PONG["target_update_updates"] * steps_per_update,
        exploration_fraction=sizes.eps_steps / sizes.steps,
        exploration_initial_eps=1.0,
        exploration_final_eps=PONG["exploration_final_eps"],
        max_grad_norm=PONG["max_grad_norm"],
        optimize_memory_usage=False,
        policy_kwargs=dict(optimizer_kwargs=dict(eps=ADAM_EPS)),
        seed=seed,
        device="cpu",
        verbose=0,
    )


def run_sb3(task: str, sizes: Sizes, seed: int, threads: int) -> Run:
    threads = set_threads(threads)
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    steps = sizes.cartpole.steps if task == "cartpole" else sizes.pong.steps
    start = time.perf_counter()
    model = sb3_cartpole(sizes.cartpole, seed) if task == "cartpole" else sb3_pong(sizes.pong, seed)
    update_s = [0.0]
    train = model.train

    def timed_train(*args: Any, **kwargs: Any) -> None:
        begin = time.perf_counter()
        try:
            train(*args, **kwargs)
        finally:
            update_s[0] += time.perf_counter() - begin

    model.train = timed_train  # type: ignore[method-assign]
    learn_start = time.perf_counter()
    model.learn(total_timesteps=steps)
    end = time.perf_counter()
    returns: list[float] = []
    if task == "cartpole":
        eval_env = DummyVecEnv([lambda: Monitor(make_cartpole())])
        eval_env.seed(EVAL_SEED)
        episode_returns, _ = evaluate_policy(
            model,
            eval_env,
            n_eval_episodes=sizes.cartpole.eval_episodes,
            deterministic=True,
            return_episode_rewards=True,
        )
        eval_env.close()
        returns = [float(r) for r in episode_returns]
    model.env.close()
    return Run(
        task=task,
        library="SB3",
        seed=seed,
        threads=threads,
        steps=model.num_timesteps,
        updates=model._n_updates,
        train_s=end - learn_start,
        update_s=update_s[0],
        wall_s=end - start,
        returns=returns,
    )


def in_fresh_process(func: Callable[..., Any], *args: object) -> Any:
    """Run func in a new interpreter (spawn), alone: it imports what it needs itself."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


# ---------------------------------------------------------------------------------- printing


def return_text(returns: list[float]) -> str:
    if not returns:
        return "-"
    spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
    return f"{statistics.fmean(returns):.1f} +- {spread:.1f}"


TASK_TITLES = {
    "cartpole": f"DQN on {CARTPOLE_ID}, {CARTPOLE_ENVS} envs x {CARTPOLE_T} steps, "
    f"{CARTPOLE['gradient_steps']} updates of {CARTPOLE['batch_size']} per batch",
    "pong": f"DQN (Nature CNN) on Pong, {PONG_ENVS} envs x {PONG_T} steps, "
    f"{PONG_UPDATES_PER_ITR} updates of {PONG['batch_size']} per batch",
}


def print_runs(runs: list[Run], eval_episodes: int) -> None:
    print("\n(a) each run")
    header = (
        f"{'task':<9}{'threads':>7}{'seed':>5}  {'library':<9}{'env steps':>10}{'updates':>9}"
        f"{'train s':>9}{'update s':>9}{'steps/s':>9}{'updates/s':>10}{'wall s':>8}"
        f"  return, {eval_episodes} episodes"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        print(
            f"{run.task:<9}{run.threads:>7}{run.seed:>5}  {run.library:<9}{run.steps:>10,}"
            f"{run.updates:>9,}{run.train_s:>9.1f}{run.update_s:>9.1f}{run.steps_per_s:>9,.0f}"
            f"{run.updates_per_s:>10,.0f}{run.wall_s:>8.1f}  {return_text(run.returns)}"
        )
    print(
        "train s: evaluations excluded; update s: inside the training calls (part of train s);"
        "\nsteps/s = env steps / train s; updates/s = updates / update s"
    )


def print_ratios(runs: list[Run]) -> None:
    print("\n(b) rl-suite / SB3 per task and torch thread count (from the mean times over seeds)")
    header = (
        f"{'task':<9}{'threads':>7}{'ours steps/s':>13}{'SB3':>8}{'ratio':>7}  {'':<8}"
        f"{'ours upd/s':>11}{'SB3':>7}{'ratio':>7}  {'':<8}{'ours return':>12}{'SB3':>7}  "
    )
    print(header)
    print("-" * len(header))
    for task, threads in dict.fromkeys((run.task, run.threads) for run in runs):
        ours = [r for r in runs if (r.task, r.threads, r.library) == (task, threads, "rl-suite")]
        sb3 = [r for r in runs if (r.task, r.threads, r.library) == (task, threads, "SB3")]
        if not ours or not sb3:
            continue
        steps = [
            statistics.fmean(r.steps for r in side) / statistics.fmean(r.train_s for r in side)
            for side in (ours, sb3)
        ]
        updates = [
            statistics.fmean(r.updates for r in side) / statistics.fmean(r.update_s for r in side)
            for side in (ours, sb3)
        ]
        steps_ratio, updates_ratio = steps[0] / steps[1], updates[0] / updates[1]
        line = (
            f"{task:<9}{threads:>7}{steps[0]:>13,.0f}{steps[1]:>8,.0f}{steps_ratio:>7.2f}  "
            f"{met(steps_ratio):<8}{updates[0]:>11,.0f}{updates[1]:>7,.0f}{updates_ratio:>7.2f}  "
            f"{met(updates_ratio):<8}"
        )
        if ours[0].returns and sb3[0].returns:
            returns = [statistics.fmean(x for r in side for x in r.returns) for side in (ours, sb3)]
            as_good = returns[0] >= returns[1] or min(returns) >= REWARD_THRESHOLD
            line += f"{returns[0]:>12.1f}{returns[1]:>7.1f}  {'ok' if as_good else 'WORSE'}"
        print(line)
    print(
        f"target: ratio >= {SPEED_TARGET:g} for both; return ok: ours' mean >= SB3's, or both >= "
        f"{REWARD_THRESHOLD:g} (CartPole only: Pong runs too few steps to learn)"
    )


def met(ratio: float) -> str:
    return "met" if ratio >= SPEED_TARGET else "NOT met"


def print_load(when: str) -> None:
    """Another process on the machine slows every figure: compare only quiet runs."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="under a minute, no timing claims")
    parser.add_argument(
        "--task", choices=["cartpole", "pong", "both"], default="both", help="default: both"
    )
    parser.add_argument(
        "--seeds", type=int, help="seeds 0 .. N-1 (default: 2 on CartPole, 1 on Pong; 1 --quick)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="torch thread counts to run both libraries with, 0 for torch's default (default: 1)",
    )
    parser.add_argument(
        "--pong-steps",
        type=int,
        help=f"Pong env steps, in whole batches of {PONG_ENVS * PONG_T} (default: "
        f"{FULL.pong.steps:,}; learning starts at {FULL.pong.learning_starts:,} all the same)",
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.pong_steps is not None:
        pong = dataclasses.replace(sizes.pong, itrs=args.pong_steps // (PONG_ENVS * PONG_T))
        least = pong.learning_starts + 2 * PONG_ENVS * PONG_T  # a few updates at least
        if pong.steps < least:
            parser.error(f"--pong-steps must be at least {least}")
        sizes = dataclasses.replace(sizes, pong=pong)
    tasks = ["cartpole", "pong"] if args.task == "both" else [args.task]
    if (args.seeds is not None and args.seeds < 1) or any(t < 0 for t in args.threads):
        parser.error("--seeds must be at least 1 and --threads at least 0")
    if args.quick:
        print("--quick: a few thousand steps, 2 evaluation episodes; these numbers mean nothing.")
    print(
        "DQN: rl-suite against stable-baselines3, the same hyperparameters,\n"
        "each run in its own fresh process (spawn), one at a time.",
        flush=True,
    )
    print_load("before")
    in_fresh_process(plan, sizes, tasks)
    runs: list[Run] = []
    for task in tasks:
        task_sizes = sizes.cartpole if task == "cartpole" else sizes.pong
        print(f"{task}: {TASK_TITLES[task]}, {task_sizes.steps:,} env steps", flush=True)
        seeds = range(task_sizes.seeds if args.seeds is None else args.seeds)
        for threads in args.threads:
            for seed in seeds:
                order = [run_ours, run_sb3] if seed % 2 == 0 else [run_sb3, run_ours]
                pair = []
                for func in order:
                    run = in_fresh_process(func, task, sizes, seed, threads)
                    print(
                        f"  threads {run.threads}, seed {seed}: {run.library} trained in "
                        f"{run.train_s:.1f} s ({run.update_s:.1f} s in updates, "
                        f"{run.wall_s:.1f} s wall)",
                        flush=True,
                    )
                    pair.append(run)
                if (pair[0].steps, pair[0].updates) != (pair[1].steps, pair[1].updates):
                    raise RuntimeError(
                        f"{task}, seed {seed}: the two runs differ in env steps or updates: "
                        + ", ".join(f"{r.library} {r.steps:,} / {r.updates:,}" for r in pair)
                    )
                runs += pair
    print_runs(runs, sizes.cartpole.eval_episodes)
    print_ratios(runs)
    print_load("after")


if __name__ == "__main__":
    main()
