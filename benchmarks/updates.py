"""Speed: one update of SAC, TD3 and DQN at the sizes of ``learning.py``'s Pendulum-v1 runs and
``learning_dqn.py``'s CartPole-v1 runs, in rl-suite, in stable-baselines3, and as a bare PyTorch
loop of the same math, the third being about the fastest update eager PyTorch gives on this
machine: the limit a library built on it approaches.

    python benchmarks/updates.py               # SAC, TD3 and DQN, 5 timed rounds per side
    python benchmarks/updates.py --task td3
    python benchmarks/updates.py --quick       # a few updates; the numbers mean nothing
    python benchmarks/updates.py --threads 2   # 2 torch threads on every side

``learning.py`` and ``learning_dqn.py`` time whole runs, most of whose time is updates (one per
env step for SAC and TD3, one per 2 env steps for DQN on CartPole). This script times the
updates alone, so that ours' ratio to SB3 can be set beside the ratio the bare loop reaches:
when even the bare loop is not 1.5x SB3 (issues 6 and 7's target), no eager implementation of
the same update is.

Each side runs in its own fresh process (spawn) with 1 torch thread (``--threads``). It fills
its replay buffer with random actions (SAC, TD3: 1,000 steps of one Pendulum-v1; DQN: 1,024
steps of 8 CartPole-v1), warms up, then takes 5 timed rounds (SAC, TD3: 200 updates each; DQN:
4 trainings of 128 updates each); the table gives the best round's mean time per update.

- rl-suite: the preset's runner (``pendulum-sac``, ``pendulum-td3``; ``cartpole-dqn`` made vanilla
  as in ``learning_dqn.py``), started, sampling as in training; timed: ``algo.optimize_agent(itr,
  samples)``, what the runner calls per iteration (the samples appended to the replay, the
  batches replayed, the updates, their diagnostics read), divided by its updates.
- SB3: ``SAC`` / ``TD3`` / ``DQN`` with the same settings as in those scripts, after ``learn``
  over the filling steps; timed: ``model.train(gradient_steps, batch_size)`` (replay sampling
  and the updates; DQN's target copies happen while collecting, outside it).
- bare: the same networks and math in plain tensor code, with fused Adam (as ours); a uniform
  batch gathered from replay tensors for each update; no diagnostics or time-limit masks, and
  gradient clipping only where it changes the update (DQN's norm of 10), so it does less than
  either library.
  - SAC: twin critics on ``min(Q1', Q2') - alpha * log pi'``, the tanh-squashed Gaussian
    (log-std clamped to [-20, 2]) with its log determinant, the policy on ``alpha * log pi -
    min(Q1, Q2)``, a learned temperature aiming at ``-action_dim``, targets moved by ``tau``
    every update.
  - TD3: twin critics on the smoothed target action (noise 0.2 clipped at 0.5), the policy on
    Q1 and the targets moved every second update.
  - DQN: the Huber loss on ``r + gamma * (1 - done) * max Q_target(s')``, the target network
    fixed during the timed updates (as both libraries keep it over a training).
- bare, bf16: the bare loop with each network's hidden layers under ``torch.autocast("cpu",
  bfloat16)`` (products of bfloat16 inputs, accumulated in float32) and its output layer in
  float32: what lower precision buys where the CPU has bfloat16 instructions (the header says
  whether oneDNN finds them). It only times the update: whether it learns as well is untested.
- bare, compiled (not with ``--quick``: inductor needs a C++ compiler): the bare loop with
  every network ``compile()``d, its forward and backward pointwise work fused.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

SPEED_TARGET = 1.5  # issues 6 and 7: ours' speed at least this times SB3's
PENDULUM, CARTPOLE = "Pendulum-v1", "CartPole-v1"
# learning.py's SAC and TD3 settings (our presets') and learning_dqn.py's DQN ones (the zoo's)
SETTINGS: dict[str, dict[str, Any]] = {
    "sac": dict(batch=256, hidden=[256, 256], gamma=0.99, lr=1e-3, obs=3, act=1),
    "td3": dict(batch=100, hidden=[400, 300], gamma=0.98, lr=1e-3, obs=3, act=1),
    "dqn": dict(batch=64, hidden=[256, 256], gamma=0.99, lr=2.3e-3, obs=4, act=2),
}
TAU = 0.005
TD3_NOISE, TD3_NOISE_CLIP, TD3_DELAY = 0.2, 0.5, 2
DQN_ENVS, DQN_T, DQN_UPDATES = 8, 32, 128  # 256 env steps, then 128 updates
DQN_CLIP = 10.0
# Per task: (env steps of random actions before the first update, warm-up updates, updates
# per timed round); ROUNDS timed rounds.
SIZES = {"sac": (1_000, 20, 200), "td3": (1_000, 20, 200), "dqn": (1_024, 128, 512)}
QUICK_SIZES = {"sac": (300, 2, 3), "td3": (300, 2, 3), "dqn": (256, 128, 128)}
ROUNDS, QUICK_ROUNDS = 5, 2


def our_config(task: str, fill: int, threads: int) -> dict[str, Any]:
    import rl_suite

    if task == "dqn":  # learning_dqn.py's cartpole-dqn made vanilla
        config = rl_suite.make_config("cartpole-dqn", seed=0)
        overrides = [
            "algo_kwargs.double_dqn=False",
            "algo_kwargs.n_step_return=1",
            "algo_kwargs.bootstrap_timelimit=True",
            "algo_kwargs.optim_kwargs={'eps': 1e-8, 'fused': True}",
            "agent.model_kwargs={'hidden_sizes': [256, 256], 'dueling': False}",
            f"sampler.batch_B={DQN_ENVS}",
            f"sampler.batch_T={DQN_T}",
        ]
    else:
        config, overrides = rl_suite.make_config(f"pendulum-{task}", seed=0), []
    overrides += [
        f"algo_kwargs.min_steps_learn={fill}",
        "runner.evaluate=False",
        f"torch_threads={threads}",
    ]
    return rl_suite.apply_overrides(config, overrides)


def ours(task: str, sizes: tuple[int, int, int], rounds: int, threads: int) -> float:
    """Seconds per update in the best round: ``optimize_agent`` as the runner calls it."""
    import torch

    torch.set_num_threads(threads)
    import rl_suite
    from rl_runners import logger_context

    fill, warm_up, per_round = sizes
    runner = rl_suite.build(our_config(task, fill, threads))
    with (
        tempfile.TemporaryDirectory() as log_dir,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
        logger_context(log_dir, 0, "updates", log_params={}, snapshot_mode="none"),
    ):
        runner.startup()
        try:
            algo, itr = runner.algo, 0

            def iteration() -> float:
                """One runner iteration; returns the seconds in optimize_agent."""
                nonlocal itr
                runner.agent.sample_mode(itr)
                samples, _ = runner.sampler.obtain_samples(itr)
                runner.agent.train_mode(itr)
                start = time.perf_counter()
                algo.optimize_agent(itr, samples)
                itr += 1
                return time.perf_counter() - start

            while itr < algo.min_itr_learn:  # random actions, no update
                iteration()
            per_itr = algo.updates_per_optimize
            for _ in range(warm_up // per_itr):
                iteration()
            itrs = per_round // per_itr
            means = [
                sum(iteration() for _ in range(itrs)) / (itrs * per_itr) for _ in range(rounds)
            ]
        finally:
            runner.shutdown()
    return min(means)


def best_round(update: Callable[[], Any], sizes: tuple[int, int, int], rounds: int) -> float:
    """Seconds per call in the best of ``rounds`` rounds of ``per_round`` calls of ``update``,
    after ``warm_up`` calls (``sizes``: as in SIZES, in calls)."""
    _, warm_up, per_round = sizes
    for _ in range(warm_up):
        update()
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            update()
        means.append((time.perf_counter() - start) / per_round)
    return min(means)


def sb3(task: str, sizes: tuple[int, int, int], rounds: int, threads: int) -> float:
    """Seconds per update in the best round: ``model.train``."""
    import torch

    torch.set_num_threads(threads)
    import gymnasium
    import numpy as np
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv

    settings, fill = SETTINGS[task], sizes[0]
    common: dict[str, Any] = dict(
        learning_rate=settings["lr"],
        buffer_size=100_000,
        learning_starts=fill,
        batch_size=settings["batch"],
        gamma=settings["gamma"],
        policy_kwargs=dict(net_arch=settings["hidden"], optimizer_kwargs=dict(eps=1e-8)),
        seed=0,
        device="cpu",
        verbose=0,
    )
    pendulum = gymnasium.make(PENDULUM)
    if task == "dqn":
        cartpoles = DummyVecEnv([lambda: gymnasium.make(CARTPOLE)] * DQN_ENVS)
        model: Any = DQN(
            "MlpPolicy",
            cartpoles,
            train_freq=DQN_T,
            gradient_steps=DQN_UPDATES,
            target_update_interval=10,
            max_grad_norm=DQN_CLIP,
            **common,
        )
    elif task == "sac":
        model = SAC(
            "MlpPolicy",
            pendulum,
            ent_coef="auto",
            tau=TAU,
            train_freq=1,
            gradient_steps=1,
            **common,
        )
    else:
        noise = NormalActionNoise(mean=np.zeros(1), sigma=np.full(1, 0.1))
        model = TD3(
            "MlpPolicy",
            pendulum,
            action_noise=noise,
            tau=TAU,
            train_freq=1,
            gradient_steps=1,
            policy_delay=TD3_DELAY,
            target_policy_noise=TD3_NOISE,
            target_noise_clip=TD3_NOISE_CLIP,
            **common,
        )
    model.learn(total_timesteps=fill)
    per_call = DQN_UPDATES if task == "dqn" else 1
    fill, warm_up, per_round = sizes
    calls = (fill, warm_up // per_call, per_round // per_call)
    return (
        best_round(
            lambda: model.train(gradient_steps=per_call, batch_size=settings["batch"]),
            calls,
            rounds,
        )
        / per_call
    )


def bare(
    task: str, sizes: tuple[int, int, int], rounds: int, threads: int, variant: str = "eager"
) -> float:
    """Seconds per update in the best round: the same math in plain PyTorch, eager, with the
    hidden layers' products in bfloat16 (``"bf16"``) or with every network compiled
    (``"compiled"``)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    settings, n = SETTINGS[task], max(sizes[0], 1_000)
    batch, (h1, h2), gamma = settings["batch"], settings["hidden"], settings["gamma"]
    n_obs, n_act = settings["obs"], settings["act"]

    class Bf16Hidden(nn.Module):
        """The hidden layers under bfloat16 autocast, the output layer in float32."""

        def __init__(self, net: nn.Sequential):
            super().__init__()
            self.hidden, self.head = net[:-1], net[-1]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.hidden(x)
            return self.head(h.float())

    def mlp(inputs: int, outputs: int) -> nn.Module:
        net = nn.Sequential(
            nn.Linear(inputs, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(), nn.Linear(h2, outputs)
        )
        if variant == "bf16":
            return Bf16Hidden(net)
        if variant == "compiled":
            net.compile()
        return net

    def target_of(net: nn.Module, blank: nn.Module) -> nn.Module:
        blank.load_state_dict(net.state_dict())
        return blank.requires_grad_(False)

    def adam(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=settings["lr"], fused=True)

    obs, next_obs = torch.randn(n, n_obs), torch.randn(n, n_obs)
    rew, done = torch.randn(n), torch.zeros(n)
    act = torch.randint(n_act, (n,)) if task == "dqn" else torch.rand(n, n_act) * 2 - 1

    if task == "dqn":
        q = mlp(n_obs, n_act)
        target_q = target_of(q, mlp(n_obs, n_act))
        q_params = list(q.parameters())
        q_optimizer = adam(q_params)

        def update(o, a, r, d, o2) -> None:  # type: ignore[no-untyped-def]
            with torch.no_grad():
                y = r + gamma * (1 - d) * target_q(o2).max(-1).values
            q_a = q(o).gather(1, a.unsqueeze(1)).squeeze(1)
            loss = F.smooth_l1_loss(q_a, y)
            q_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(q_params, DQN_CLIP, foreach=True)
            q_optimizer.step()

        return _replayed(update, (obs, act, rew, done, next_obs), batch, sizes, rounds)

    q1, q2 = mlp(n_obs + n_act, 1), mlp(n_obs + n_act, 1)
    target_q1 = target_of(q1, mlp(n_obs + n_act, 1))
    target_q2 = target_of(q2, mlp(n_obs + n_act, 1))
    q_params = [*q1.parameters(), *q2.parameters()]
    q_optimizer = adam(q_params)

    def q_step(y: torch.Tensor, o: torch.Tensor, a: torch.Tensor) -> None:
        x = torch.cat([o, a], -1)
        loss = F.mse_loss(q1(x).squeeze(-1), y) + F.mse_loss(q2(x).squeeze(-1), y)
        q_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        q_optimizer.step()

    if task == "sac":
        pi = mlp(n_obs, 2 * n_act)
        pi_optimizer = adam(list(pi.parameters()))
        log_alpha = torch.zeros(1, requires_grad=True)
        alpha_optimizer = adam([log_alpha])
        targets, sources = [*target_q1.parameters(), *target_q2.parameters()], q_params

        def sample(o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            mean, log_std = pi(o).chunk(2, -1)
            log_std = log_std.clamp(-20, 2)
            noise = torch.randn_like(mean)
            u = mean + log_std.exp() * noise
            log_pi = (-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            log_det = 2 * (math.log(2) - u - F.softplus(-2 * u))
            return torch.tanh(u), log_pi - log_det.sum(-1)

        def update(o, a, r, d, o2) -> None:  # type: ignore[no-untyped-def]
            alpha = log_alpha.detach().exp()
            with torch.no_grad():
                a2, log_pi2 = sample(o2)
                x2 = torch.cat([o2, a2], -1)
                next_q = torch.minimum(target_q1(x2), target_q2(x2)).squeeze(-1)
                y = r + gamma * (1 - d) * (next_q - alpha * log_pi2)
            q_step(y, o, a)
            new_a, log_pi = sample(o)
            x = torch.cat([o, new_a], -1)
            q1.requires_grad_(False)
            q2.requires_grad_(False)
            q = torch.minimum(q1(x), q2(x)).squeeze(-1)
            q1.requires_grad_(True)
            q2.requires_grad_(True)
            pi_loss = (alpha * log_pi - q).mean()
            alpha_loss = -(log_alpha * (log_pi.detach() - n_act)).mean()
            pi_optimizer.zero_grad(set_to_none=True)
            alpha_optimizer.zero_grad(set_to_none=True)
            (pi_loss + alpha_loss).backward()
            pi_optimizer.step()
            alpha_optimizer.step()
            torch._foreach_lerp_(targets, sources, TAU)

    else:
        mu = mlp(n_obs, n_act)
        target_mu = target_of(mu, mlp(n_obs, n_act))
        mu_optimizer = adam(list(mu.parameters()))
        targets = [*target_mu.parameters(), *target_q1.parameters(), *target_q2.parameters()]
        sources = [*mu.parameters(), *q_params]
        updates = 0

        def update(o, a, r, d, o2) -> None:  # type: ignore[no-untyped-def]
            nonlocal updates
            with torch.no_grad():
                noise = (torch.randn_like(a) * TD3_NOISE).clamp(-TD3_NOISE_CLIP, TD3_NOISE_CLIP)
                a2 = (torch.tanh(target_mu(o2)) + noise).clamp(-1, 1)
                x2 = torch.cat([o2, a2], -1)
                y = r + gamma * (1 - d) * torch.minimum(target_q1(x2), target_q2(x2)).squeeze(-1)
            q_step(y, o, a)
            updates += 1
            if updates % TD3_DELAY == 0:
                q1.requires_grad_(False)
                mu_loss = -q1(torch.cat([o, torch.tanh(mu(o))], -1)).mean()
                q1.requires_grad_(True)
                mu_optimizer.zero_grad(set_to_none=True)
                mu_loss.backward()
                mu_optimizer.step()
                torch._foreach_lerp_(targets, sources, TAU)

    return _replayed(update, (obs, act, rew, done, next_obs), batch, sizes, rounds)


def _replayed(
    update: Callable[..., None], replay: tuple[Any, ...], batch: int, sizes: Any, rounds: int
) -> float:
    """``best_round`` of ``update`` on a uniform batch of ``replay``'s rows per call."""
    import torch

    n = len(replay[0])

    def replayed_update() -> None:
        rows = torch.randint(n, (batch,))
        update(*(x[rows] for x in replay))

    return best_round(replayed_update, sizes, rounds)


def in_fresh_process(func: Callable[..., float], *args: object) -> float:
    """Run func in a new interpreter (spawn), alone: it imports what it needs itself."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


def print_load(when: str) -> None:
    """Another process on the machine slows every figure: compare only quiet runs."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)


def bf16_native() -> bool:
    """Whether oneDNN runs bfloat16 products natively on this CPU (else it emulates them)."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds; no timing claims")
    parser.add_argument("--task", choices=["sac", "td3", "dqn", "all"], default="all")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads on every side (default 1)"
    )
    args = parser.parse_args()
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    all_sizes, rounds = (QUICK_SIZES, QUICK_ROUNDS) if args.quick else (SIZES, ROUNDS)
    if args.quick:
        print("--quick: a few updates; these numbers mean nothing.")
    print_load("before")
    print(f"torch threads on every side: {args.threads}")
    print(f"bfloat16 instructions (oneDNN): {bf16_native()}")
    sides: dict[str, tuple[Callable[..., float], tuple[str, ...]]] = {
        "rl-suite": (ours, ()),
        "SB3": (sb3, ()),
        "bare PyTorch": (bare, ()),
        "bare, bf16": (bare, ("bf16",)),
    }
    if not args.quick:  # inductor needs a C++ compiler, which CI machines need not have
        sides["bare, compiled"] = (bare, ("compiled",))
    print(f"\n{'task':<6}{'library':<16}{'ms per update':>14}{'speed vs SB3':>14}")
    print("-" * 50)
    for task in ["sac", "td3", "dqn"] if args.task == "all" else [args.task]:
        seconds = {
            name: in_fresh_process(side, task, all_sizes[task], rounds, args.threads, *variant)
            for name, (side, variant) in sides.items()
        }
        speeds = {name: seconds["SB3"] / s for name, s in seconds.items()}
        for name, s in seconds.items():
            print(f"{task:<6}{name:<16}{s * 1e3:>14.3f}{speeds[name]:>14.2f}", flush=True)
        verdict = "met" if speeds["rl-suite"] >= SPEED_TARGET else "NOT met"
        others = ", ".join(
            f"{name} {speeds[name]:.2f}x" for name in sides if name.startswith("bare")
        )
        print(
            f"{task}: rl-suite {speeds['rl-suite']:.2f}x SB3 (target {SPEED_TARGET:g}: {verdict}); "
            f"{others}\n"
        )
    print_load("after")


if __name__ == "__main__":
    main()
