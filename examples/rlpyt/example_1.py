"""rlpyt's ``examples/example_1.py`` with its imports changed to rl-suite's: DQN on one Atari
game, the serial sampler (everything in this one process, easy to debug), a snapshot of the
run written at every log interval (``snapshot_mode="last"``: ``params.pt`` and the emulator
states beside it) and an evaluation of 5 games there.

    python examples/rlpyt/example_1.py --game pong        # rlpyt's 50M steps
    python examples/rlpyt/example_1.py --n_steps 5e4      # a short run
    python examples/rlpyt/example_1.py --n_steps 1e5 --resume data/local/.../example_1/run_0

The run directory is ``data/local/<date>/<time>/example_1/run_0`` (rlpyt's place for a
relative ``log_dir``). ``--n_steps`` and ``--resume RUN_DIR`` (continue that run up to
``--n_steps``, after a crash or a stop) are additions; the rest is rlpyt's script.
``integration_tests/test_rlpyt_scripts.py`` runs it to its end and resumes it.
"""

from pathlib import Path

from rl_suite import (
    DQN,
    AtariDqnAgent,
    AtariEnv,
    AtariTrajInfo,
    MinibatchRlEval,
    SerialSampler,
    logger_context,
)


def build_runner(game="pong", cuda_idx=None, n_steps=50e6):
    sampler = SerialSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,  # the default trajectory info, plus the game's score
        env_kwargs=dict(game=game),
        eval_env_kwargs=dict(game=game),
        batch_T=4,  # four steps of the environment per sampler iteration
        batch_B=1,
        max_decorrelation_steps=0,
        eval_n_envs=10,
        eval_max_steps=int(10e3),
        eval_max_trajectories=5,
    )
    algo = DQN(min_steps_learn=1e3)  # otherwise DQN's defaults
    agent = AtariDqnAgent()
    return MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=1e3,
        affinity=dict(cuda_idx=cuda_idx),
    )


def build_and_train(game="pong", run_ID=0, cuda_idx=None, n_steps=50e6, resume=None):
    runner = build_runner(game, cuda_idx, n_steps)
    config = dict(game=game)
    name = "dqn_" + game
    if resume is not None:  # the same run directory, its checkpoint continued
        run_dir = Path(resume)
        run_ID = run_dir.name.removeprefix("run_")
        with logger_context(
            run_dir.parent, run_ID, name, snapshot_mode="last", override_prefix=True
        ):
            runner.resume(run_dir)
        return run_dir
    log_dir = "example_1"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last") as run_dir:
        runner.train()
    return run_dir


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--game", help="Atari game", default="pong")
    parser.add_argument("--run_ID", help="run identifier (int)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="environment steps", type=float, default=50e6)
    parser.add_argument("--resume", help="continue this run directory", default=None)
    args = parser.parse_args()
    build_and_train(
        game=args.game,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        resume=args.resume,
    )
