"""Where else a run's rows go: Weights & Biases and MLflow (TensorBoard: the logger's summary
writer), each an optional extra, each given every numeric column of every ``progress.csv``
row at the row's iteration, and the run's parameters once."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

__all__ = ["LOG_OUTPUTS", "MlflowOutput", "RowOutput", "WandbOutput", "mlflow_key"]

LOG_OUTPUTS = ("tensorboard", "wandb", "mlflow")


class RowOutput(Protocol):
    def write(self, row: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


_MODULES = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def check_outputs(names: Any) -> tuple[str, ...]:
    """``names`` (a list, or one comma-separated string) checked against ``LOG_OUTPUTS``,
    each output's library imported (an ImportError naming the extra, before any work)."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    names = tuple(str(n).strip() for n in names or ())
    unknown = [n for n in names if n not in LOG_OUTPUTS]
    if unknown:
        raise ValueError(f"log_to: unknown output {unknown[0]!r}; there are {LOG_OUTPUTS}")
    for name in names:
        _require(_MODULES[name], name)
    return names


def open_outputs(
    names: tuple[str, ...], run_dir: Path, name: str, params: Mapping[str, Any]
) -> list[RowOutput]:
    """The outputs ``names`` asks for besides TensorBoard, for the run in ``run_dir`` (a
    resumed run continues its W&B and MLflow runs: each is found from the directory)."""
    outputs: list[RowOutput] = []
    if "wandb" in names:
        outputs.append(WandbOutput(run_dir, name, params))
    if "mlflow" in names:
        outputs.append(MlflowOutput(run_dir, name, params))
    return outputs


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"log_to {extra!r} needs {error.name or module}: pip install "
            f"'rl-runners[{extra}]' (or 'rl-suite[{extra}]')"
        ) from error


def _run_key(run_dir: Path) -> str:
    """A stable id for the run in ``run_dir`` (the same when it is resumed)."""
    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]


class WandbOutput:
    """A W&B run (project ``$WANDB_PROJECT``, else ``rl-suite``; its files under the run
    directory; offline with ``WANDB_MODE=offline``), resumed with the run directory."""

    def __init__(self, run_dir: Path, name: str, params: Mapping[str, Any]):
        wandb = _require("wandb", "wandb")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "rl-suite"),
            name=name,
            id=_run_key(run_dir),
            resume="allow",
            dir=str(run_dir),
            config=dict(params),
            reinit="create_new",
        )

    def write(self, row: Mapping[str, float], step: int) -> None:
        self.run.log(dict(row), step=step)

    def close(self) -> None:
        """Finish the run, then stop W&B's service process (a run leaves no child behind;
        its files are complete once it has stopped)."""
        self.run.finish()
        _require("wandb", "wandb").teardown()


def mlflow_key(key: str) -> str:
    """``key`` as an MLflow metric name (letters, digits, ``_-. /`` only): ``CumTime (s)``
    becomes ``CumTime _s_``."""
    return re.sub(r"[^\w\-. /]", "_", key)


class MlflowOutput:
    """An MLflow run (tracking URI ``$MLFLOW_TRACKING_URI``, experiment
    ``$MLFLOW_EXPERIMENT_NAME`` else ``rl-suite``), tagged with the run directory, which a
    resume finds again; the parameters flattened (``runner.log_interval_steps``). Metric names
    as ``mlflow_key`` makes them."""

    def __init__(self, run_dir: Path, name: str, params: Mapping[str, Any]):
        mlflow = _require("mlflow", "mlflow")
        self.client = mlflow.MlflowClient()
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "rl-suite")
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(experiment_name)
        )
        key = _run_key(run_dir)
        found = self.client.search_runs([experiment_id], f"tags.rl_run_key = '{key}'")
        if found:
            self.run_id = found[0].info.run_id
            return
        tags = {"rl_run_key": key, "rl_run_dir": str(run_dir.resolve())}
        self.run_id = self.client.create_run(experiment_id, tags=tags, run_name=name).info.run_id
        params_ = [mlflow.entities.Param(k, v) for k, v in _flat(params).items()]
        for start in range(0, len(params_), 100):  # (MLflow's batch limit)
            self.client.log_batch(self.run_id, params=params_[start : start + 100])

    def write(self, row: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), float(v), now, step) for k, v in row.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested parameters as ``{"a.b": "value"}`` (MLflow's parameters are flat strings)."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value)[:6000]
    return flat
