"""Cross-package sessions: lint, one test session per package install, integration, benchmarks.

Every session that needs torch installs `torch==2.13.0` first, so that pip never resolves a bare
`torch` requirement on its own (which would pull the CUDA build). Packages are always installed
from their local paths, not editable, together with the sibling packages they depend on.
"""

import ast
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parent
PACKAGES = ROOT / "packages"
TORCH = "torch==2.13.0"
TEST_TOOLS = ["pytest", "hypothesis"]
LINT_TOOLS = ["ruff", "import-linter", "mypy", "types-psutil", "types-tqdm"]
# The end-to-end tests' install: MuJoCo (InvertedPendulum, Hopper) and matplotlib (the trainer's
# plots) come from the umbrella's own extras, so the tests also prove that the extras work.
END_TO_END = "rl-suite[mujoco,plot]"
# Distributions whose import name is not the distribution name with "_" for "-".
MODULE_NAMES = {"ale-py": "ale_py", "opencv-python": "cv2"}
TEST_SPECS = [
    "rl-arrays",  # numpy only: proves the torch-free install works
    "rl-arrays[torch]",
    "rl-replay",  # numpy only
    "rl-replay[torch]",  # the torch frame gathers
    "rl-samplers",
    "rl-samplers[atari]",
    "rl-agents",
    "rl-agents[onnx]",  # export_policy(format="onnx"), run with onnxruntime
    "rl-algos",
    "rl-runners",
    "rl-launch",
    "rl-suite[plot]",
]

# The promise that rl-arrays installs with numpy and nothing else, checked literally.
EXACT_INSTALLS = {"rl-arrays": {"rl-arrays", "numpy"}}
INSTALLER = {"pip", "setuptools", "wheel"}

nox.options.sessions = ["lint", "tests", "integration", "ray", "benchmarks"]
nox.options.reuse_venv = "no"


