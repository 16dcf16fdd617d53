"""One run of a sweep, as rl-launch's queue starts it (by this file's path, already pinned to
its run slot's cpus):

    python _sweep_run.py <slot affinity code> <variant dir> <run ID> <sweep.json>

It builds the run's configuration (the sweep's base, the variant's ``variant.json``, seed = run
ID), gives the runner and its workers the slot's cpus, records them in ``sweep_run.json``, and
trains into ``<variant dir>/run_<run ID>``, the directory the queue made.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

RUN_INFO_FILE = "sweep_run.json"  # the run's slot, cpus and affinity, its start and end times


def run_affinity(config: dict[str, Any], slot: dict[str, Any]) -> dict[str, Any]:
    """The runner's affinity in a sweep: the run slot's (``rl_launch.affinity_from_code``) for
    the runner's cpus and torch threads and the sampler's workers, except where the
    configuration says otherwise (``torch_threads``, ``device``, ``sampler.workers``: that
    many workers, laid over the slot's worker cpus in turn)."""
    from rl_suite._run_affinity import config_affinity

    own = config_affinity(config)  # (checks the configuration's own settings)
    affinity = {
        key: slot[key]
        for key in ("master_cpus", "master_torch_threads", "worker_torch_threads", "set_affinity")
    }
    if config["sampler"]["kind"] != "serial":
        cpus = slot["workers_cpus"]
        n_workers = len(own.get("workers_cpus", cpus[: config["sampler"]["batch_B"]]))
        affinity["workers_cpus"] = [cpus[i % len(cpus)] for i in range(n_workers)]
    affinity.update({key: own[key] for key in ("master_torch_threads", "cuda_idx") if key in own})
    return affinity


def run_config(sweep_file: str | Path, log_dir: str | Path, run_ID: int) -> dict[str, Any]:
    """One run's configuration: the sweep's base (``sweep.json``), the variant's settings
    (``<log_dir>/variant.json``) and seed = run ID."""
    import json

    from rl_launch import load_variant
    from rl_suite._sweep import variant_config

    base = json.loads(Path(sweep_file).read_text(encoding="utf-8"))["base_config"]
    return variant_config(base, load_variant(log_dir), seed=run_ID)


def main(argv: list[str] | None = None) -> int:
    started = time.time()  # (before the imports, which take seconds)
    import os

    from rl_launch import affinity_from_code, read_launch_args
    from rl_suite._sweep import write_json
    from rl_suite._trainer import train

    args = read_launch_args(argv)
    if len(args.args) != 1:
        raise ValueError(f"expected one argument after the run ID, sweep.json; got {args.args}")
    config = run_config(args.args[0], args.log_dir, args.run_ID)
    slot = affinity_from_code(args.affinity_code)
    assert isinstance(slot, dict)  # (a sweep's runs are of one process: see load_sweep)
    affinity = run_affinity(config, slot)
    info_file = Path(args.log_dir).resolve() / f"run_{args.run_ID}" / RUN_INFO_FILE
    info = {
        "affinity_code": args.affinity_code,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "affinity": affinity,
        "started": started,
    }
    write_json(info_file, info)
    run_dir = train(config, args.log_dir, affinity=affinity)
    write_json(info_file, {**info, "finished": time.time()})
    print(f"run directory: {run_dir}")
    return 0


if __name__ == "__main__":
    # Started by path (the queue runs a script file), so sys.path[0] is this package's folder,
    # whose _-named modules must not shadow top-level ones: import from the installed package.
    if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    sys.exit(main())
