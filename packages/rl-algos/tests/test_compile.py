"""``compile``: every algorithm's compiled updates train as its eager ones (the same parameters
after several iterations, within float rounding), compile each loss once (no recompiling as
schedules move), refuse a loss that does not compile in one graph, and refuse settings that
a captured update cannot take. The CUDA-graph replay runs only where a GPU is present."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch._dynamo
from rl_algos_fakes import LinearAgent, LstmAgent, random_batch
from test_cat_dqn import CatAgent
from test_dqn import QAgent, indexed_samples
from test_dqn import examples as dqn_examples
from test_qpg_algos import SMALL, FakeDdpgAgent, FakeSacAgent, examples, params, random_samples
from test_r2d1 import R2d1Agent, rollout, small_r2d1
from test_r2d1 import examples as r2d1_examples

from rl_algos import A2C, DDPG, DQN, PPO, SAC, TD3, CategoricalDQN
from rl_algos._compile import MIN_TORCH, _layout, _strided_copy, make_capturable
from rl_arrays import BatchSpec

FAST = {"backend": "aot_eager"}  # traced and compiled as inductor's input, run eagerly
# An older torch refuses compile (the last test); every other test here compiles.
pytestmark = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split(".")[:2]) < MIN_TORCH,
    reason=f"compile needs torch {MIN_TORCH}",
)
OBS, ACTIONS = 4, 3


def on_device(agent, device):
    """``agent`` (a fake of the tests) moved to ``device``."""
    if device != "cpu":
        for module in vars(agent).values():
            if isinstance(module, torch.nn.Module):
                module.to(device)
        if isinstance(agent, torch.nn.Module):
            agent.to(device)
        agent.device = torch.device(device)
    return agent


def qpg_run(cls, make_agent, compile, itrs=4, device="cpu", **kwargs):
    torch.manual_seed(0)
    algo = cls(min_steps_learn=0, batch_size=8, compile=compile, **SMALL, **kwargs)
    agent = on_device(make_agent(), device)
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(8, 2), examples=examples())
    infos = [algo.optimize_agent(itr, random_samples(8, 2, seed=itr)) for itr in range(itrs)]
    return infos, params(*agent._all()), algo


def dqn_run(cls, make_agent, compile, itrs=4, device="cpu", **kwargs):
    torch.manual_seed(0)
    agent = on_device(make_agent(), device)
    algo = cls(
        min_steps_learn=0,
        batch_size=8,
        replay_size=400,
        replay_ratio=4,
        n_step_return=2,
        target_update_interval=3,
        compile=compile,
        **kwargs,
    )
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(8, 2), examples=dqn_examples())
    infos = [algo.optimize_agent(itr, indexed_samples(8, 2, 3, seed=itr)) for itr in range(itrs)]
    return infos, [p.detach().clone() for p in agent.parameters()], algo


def q_agent():
    return QAgent(
        torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    )


def cat_agent():
    return CatAgent(torch.nn.Linear(2, 3 * 5), 3, 5)


def r2d1_run(compile, itrs=10):
    torch.manual_seed(0)
    agent = R2d1Agent()
    algo = small_r2d1(compile=compile)
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(4, 2), examples=r2d1_examples())
    state, infos = None, []
    for itr in range(itrs):
        samples, state = rollout(agent.model and agent, 4, 2, state, seed=itr)
        infos.append(algo.optimize_agent(itr, samples))
    return infos, [p.detach().clone() for p in agent.parameters()], algo


def pg_run(cls, compile, recurrent=False, itrs=3, device="cpu", **kwargs):
    torch.manual_seed(0)
    agent = on_device(LstmAgent(OBS, ACTIONS) if recurrent else LinearAgent(OBS, ACTIONS), device)
    algo = cls(compile=compile, **kwargs)
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(5, 4), mid_batch_reset=True)
    infos = []
    for itr in range(itrs):
        state0 = agent.random_state(4, torch.Generator().manual_seed(itr)) if recurrent else None
        samples = random_batch(agent, T=5, B=4, seed=itr, timeout=True, prev_rnn_state0=state0)
        infos.append(algo.optimize_agent(itr, samples))
    return infos, [p.detach().clone() for p in agent.parameters()], algo


RUNS = {
    "DQN": lambda c: dqn_run(DQN, q_agent, c),
    "DQN-double-prioritized": lambda c: dqn_run(
        DQN, q_agent, c, double_dqn=True, prioritized_replay=True, bootstrap_timelimit=True
    ),
    "CategoricalDQN": lambda c: dqn_run(CategoricalDQN, cat_agent, c),
    "R2D1": r2d1_run,
    "DDPG": lambda c: qpg_run(DDPG, lambda: FakeDdpgAgent(seed=0), c),
    "TD3": lambda c: qpg_run(TD3, lambda: FakeDdpgAgent(twin=True, seed=0), c),
    "SAC": lambda c: qpg_run(SAC, lambda: FakeSacAgent(seed=0), c),
    "A2C": lambda c: pg_run(A2C, c, gae_lambda=0.95),
    "PPO": lambda c: pg_run(PPO, c, gae_lambda=0.95, value_clip=0.2, minibatches=3),
    "PPO-minibatch-advantage": lambda c: pg_run(
        PPO, c, normalize_advantage="minibatch", clip_grad_separately=False
    ),
    "PPO-recurrent": lambda c: pg_run(PPO, c, recurrent=True, minibatches=2),
    "PPO-adaptive-lr": lambda c: pg_run(
        PPO, c, desired_kl=0.01, linear_lr_schedule=False, minibatches=2
    ),
}


def assert_same_training(eager, compiled, atol=1e-5):
    for a, b in zip(eager[1], compiled[1], strict=True):
        torch.testing.assert_close(b, a, atol=atol, rtol=1e-4)
    for info_a, info_b in zip(eager[0], compiled[0], strict=True):
        assert info_a._fields == info_b._fields
        for values_a, values_b in zip(info_a, info_b, strict=True):
            if isinstance(values_b, torch.Tensor):  # (compiled: left on the device)
                values_b = values_b.tolist()
            assert values_b == pytest.approx(values_a, rel=1e-4, abs=1e-5)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", RUNS)
def test_compiled_updates_train_as_eager_ones(name):
    eager = RUNS[name](False)
    compiled = RUNS[name](FAST)
    assert_same_training(eager, compiled)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # (it did compile)
    # The diagnostics stay tensors, for the runner to read once per log row.
    assert any(isinstance(values, torch.Tensor) for values in compiled[0][-1])


@pytest.mark.parametrize("name", ["SAC", "PPO", "DQN-double-prioritized"])
def test_each_loss_compiles_once_however_long_the_run(name):
    """The schedules (PPO's learning rate and ratio clip, DQN's beta, the target updates)
    move without recompiling: as many graphs after 6 iterations as after 3."""
    run = {
        "SAC": lambda itrs: qpg_run(SAC, lambda: FakeSacAgent(seed=0), FAST, itrs=itrs),
        "PPO": lambda itrs: pg_run(PPO, FAST, itrs=itrs, minibatches=2),
        "DQN-double-prioritized": lambda itrs: dqn_run(
            DQN, q_agent, FAST, itrs=itrs, double_dqn=True, prioritized_replay=True
        ),
    }[name]
    run(3)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._dynamo.utils.counters.clear()
    run(6)  # (the same code again: cached, plus whatever the longer run needs anew)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0, graphs
    assert not torch._dynamo.utils.counters["recompiles"]


def test_a_loss_that_breaks_the_graph_is_an_error_naming_the_cause():
    class PrintingAgent(QAgent):
        def __call__(self, observation, prev_action, prev_reward):
            print("not traceable")
            return super().__call__(observation, prev_action, prev_reward)

    with pytest.raises(Exception, match="print"):
        dqn_run(DQN, lambda: PrintingAgent(q_agent().model), FAST, itrs=1)


@pytest.mark.parametrize(
    "value", ["yes", 1.5, {"fullgraph": False}, {1: 2}, {"mode": "reduce-overhead"}]
)
def test_bad_compile_values_are_named(value):
    with pytest.raises(ValueError, match="compile"):
        DQN(compile=value)


def test_what_a_captured_step_cannot_take_is_refused_before_training():
    algo = PPO(compile=FAST, recurrent_minibatch="padded")
    with pytest.raises(ValueError, match="padded"):
        algo.initialize(LstmAgent(OBS, ACTIONS), n_itr=2, batch_spec=BatchSpec(5, 4))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor needs a C++ compiler")
def test_inductor_compiled_sac_trains_as_eager():
    """``compile=True`` itself (inductor's generated code) on the CPU."""
    eager = qpg_run(SAC, lambda: FakeSacAgent(seed=0), False, itrs=3)
    compiled = qpg_run(SAC, lambda: FakeSacAgent(seed=0), True, itrs=3)
    assert_same_training(eager, compiled, atol=1e-4)


CUDA_RUNS = {
    "DQN-double-prioritized": lambda c: dqn_run(
        DQN, q_agent, c, itrs=8, device="cuda", double_dqn=True, prioritized_replay=True
    ),
    "DDPG": lambda c: qpg_run(DDPG, lambda: FakeDdpgAgent(seed=0), c, itrs=8, device="cuda"),
    "TD3": lambda c: qpg_run(TD3, lambda: FakeDdpgAgent(twin=True, seed=0), c, 8, "cuda"),
    "SAC": lambda c: qpg_run(SAC, lambda: FakeSacAgent(seed=0), c, itrs=8, device="cuda"),
    "A2C": lambda c: pg_run(A2C, c, itrs=6, device="cuda"),
    "PPO": lambda c: pg_run(PPO, c, itrs=3, device="cuda", minibatches=3),
    "PPO-adaptive-lr": lambda c: pg_run(
        PPO, c, itrs=3, device="cuda", desired_kl=0.01, linear_lr_schedule=False
    ),
}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", CUDA_RUNS)
def test_cuda_graph_steps_train_as_eager_ones(name):
    """On CUDA the update steps are captured and replayed (after their warm-up steps), and
    train as eager ones (the fake agents draw no random numbers)."""
    eager = CUDA_RUNS[name](False)
    graphed = CUDA_RUNS[name](FAST)
    assert graphed[2]._steps._captured  # replayed, not only warmed up
    assert_same_training(eager, graphed, atol=1e-4)


@pytest.mark.parametrize("cls", [PPO, SAC])
def test_several_processes_are_refused(cls):
    algo = cls(compile=FAST)
    agent = LinearAgent(OBS, ACTIONS) if cls is PPO else FakeSacAgent(seed=0)
    with pytest.raises(ValueError, match="world_size=2"):
        algo.initialize(
            agent, n_itr=2, batch_spec=BatchSpec(5, 4), examples=examples(), world_size=2
        )


class _CapturingStream:
    def is_capturing(self):
        return True


def test_optimizers_made_capturable_pass_torchs_check_under_capture(monkeypatch):
    """torch refuses an optimizer step under CUDA-graph capture unless every group is
    capturable, fused Adam (our default) included: the check, run as under a capture."""
    optimizers = [
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3, **kwargs)
        for kwargs in ({"fused": True}, {})
    ]
    # A capture on CUDA as torch 2.13 asks for it, then as 2.11 (what the GPU machines run).
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda **kwargs: torch.device("cuda")
    )
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda *args: _CapturingStream())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for optimizer in optimizers:
        with pytest.raises(RuntimeError, match="capturable is False"):
            optimizer._accelerator_graph_capture_health_check()
        make_capturable([optimizer], "test")
        optimizer._accelerator_graph_capture_health_check()
        (group,) = optimizer.param_groups
        assert group["lr"].dtype == torch.float32 and float(group["lr"]) == pytest.approx(1e-3)


