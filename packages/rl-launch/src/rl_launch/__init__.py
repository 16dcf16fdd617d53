"""Hardware affinity, experiment variants and a local experiment launcher (psutil only).

``encode_affinity`` describes a machine and each run's share of it in a short code;
``run_experiments`` runs a sweep's variants (``VariantLevel``, ``make_variants``) as
subprocesses pinned to free run slots; a launched script reads its arguments with
``read_launch_args``, its hardware with ``affinity_from_code`` and its settings with
``load_variant`` / ``update_config``, and makes its run directory with ``run_context``.
"""

from importlib.metadata import version

from ._affinity import (
    AffinityDict,
    Hardware,
    affinity_from_code,
    detect_hardware,
    encode_affinity,
    make_affinity,
    n_run_slots,
    visible_gpu_count,
)
from ._launcher import (
    EXPERIMENTS_TREE_FILE,
    NUM_LAUNCHED_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    ExperimentsSummary,
    LaunchArgs,
    RunResult,
    launch_experiment,
    read_launch_args,
    run_experiments,
)
from ._logging import PARAMS_FILE, PROGRESS_FILE, add_exp_param, check_progress, run_context
from ._variant import (
    VARIANT_FILE,
    VariantLevel,
    load_variant,
    make_variants,
    save_variant,
    update_config,
)

__version__ = version("rl-launch")

__all__ = [
    "EXPERIMENTS_TREE_FILE",
    "NUM_LAUNCHED_FILE",
    "PARAMS_FILE",
    "PROGRESS_FILE",
    "STDERR_FILE",
    "STDOUT_FILE",
    "VARIANT_FILE",
    "AffinityDict",
    "ExperimentsSummary",
    "Hardware",
    "LaunchArgs",
    "RunResult",
    "VariantLevel",
    "add_exp_param",
    "affinity_from_code",
    "check_progress",
    "detect_hardware",
    "encode_affinity",
    "launch_experiment",
    "load_variant",
    "make_affinity",
    "make_variants",
    "n_run_slots",
    "read_launch_args",
    "run_context",
    "run_experiments",
    "save_variant",
    "update_config",
    "visible_gpu_count",
]