def _project(dist: str) -> dict:
    """The [project] table of packages/<dist>/pyproject.toml."""
    with open(PACKAGES / dist / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _requirements(dist: str, extras: set[str] | None = None) -> list[Requirement]:
    """The requirements of `dist` with the given extras (all of its extras when None)."""
    project = _project(dist)
    optional = project.get("optional-dependencies", {})
    chosen = optional if extras is None else {e: optional[e] for e in extras}
    reqs = project.get("dependencies", []) + [r for rs in chosen.values() for r in rs]
    return [Requirement(r) for r in reqs]


def _is_sibling(name: str) -> bool:
    return (PACKAGES / canonicalize_name(name)).is_dir()


def _closure(spec: str) -> dict[str, set[str]]:
    """The siblings that installing `spec` brings, each with the extras it is needed with."""
    root = Requirement(spec)
    closure: dict[str, set[str]] = {}
    todo = [(canonicalize_name(root.name), set(root.extras))]
    while todo:
        name, extras = todo.pop()
        if name in closure and extras <= closure[name]:
            continue
        closure.setdefault(name, set()).update(extras)
        todo += [
            (canonicalize_name(r.name), set(r.extras))
            for r in _requirements(name, extras)
            if _is_sibling(r.name)
        ]
    return closure


def _third_party(closure: Mapping[str, set[str] | None]) -> set[str]:
    """The third-party distributions the siblings in `closure` declare (canonical names)."""
    return {
        canonicalize_name(r.name)
        for dist, extras in closure.items()
        for r in _requirements(dist, extras)
        if not _is_sibling(r.name)
    }


def _install(session: nox.Session, spec: str, *tools: str) -> dict[str, set[str]]:
    """Install `spec`, its sibling closure from local paths and `tools` (torch first if needed)."""
    closure = _closure(spec)
    if "torch" in _third_party(closure):
        session.install(TORCH)
    paths = [
        f"{PACKAGES / dist}[{','.join(sorted(extras))}]" if extras else str(PACKAGES / dist)
        for dist, extras in closure.items()
    ]
    session.install(*tools, *paths)
    return closure


def _check_installed(session: nox.Session, spec: str, closure: dict[str, set[str]]) -> None:
    """Fail if a sibling or a third-party package declared in the repo, but not by `spec`, got in.

    Specs listed in EXACT_INSTALLS must bring exactly the distributions named there.
    """
    listing = session.run("python", "-m", "pip", "list", "--format=json", silent=True, stderr=None)
    installed = {canonicalize_name(d["name"]) for d in json.loads(listing)} - INSTALLER
    session.log(f"installing {spec} brought: {', '.join(sorted(installed))}")
    every = {p.parent.name: None for p in PACKAGES.glob("*/pyproject.toml")}
    watched = set(every) | _third_party(every)
    unexpected = (installed & watched) - set(closure) - _third_party(closure)
    if spec in EXACT_INSTALLS and installed != EXACT_INSTALLS[spec]:
        unexpected |= installed - EXACT_INSTALLS[spec]
    if unexpected:
        session.error(f"installing {spec} brought undeclared packages: {sorted(unexpected)}")


def _discard_venv(session: nox.Session) -> None:
    """Delete a passed session's virtual environment (a failed one keeps its own to look into):
    with torch in most of them, one run's sessions would otherwise keep about 13 GB on disk."""
    shutil.rmtree(session.virtualenv.location, ignore_errors=True)


def _pytest(session: nox.Session, tests: Path, *args: str) -> None:
    """Run pytest on `tests`, or only say so when it has no test file yet.

    pytest is not run at all then, rather than accepting its "no tests collected" exit code 5, so
    that the run's output never ends on a misleading "no tests ran".
    """
    if not (any(tests.rglob("test_*.py")) or any(tests.rglob("*_test.py"))):
        session.log(f"no test files in {tests.name}/ yet: nothing to run")
        return
    session.run("pytest", *args, str(tests), *session.posargs)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `tree` outside `if TYPE_CHECKING:` blocks (imports there are for the type
    checker only, e.g. typing_extensions, which mypy brings)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.orelse:
                yield child
                yield from _runtime_nodes(child)
            continue
        yield node
        yield from _runtime_nodes(node)


def _undeclared_imports() -> list[str]:
    """`file:line` notes for absolute imports in packages/*/src that the package does not declare."""
    problems = []
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        dist = pyproject.parent.name
        declared = {dist} | {canonicalize_name(r.name) for r in _requirements(dist)}
        allowed = set(sys.stdlib_module_names) | {
            MODULE_NAMES.get(d, d.replace("-", "_")) for d in declared
        }
        for path in sorted((pyproject.parent / "src").rglob("*.py")):
            for node in _runtime_nodes(ast.parse(path.read_bytes(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                problems += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {dist} does not declare {top!r}"
                    for top in {name.partition(".")[0] for name in names} - allowed
                ]
    return problems


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff, the import-boundary contracts, imports checked against declared dependencies, and
    mypy over every src tree (configured in pyproject.toml; it needs the packages' dependencies,
    so the umbrella package is installed with them)."""
    problems = _undeclared_imports()
    if problems:
        session.error("undeclared imports:\n" + "\n".join(problems))
    _install(session, "rl-suite[plot]", *LINT_TOOLS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    sources = os.pathsep.join(str(src) for src in sorted(PACKAGES.glob("*/src")))
    session.run("lint-imports", env={"PYTHONPATH": sources})
    session.run("mypy")
    _discard_venv(session)


@nox.session
@nox.parametrize("spec", [nox.param(spec, id=spec) for spec in TEST_SPECS])
def tests(session: nox.Session, spec: str) -> None:
    """Install one package alone (not editable), import it and run its tests from outside the tree."""
    closure = _install(session, spec)
    _check_installed(session, spec, closure)
    session.install(*TEST_TOOLS)
    dist = Requirement(spec).name
    tmp = Path(session.create_tmp()).resolve()
    shutil.rmtree(tmp / "tests", ignore_errors=True)
    if (PACKAGES / dist / "tests").is_dir():  # git keeps no empty folder
        shutil.copytree(PACKAGES / dist / "tests", tmp / "tests")
    shutil.copy(ROOT / "pyproject.toml", tmp)  # the shared pytest configuration (markers ...)
    session.chdir(tmp)
    session.run("python", "-c", f"import {dist.replace('-', '_')}")
    _pytest(session, tmp / "tests", "--rootdir", str(tmp), "-p", "no:cacheprovider")
    session.chdir(ROOT)
    _discard_venv(session)


LEARNING_TESTS = ("test_learning.py", "test_memory_task.py")
# Learning comparisons beyond what a capability needs to be shown working: the learning
# session runs them, the integration session (CI) leaves them out to stay short.
COMPARISON_TESTS = ("test_asymmetric_ppo.py",)


@nox.session
def integration(session: nox.Session) -> None:
    """Install every package (not editable) and run the end-to-end tests (learning tests with
    one seed each), one pytest worker per core: most of them are single-threaded trainings
    (on 2 cores, 6 to 9 minutes in CI instead of 13)."""
    # rsl_rl: test_rsl_rl_adapter.py; pytest-xdist: the workers
    _install(session, END_TO_END, *TEST_TOOLS, "rsl-rl-lib", "pytest-xdist")
    comparisons = [f"--ignore={ROOT / 'integration_tests' / name}" for name in COMPARISON_TESTS]
    workers = ["-n", "auto", "--dist", "worksteal"]
    _pytest(session, ROOT / "integration_tests", *workers, *comparisons)
    _discard_venv(session)


@nox.session
def ray(session: nox.Session) -> None:
    """`rl-suite sweep --engine ray` with the umbrella's `ray` extra (and `plot`, for the sweep's
    plot): tiny sweeps on a local Ray instance the tests start, a trial killed midway included
    (about 2 minutes on 2 cores)."""
    _install(session, "rl-suite[plot,ray]", *TEST_TOOLS)
    tests = PACKAGES / "rl-suite" / "tests" / "test_ray_sweep.py"
    session.run("pytest", str(tests), "-p", "no:cacheprovider", *session.posargs)
    _discard_venv(session)


@nox.session
def learning(session: nox.Session) -> None:
    """The learning tests with every seed (0-4, or `-- seeds` given as `nox -s learning -- 0,1`),
    then a table of each run's best evaluation return within its step budget ("ran to": where
    the run stopped, at the first evaluation that reached the bar or at the end of the log
    interval that holds the budget). Not part of the default run: about an hour on a 2-core
    machine."""
    _install(session, END_TO_END, *TEST_TOOLS)
    seeds = session.posargs[0] if session.posargs else "0,1,2,3,4"
    results = Path(session.create_tmp()).resolve() / "learning_results.jsonl"
    results.unlink(missing_ok=True)
    env = {"RL_SUITE_LEARNING_SEEDS": seeds, "RL_SUITE_LEARNING_RESULTS": str(results)}
    try:
        names = LEARNING_TESTS + COMPARISON_TESTS
        tests = [str(ROOT / "integration_tests" / name) for name in names]
        session.run("pytest", *tests, env=env)
    finally:
        if results.exists():
            rows = [json.loads(line) for line in results.read_text().splitlines()]
            lines = [f"{'case':<46} {'seed':>4} {'best return':>11} {'bar':>5} {'ran to':>8}"]
            lines += [
                f"{r['case']:<46} {r['seed']:>4} {r['best_return']:>11.1f} {r['bar']:>5} "
                f"{r['steps']:>8}"
                if "best_return" in r
                else f"{r['case']:<46} {r['seed']:>4} {json.dumps(r)}"  # (a comparison)
                for r in rows
            ]
            session.log("learning results:\n" + "\n".join(lines))
    _discard_venv(session)


@nox.session
def benchmarks(session: nox.Session) -> None:
    """Install every package and the peers, and check that each benchmarks/*.py runs with --quick."""
    _install(session, "rl-suite")
    # The peers the benchmarks compare against, installed here only and never declared by a
    # package; named with torch so that pip keeps the CPU build instead of pulling another one.
    peers = ["stable-baselines3", "rsl-rl-lib"]
    # MuJoCo for sac_halfcheetah.py, matplotlib for the curves it draws, pytest for gpu.py's
    # run of the tests marked cuda.
    session.install(TORCH, *peers, *TEST_TOOLS, "gymnasium[mujoco]", "matplotlib")
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    if not scripts:
        session.log("no benchmarks/*.py yet")
    for script in scripts:
        session.run("python", str(script), "--quick")
    _discard_venv(session)