def test_a_loaded_optimizer_state_is_moved_to_the_parameters_device():
    """A checkpoint loads on the CPU: its step counts and learning rates must join the
    parameters (``meta`` stands in for the GPU) before a captured step reads them."""
    param = torch.nn.Parameter(torch.zeros(3, device="meta"))
    optimizer = torch.optim.Adam([param], lr=1e-3, foreach=False)
    saved = {
        "state": {
            0: {"step": torch.tensor(5.0), "exp_avg": torch.zeros(3), "exp_avg_sq": torch.zeros(3)}
        },
        "param_groups": [{**optimizer.state_dict()["param_groups"][0], "lr": torch.tensor(2e-3)}],
    }
    optimizer.load_state_dict(saved)
    assert optimizer.state[param]["step"].device.type == "cpu"  # (torch leaves it there)
    make_capturable([optimizer], "test")
    (group,) = optimizer.param_groups
    assert group["capturable"] and group["lr"].device.type == "meta"
    assert optimizer.state[param]["step"].device.type == "meta"


def test_an_optimizer_with_no_capturable_mode_is_refused():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    with pytest.raises(ValueError, match="SGD cannot take part"):
        make_capturable([optimizer], "test")


def test_captured_inputs_keep_their_strides():
    """A graph's static inputs are laid out as the warm-up inputs were (a contiguous copy
    of a strided view would make the compiled losses recompile inside the capture), and a
    new layout is a new graph."""
    x = torch.arange(12.0).reshape(3, 4).t()
    copy = _strided_copy(x)
    assert copy.stride() == x.stride() and torch.equal(copy, x)
    assert _layout((x,)) != _layout((x.contiguous(),))


def test_a_torch_too_old_to_compile_every_model_is_refused_naming_its_version(monkeypatch):
    """torch 2.8's compiler fails on PPO's twin MLP deep in its trace; we say why, up front."""
    monkeypatch.setattr(torch, "__version__", "2.8.0+cu128")
    for make in (lambda: PPO(compile=True), lambda: DQN(compile=FAST)):
        with pytest.raises(ValueError, match=r"torch 2\.11 or newer, found 2\.8\.0\+cu128"):
            make()
    assert PPO(compile=False).compile is False
