"""The `rl-suite` command line: train, evaluate, resume and plot runs, run sweeps, list what is
there."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# The environment `train ALGO` uses without --env: the continuous-action algorithms get one with
# continuous actions (the others CartPole-v1).
DEFAULT_ENVS = {"ddpg": "Pendulum-v1", "td3": "Pendulum-v1", "sac": "Pendulum-v1"}


EXIT_STOPPED = 75  # (EX_TEMPFAIL) stopped by SIGTERM / SIGUSR1 with a snapshot: resume continues

VERBOSE_HELP = "print the whole diagnostics table at each log interval, not one summary line"
RUN_OR_CHECKPOINT_HELP = (
    "a run directory (its latest checkpoint), or one of its checkpoint files (itr_<n>.pt)"
)


@contextlib.contextmanager
def _console(verbose: bool) -> Iterator[None]:
    """--verbose: the logger prints each row's whole table (as debug.log has it) for the block."""
    from rl_runners import logger

    saved = logger.get_verbose()
    logger.set_verbose(saved or verbose)
    try:
        yield
    finally:
        logger.set_verbose(saved)


def _positive_int(text: str) -> int:
    """An int >= 1, also written as 1e5 or 100_000."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = 0.0
    if not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    from ._config import ALGOS

    parser = argparse.ArgumentParser(prog="rl-suite", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = commands.add_parser(
        "train", help="train an agent", description="Train an agent; see `rl-suite list`."
    )
    train.add_argument(
        "algo",
        nargs="?",
        choices=ALGOS,
        metavar="ALGO",
        help=f"one of {', '.join(ALGOS)} (optional with --config: the file's)",
    )
    train.add_argument(
        "--config",
        metavar="FILE",
        help="the settings from a JSON file: a run's params.json, or what --dry-run prints "
        "(options given here change them; no --preset with it)",
    )
    train.add_argument(
        "--preset",
        help="a named configuration (`rl-suite list`); by default the one made for ALGO on "
        "--env, when there is one",
    )
    train.add_argument(
        "--env",
        help="environment id: a gymnasium id, atari:<game>, or batched: torch:cartpole, "
        "torch:pendulum, vec:<gymnasium id>, ale:<game> (default CartPole-v1; Pendulum-v1 for "
        "ddpg, td3 and sac)",
    )
    train.add_argument("--steps", type=_positive_int, help="environment steps to train for")
    train.add_argument("--seed", type=int, help="random seed (also names the run: run_<seed>)")
    train.add_argument("--log-dir", help="where the run directory goes (default runs/ALGO-ENV)")
    train.add_argument(
        "--sampler",
        choices=["serial", "cpu", "gpu", "alternating", "batched"],
        help="how envs are stepped (default: the preset's; alternating for Atari on a GPU "
        "when the workers are even and the agent is not recurrent)",
    )
    train.add_argument(
        "--workers", type=_positive_int, help="worker processes (cpu / gpu / alternating)"
    )
    train.add_argument(
        "--num-envs", type=_positive_int, help="environments stepped together (sampler.batch_B)"
    )
    train.add_argument("--device", help="cpu (default), cuda or cuda:N")
    train.add_argument(
        "--compile",
        action="store_true",
        help="compile the updates with torch.compile, replayed as CUDA graphs on a GPU "
        "(algo_kwargs.compile=True)",
    )
    train.add_argument(
        "--processes",
        type=_positive_int,
        help="training processes, gradients all-reduced (runner.processes; default 1)",
    )
    train.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="sample in another process while training (runner.asynchronous; replay algorithms)",
    )
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting, e.g. --set algo_kwargs.learning_rate=3e-4 (repeatable)",
    )
    train.add_argument(
        "--log-to",
        metavar="OUTPUTS",
        help="also send the rows to tensorboard, wandb and/or mlflow, comma-separated (extras "
        "of the same names: pip install 'rl-suite[wandb]'); log_to in the configuration",
    )
    train.add_argument(
        "--dry-run", action="store_true", help="print the configuration and build the run only"
    )
    train.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)

    evaluate = commands.add_parser("eval", help="play episodes with a run's trained agent")
    evaluate.add_argument("run_dir", metavar="RUN_DIR", help=RUN_OR_CHECKPOINT_HELP)
    evaluate.add_argument("--episodes", type=_positive_int, default=10, help="(default 10)")
    evaluate.add_argument(
        "--deterministic", action="store_true", help="greedy actions instead of sampled ones"
    )
    evaluate.add_argument("--seed", type=int, default=12345, help="environment seed")
    evaluate.add_argument(
        "--env", help="play another environment id with the same spaces (a harder variant ...)"
    )
    evaluate.add_argument(
        "--video",
        metavar="DIR",
        help="record each episode into an MP4 file in DIR (pip install 'rl-suite[video]')",
    )
    evaluate.add_argument("--render", action="store_true", help="show the episodes in a window")

    resume = commands.add_parser("resume", help="continue a stopped run from its checkpoint")
    resume.add_argument("run_dir", metavar="RUN_DIR", help=RUN_OR_CHECKPOINT_HELP)
    resume.add_argument(
        "--steps",
        type=_positive_int,
        help="train to this many environment steps instead of the run's (extends a finished run)",
    )
    resume.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)

    sweep = commands.add_parser(
        "sweep",
        help="train a grid of settings x seeds, several runs at once",
        description="Train every variant of a sweep file (JSON; see the README's Sweeps) with "
        "each seed, as many runs at once as the machine has room for (cpu_per_run cores each).",
    )
    sweep.add_argument("config_file", metavar="CONFIG", help="the sweep file (JSON)")
    sweep.add_argument("--log-dir", help="the sweep directory (default: the file's log_dir)")
    sweep.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: rl-launch's queue on this machine (default); ray: Ray Tune trials, on "
        "this machine or a Ray cluster (pip install 'rl-suite[ray]')",
    )
    sweep.add_argument(
        "--address",
        help="(--engine ray) the Ray cluster to join, as ray.init takes it: HOST:PORT or auto "
        "(default: a cluster `ray start` started on this machine, else a new local one)",
    )
    sweep.add_argument(
        "--dry-run", action="store_true", help="check the file and list the runs; start nothing"
    )

    plot = commands.add_parser("plot", help="draw learning curves as a PNG")
    plot.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories, or one sweep directory: one curve per variant, the mean over "
        "its seeds with a band from their min to their max",
    )
    plot.add_argument(
        "--out", help="the PNG (default RUN_DIR/curve.png for one run, SWEEP_DIR/sweep.png)"
    )
    plot.add_argument("--y", default="ReturnAverage", help="the progress.csv column to draw")

    commands.add_parser("list", help="the algorithms and presets")

    demo = commands.add_parser(
        "demo", help="fill a [T, B] sample batch in shared memory from worker processes"
    )
    demo.add_argument("-T", type=_positive_int, default=64, help="time steps (default 64)")
    demo.add_argument("-B", type=_positive_int, default=8, help="environments (default 8)")
    demo.add_argument("--workers", type=_positive_int, default=2, help="processes (default 2)")
    demo.add_argument(
        "--start-method",
        choices=["fork", "forkserver", "spawn"],
        default="spawn",
        help="how workers are started (default spawn)",
    )
    return parser


def _alternating_fits(config: dict) -> bool:
    """Whether ``config``'s cpu sampler can be ``AlternatingSampler``: it needs an even number
    of workers (two groups) and refuses a recurrent agent with one state (R2D1's,
    ``agent.recurrent``'s), as the trainer makes them."""
    from rl_arrays import as_count

    if config["algo"] == "r2d1" or config["agent"]["recurrent"]:
        return False
    workers, batch_B = config["sampler"]["workers"], config["sampler"]["batch_B"]
    try:
        if workers is None:  # (CpuSampler's default: one per core, at most one per env)
            n_workers = min(os.cpu_count() or 1, as_count("sampler.batch_B", batch_B, 1))
        else:
            n_workers = as_count("sampler.workers", workers, 1)
    except ValueError:
        return False  # (build names the bad setting)
    return n_workers >= 2 and n_workers % 2 == 0


def _train_config(args: argparse.Namespace) -> dict:
    from ._config import (
        PRESETS,
        apply_overrides,
        default_preset,
        is_atari,
        make_config,
        merge_config,
    )
    from ._run_files import read_config_file

    sampler = {"kind": args.sampler, "workers": args.workers, "batch_B": args.num_envs}
    changes = dict(
        env=args.env,
        steps=args.steps,
        seed=args.seed,
        device=args.device,
        sampler={key: value for key, value in sampler.items() if value is not None},
    )
    preset = args.preset
    if args.config is not None:
        if preset is not None:
            raise ValueError("--config and --preset both give the settings: use one of them")
        config = read_config_file(args.config)
        if args.algo is not None and args.algo != config["algo"]:
            raise ValueError(f"{args.config} trains {config['algo']}, not {args.algo}")
        args.algo = config["algo"]
        merge_config(config, {k: v for k, v in changes.items() if v is not None})
    elif args.algo is None:
        raise ValueError("name the algorithm (rl-suite train ALGO) or give --config FILE")
    else:
        if preset is None:
            env = args.env or DEFAULT_ENVS.get(args.algo, "CartPole-v1")
            preset = default_preset(args.algo, env)
        config = make_config(preset, algo=args.algo, **changes)
    if preset is not None and PRESETS[preset]["algo"] != args.algo:
        raise ValueError(f"preset {preset!r} is for {PRESETS[preset]['algo']}, not {args.algo}")
    if preset is not None:
        print(f"preset: {preset}")
    if args.processes is not None:
        config["runner"]["processes"] = args.processes
    if args.asynchronous:
        config["runner"]["asynchronous"] = True
    if args.compile:
        config["algo_kwargs"]["compile"] = True
    if args.log_to is not None:
        # (checked by logger_context as the run starts, before any work)
        config["log_to"] = [name.strip() for name in args.log_to.split(",") if name.strip()]
    config = apply_overrides(config, args.overrides)
    # Atari on a GPU: the action server acts for half the envs while the other half step,
    # unless the sampler was chosen (--sampler, --set sampler.kind=...) or cannot be.
    chosen = args.sampler is not None or any(
        assignment.partition("=")[0].strip() in ("sampler", "sampler.kind")
        for assignment in args.overrides
    )
    if (
        not chosen
        and str(config["device"]).startswith("cuda")
        and is_atari(config["env"])
        and config["sampler"]["kind"] == "cpu"
        and _alternating_fits(config)
    ):
        config["sampler"]["kind"] = "alternating"
    # The runner trains whole log intervals (as rlpyt): a run shorter than the preset's
    # interval logs at its end rather than running on to the interval's.
    runner = config["runner"]
    if isinstance(config["steps"], int) and isinstance(runner["log_interval_steps"], int):
        runner["log_interval_steps"] = min(runner["log_interval_steps"], config["steps"])
    return config


def _train(args: argparse.Namespace) -> None:
    from ._plot import have_matplotlib, plot_runs, read_progress
    from ._trainer import build, run_dir_for, train

    config = _train_config(args)
    if args.dry_run:
        print(json.dumps(config, indent=2))
        build(config)
        print(f"would log to {run_dir_for(config, args.log_dir)}")
        return
    run_dir = train(config, args.log_dir)
    final = read_progress(run_dir)
    returns = final.get("ReturnAverage", [])  # (no column when no episode has ended)
    last = f"{returns[-1]:.1f}" if len(returns) else "none (no episode ended)"
    print(
        f"trained {int(final['CumSteps'][-1])} steps; last average return {last}; "
        f"run directory: {run_dir}"
    )
    if not len(returns):
        print("(no learning curve: no episode has ended yet)")
    elif have_matplotlib():
        print(f"learning curve: {plot_runs([run_dir], run_dir / 'curve.png')}")
    else:
        print("(pip install matplotlib for a learning-curve PNG: `rl-suite plot RUN_DIR`)")


def _evaluate(args: argparse.Namespace) -> None:
    from ._evaluate import evaluate, mean_return

    infos = evaluate(
        args.run_dir,
        args.episodes,
        args.deterministic,
        args.seed,
        env=args.env,
        video_dir=args.video,
        render=args.render,
    )
    returns = [info.Return for info in infos]
    for i, info in enumerate(infos):
        print(f"episode {i + 1}: return {info.Return:.2f}, length {info.Length}")
    if len(infos) < args.episodes:
        print(f"only {len(infos)} of {args.episodes} episodes ended")
    print(f"mean return over {len(returns)} episodes: {mean_return(infos):.2f}")
    if args.video is not None:
        print(f"videos: {Path(args.video).resolve()}")


def _sweep(args: argparse.Namespace) -> int:
    from ._sweep import load_sweep
    from ._sweep_launch import run_sweep, sweep_report

    if args.address is not None and args.engine != "ray":
        raise ValueError("--address is for --engine ray (the Ray cluster to run on)")
    sweep = load_sweep(args.config_file, args.log_dir, engine=args.engine)
    n_runs = len(sweep.variants) * sweep.seeds
    if sweep.engine == "ray":
        gpus = f", {sweep.gpu_per_run:g} GPU" if sweep.gpu_per_run else ""
        at_once = f"as Ray Tune trials of {sweep.cpu_per_run} CPU{gpus} each"
    else:
        at_once = f"{sweep.n_slots} at a time"
    print(
        f"sweep {sweep.title}: {len(sweep.variants)} variants x {sweep.seeds} seeds = {n_runs} "
        f"runs, {at_once}, in {sweep.sweep_dir}" + (" (continued)" if sweep.resumed else ""),
        flush=True,
    )
    if args.dry_run:
        for log_dir, variant in zip(sweep.log_dirs, sweep.variants, strict=True):
            print(f"  {log_dir}: {json.dumps(variant)}")
        return 0
    summary = run_sweep(sweep, args.address)
    print(sweep_report(summary))
    print(f"plot: rl-suite plot {sweep.sweep_dir}")
    return 1 if summary.failed else 0


def _plot(args: argparse.Namespace) -> None:
    from ._plot import is_sweep, plot_runs, plot_sweep, sweep_runs

    if len(args.run_dirs) == 1 and is_sweep(args.run_dirs[0]):
        sweep_dir = Path(args.run_dirs[0])
        for variant, runs in sweep_runs(sweep_dir).items():
            print(f"{variant}: {len(runs)} runs")
        print(plot_sweep(sweep_dir, args.out or sweep_dir / "sweep.png", y=args.y))
        return
    if args.out is None and len(args.run_dirs) > 1:
        raise ValueError("give --out FILE.png when plotting several runs")
    out = args.out or Path(args.run_dirs[0]) / "curve.png"
    print(plot_runs(args.run_dirs, out, y=args.y))


def _list() -> None:
    from ._config import ALGOS, PRESET_ABOUT, PRESETS

    print("algorithms: " + ", ".join(ALGOS))
    print("presets:")
    width = max(map(len, PRESETS))
    algo_width = max(len(preset["algo"]) for preset in PRESETS.values())
    for name, preset in PRESETS.items():
        algo, env = preset["algo"], preset["env"]
        print(f"  {name:<{width}}  {algo:<{algo_width}}  {env:<20} {PRESET_ABOUT[name]}")


def main(argv: list[str] | None = None) -> int:
    """Run the `rl-suite` command line with `argv` (default: `sys.argv[1:]`); return the exit code."""
    from ._stopped import RunStopped

    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        import rl_suite

        print(f"rl-suite {rl_suite.__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "train":
            with _console(args.verbose):
                _train(args)
        elif args.command == "eval":
            _evaluate(args)
        elif args.command == "resume":
            from ._trainer import resume

            with _console(args.verbose):
                print(f"run directory: {resume(args.run_dir, steps=args.steps)}")
        elif args.command == "sweep":
            return _sweep(args)
        elif args.command == "plot":
            _plot(args)
        elif args.command == "list":
            _list()
        elif args.command == "demo":
            from ._demo import run_demo

            print(run_demo(args.T, args.B, args.workers, args.start_method))
    except RunStopped as stopped:
        print(f"rl-suite {args.command}: {stopped}", file=sys.stderr)
        return EXIT_STOPPED
    # (OSError: names its file; MemoryError: a buffer's size setting, as check_memory says;
    # FloatingPointError: a non-finite number, named, that stopped training)
    except (ValueError, KeyError, OSError, ImportError, MemoryError, FloatingPointError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        message = message or type(error).__name__
        print(f"rl-suite {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hints = {
            "train": " (`rl-suite resume RUN_DIR` continues from the last checkpoint)",
            "resume": " (`rl-suite resume RUN_DIR` continues from the last checkpoint)",
            "sweep": ": every run was stopped (the sweep directory keeps what they logged; with "
            "--engine ray, the same command continues the sweep from the last checkpoints)",
        }
        print(f"rl-suite {args.command}: interrupted{hints.get(args.command, '')}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
