"""``logger_context(log_to=...)``: TensorBoard, Weights & Biases (offline) and MLflow (a file
store) get the same numbers as ``progress.csv``, read back with each library's own reader."""

import csv
import json
import struct
import time

import pytest
from rl_runners_toys import make

from rl_runners import MinibatchRl, logger_context, mlflow_key

N_STEPS, INTERVAL = 64, 16  # 4 rows


def train(tmp_path, log_to, n_steps=N_STEPS, resume=False):
    algo, agent, sampler = make()
    runner = MinibatchRl(algo, agent, sampler, n_steps=n_steps, seed=1, log_interval_steps=INTERVAL)
    params = None if resume else {"config": {"algo": "toy", "runner": {"interval": INTERVAL}}}
    with logger_context(
        tmp_path, 0, "outputs", params, "last", override_prefix=True, log_to=log_to
    ) as run_dir:
        runner.resume(run_dir) if resume else runner.train()
    return run_dir


def progress(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows] for k in rows[0] if rows[0][k] not in ("", "nan")}


def test_tensorboard_scalars_equal_progress_csv(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator", reason="the tensorboard extra"
    )
    run_dir = train(tmp_path, "tensorboard")
    events = event_accumulator.EventAccumulator(str(run_dir))
    events.Reload()
    for key, values in progress(run_dir).items():
        assert [e.value for e in events.Scalars(key)] == pytest.approx(values, rel=1e-6), key


def test_mlflow_metrics_and_params_equal_the_runs_and_a_resume_continues_them(
    tmp_path, monkeypatch
):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # (MLflow 3 prefers a database)
    run_dir = train(tmp_path, ["mlflow"], n_steps=N_STEPS // 2)
    train(tmp_path, ["mlflow"], resume=True)
    client = mlflow.MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("rl-suite").experiment_id])
    assert run.data.params["config.runner.interval"] == str(INTERVAL)
    assert run.data.tags["rl_run_dir"] == str(run_dir)
    for key, values in progress(run_dir).items():
        history = client.get_metric_history(run.info.run_id, mlflow_key(key))
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == values, key


def _wandb_records(path):
    """The records of a W&B offline run file (LevelDB's log format: 32 KiB blocks of chunks,
    each with a 7-byte header: CRC, length, type), as W&B's protobuf ``Record``s."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, records, pieces = path.read_bytes(), 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # (a block's tail too short for a header: padding)
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pieces = chunk if kind in (1, 2) else pieces + chunk  # full / first, middle / last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
    return records


def test_wandb_offline_history_equals_progress_csv(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = train(tmp_path, "wandb")
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    for _ in range(300):  # (W&B's service may still be writing the file after finish())
        records = _wandb_records(run_file)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        time.sleep(0.1)
    history = [
        {
            item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in r.history.item
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    for key, values in progress(run_dir).items():
        assert [row[key] for row in history] == pytest.approx(values, rel=1e-9), key
    config = next(r.run.config for r in records if r.WhichOneof("record_type") == "run")
    saved = {
        item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in config.update
    }
    assert saved["config"] == {"algo": "toy", "runner": {"interval": INTERVAL}}  # params.json's


def test_an_unknown_output_is_named(tmp_path):
    with pytest.raises(ValueError, match="unknown output 'neptune'"):
        train(tmp_path, "tensorboard,neptune")


def test_an_output_whose_library_is_missing_is_named_before_any_work(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mlflow", None)  # (imports of it fail)
    with pytest.raises(ImportError, match=r"pip install 'rl-runners\[mlflow\]'"):
        train(tmp_path, "mlflow")
    assert not (tmp_path / "run_0").exists()
