"""Cross-package sessions: lint, one test session per package install, integration, benchmarks.

Every session that needs torch installs `torch==2.13.0` first, so that pip never resolves a bare
`torch` requirement on its own (which would pull the CUDA build). Packages are always installed
from wheels of their local sources, not editable, together with the sibling packages they depend
on: each package's wheel is built once and kept in `.nox/wheelhouse/`, under a digest of the files
it is built from, so that the sessions of a run share it and an edited package gets a new one.
"""

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parent
PACKAGES = ROOT / "packages"
TORCH = "torch==2.13.0"
# pip byte-compiles every module it installs: torch installed into a fresh venv in 107 s with
# that and in 38 s without (the loaded 2-core machine, 2026-11-29), in each of the run's
# sessions. A session imports a small part of what it installs, which Python compiles on first
# import: so installs skip it.
NO_COMPILE = ["--no-compile"]
TEST_TOOLS = ["pytest", "hypothesis"]
# One pytest worker per core (`-n auto`), each taking the next test as it gets free (the tests'
# durations vary from milliseconds to a minute); tests marked `serial` run after them, alone.
WORKERS = ["-n", "auto", "--dist", "worksteal"]
XDIST = "pytest-xdist"
LINT_TOOLS = ["ruff", "import-linter", "mypy", "types-psutil", "types-tqdm"]
# The end-to-end tests' install: MuJoCo (InvertedPendulum, Hopper) and matplotlib (the trainer's
# plots) come from the umbrella's own extras, so the tests also prove that the extras work.
END_TO_END = "rl-suite[mujoco,plot]"
# Distributions whose import name is not the distribution name with "_" for "-".
MODULE_NAMES = {"ale-py": "ale_py", "opencv-python": "cv2", "mlflow-skinny": "mlflow"}
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
    "rl-runners[mlflow,tensorboard,wandb]",  # log_to: read back with each library's reader
    "rl-launch",
    "rl-suite[mlflow,plot,video]",  # eval --video decoded, --log-to mlflow read back
]

# The promise that rl-arrays installs with numpy and nothing else, checked literally.
EXACT_INSTALLS = {"rl-arrays": {"rl-arrays", "numpy"}}
INSTALLER = {"pip", "setuptools", "wheel"}

nox.options.sessions = [
    "lint",
    "api",
    "build",
    "compat",
    "docs",
    "tests",
    "integration",
    "ray",
    "benchmarks",
]
nox.options.reuse_venv = "no"

# The release records (tools/release.py): releases/<package>-<version>.json.
RELEASES = ROOT / "releases"
# `build`'s distributions: an sdist and a wheel of every package.
DIST = ROOT / "dist"
DIST_TOOLS = ["build", "twine", "check-wheel-contents"]
# What the READMEs tell users to install, each installed by `build` from dist/ into a fresh
# environment, with the smoke test it must pass there: a README's first example of the library
# (a path), or code of its own.
ATARI_SMOKE = """
from rl_samplers import AtariEnv, make
env = AtariEnv(game="pong")
env.reset()
assert env.step(0).observation.shape == env.observation_space.shape
make("CartPole-v1").reset()
"""
# Our distribution names that another project holds on PyPI (a different `rl-agents`, 0.1.x):
# pip, given both, may take theirs, so installs from dist/ name our wheel file for these.
TAKEN_ON_PYPI = {"rl-agents"}
AUTHOR = "The rl-suite authors"  # (in every package's metadata: how an install is told ours)
INSTALL_SMOKE = {
    "rl-arrays": "packages/rl-arrays/README.md",
    "rl-replay": "packages/rl-replay/README.md",
    "rl-replay[torch]": "packages/rl-replay/README.md",
    "rl-samplers[atari]": ATARI_SMOKE,
    "rl-suite[plot]": "packages/rl-suite/README.md",
}

# The packages' wheels, one folder per package and digest of its sources: `rl-arrays-<digest>/`.
WHEELHOUSE = ROOT / ".nox" / "wheelhouse"
# What a package's wheel is not built from: its tests/ (the wheel holds src/<module>, with the
# metadata of pyproject.toml and README.md) and the caches and build outputs that tools leave.
NOT_BUILT_FROM = {"__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}
NOT_BUILT_FROM |= {"build", "dist", ".nox", ".venv"}
# A wheel folder that no session has used for this long, and that is not its package's current
# one, is deleted when a new wheel of that package is kept (a running session's is never older).
STALE_AFTER_S = 3600


def _project(dist: str) -> dict:
    """The [project] table of packages/<dist>/pyproject.toml."""
    with open(PACKAGES / dist / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _requirements(dist: str, extras: set[str] | None = None) -> list[Requirement]:
    """The requirements of `dist` with the given extras (all of its extras when None)."""
    return _requirements_of(_project(dist), extras)


def _requirements_of(project: dict, extras: set[str] | None = None) -> list[Requirement]:
    """The requirements a [project] table declares, with `extras` (all when None)."""
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


def _source_digest(dist: str) -> str:
    """A digest of the files that packages/<dist>'s wheel is built from (names and contents)."""
    source = PACKAGES / dist
    digest = hashlib.sha256()
    for path in sorted(source.rglob("*")):
        parts = path.relative_to(source).parts
        if (
            parts[0] == "tests"
            or any(part in NOT_BUILT_FROM or part.endswith(".egg-info") for part in parts)
            or path.suffix in {".pyc", ".pyo"}
            or not path.is_file()
        ):
            continue
        content = path.read_bytes()
        name = "/".join(parts).encode()
        digest.update(b"%d:%s%d:" % (len(name), name, len(content)) + content)
    return digest.hexdigest()[:20]


def _wheels(session: nox.Session, dists: list[str]) -> dict[str, Path]:
    """The wheel of each of `dists` built from its current sources, from the wheelhouse, where
    the missing ones are built first (`pip wheel --no-deps`, in one call)."""
    wheels: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for dist in dists:
        digest = _source_digest(dist)
        folder = WHEELHOUSE / f"{dist}-{digest}"
        found = sorted(folder.glob("*.whl"))
        if len(found) == 1:
            folder.touch()  # in use: see STALE_AFTER_S
            wheels[dist] = found[0]
        else:
            missing[dist] = digest
    if not missing:
        return wheels
    built = Path(session.create_tmp()).resolve() / "wheels"
    shutil.rmtree(built, ignore_errors=True)
    sources = [str(PACKAGES / dist) for dist in missing]
    build = ["python", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(built)]
    session.run(*build, *sources, silent=True)
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    for dist, digest in missing.items():
        (wheel,) = built.glob(f"{dist.replace('-', '_')}-*.whl")
        if _source_digest(dist) != digest:  # edited while it was built: for this session only
            session.log(f"packages/{dist} changed while its wheel was built: not kept")
            wheels[dist] = wheel
            continue
        staging = built / dist
        staging.mkdir()
        wheel = wheel.rename(staging / wheel.name)
        folder = WHEELHOUSE / f"{dist}-{digest}"
        with contextlib.suppress(OSError):  # OSError: another nox run kept the same one just now
            staging.rename(folder)
        (wheels[dist],) = folder.glob("*.whl")
        for old in WHEELHOUSE.glob(f"{dist}-*"):
            stale = time.time() - old.stat().st_mtime > STALE_AFTER_S
            if old != folder and re.fullmatch(rf"{dist}-[0-9a-f]+", old.name) and stale:
                shutil.rmtree(old, ignore_errors=True)
    return wheels


def _install(session: nox.Session, spec: str, *tools: str) -> dict[str, set[str]]:
    """Install `spec`, its sibling closure from the wheelhouse and `tools` (torch first if
    needed)."""
    closure = _closure(spec)
    if "torch" in _third_party(closure):
        session.install(*NO_COMPILE, TORCH)
    wheels = _wheels(session, sorted(closure))
    paths = [
        f"{wheels[dist]}[{','.join(sorted(extras))}]" if extras else str(wheels[dist])
        for dist, extras in closure.items()
    ]
    session.install(*NO_COMPILE, *tools, *paths)
    return closure


def _check_installed(
    session: nox.Session, spec: str, closure: dict[str, set[str]], python: str = "python"
) -> None:
    """Fail if a sibling or a third-party package declared in the repo, but not by `spec`, got
    into the environment of `python`.

    Specs listed in EXACT_INSTALLS must bring exactly the distributions named there.
    """
    pip_list = [python, "-m", "pip", "list", "--format=json"]
    listing = session.run(*pip_list, silent=True, stderr=None, external=True)
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


def _has_serial_tests(tests: Path) -> bool:
    """Whether a test file under `tests` marks a test `serial` (read, not collected: collecting
    costs a pytest start with its imports, and a run that selects nothing ends on "no tests ran")."""
    marked = re.compile(r"^[^#\n]*\bmark\.serial\b", re.MULTILINE)
    return any(marked.search(path.read_text()) for path in tests.rglob("*.py"))


def _split_marker_expression(args: list[str]) -> tuple[str | None, list[str]]:
    """The `-m` expression in pytest arguments `args` (the last one, as pytest takes it) and the
    arguments without any `-m`."""
    expression, rest = None, []
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg == "-m" and args:
            expression = args.pop(0)
        elif arg.startswith("-m") and len(arg) > 2:
            expression = arg[2:].removeprefix("=")
        else:
            rest.append(arg)
    return expression, rest


def _pytest(session: nox.Session, tests: Path, *args: str, workers: bool = False) -> None:
    """Run pytest on `tests`, or only say so when it has no test file yet.

    pytest is not run at all then, rather than accepting its "no tests collected" exit code 5, so
    that the run's output never ends on a misleading "no tests ran". With `workers`, the tests run
    on pytest-xdist's WORKERS, but those marked `serial` (tests that look at the whole machine:
    /dev/shm, timings), which run after them in a second pytest call, without workers (each call
    with the `-m` given after `--`, if any, as well).
    """
    if not (any(tests.rglob("test_*.py")) or any(tests.rglob("*_test.py"))):
        session.log(f"no test files in {tests.name}/ yet: nothing to run")
        return
    if not workers:
        session.run("pytest", *args, str(tests), *session.posargs)
    elif not _has_serial_tests(tests):
        session.run("pytest", *WORKERS, *args, str(tests), *session.posargs)
    else:
        expression, posargs = _split_marker_expression(session.posargs)
        # pytest's exit code 5: the `-m` given selected no test on one side of the split
        codes = [0, 5] if expression else [0]
        for selection, run_on in (("not serial", WORKERS), ("serial", ["-n", "0"])):
            marks = f"{selection} and ({expression})" if expression else selection
            run = ["pytest", *run_on, "-m", marks, *args, str(tests), *posargs]
            session.run(*run, success_codes=codes)


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
    """Ruff, the import-boundary contracts, imports checked against declared dependencies, the
    code's shape (tools/code_shape.py: inheritance depth, class and file lengths, import
    circles, private names across modules), and mypy over every src tree (configured in
    pyproject.toml; it needs the packages' dependencies, so the umbrella package is installed
    with them)."""
    problems = _undeclared_imports()
    if problems:
        session.error("undeclared imports:\n" + "\n".join(problems))
    session.run(sys.executable, str(ROOT / "tools" / "code_shape.py"), "--check", external=True)
    _install(session, "rl-suite[plot]", *LINT_TOOLS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    sources = os.pathsep.join(str(src) for src in sorted(PACKAGES.glob("*/src")))
    session.run("lint-imports", env={"PYTHONPATH": sources})
    session.run("mypy")
    _discard_venv(session)


def _build_requires(pyproject: Path) -> list[str]:
    with open(pyproject, "rb") as f:
        return tomllib.load(f)["build-system"]["requires"]


def _first_python_block(readme: Path) -> str:
    """The code of the first ```python block of `readme`."""
    match = re.search(r"^```python\n(.*?)^```$", readme.read_text(), re.DOTALL | re.MULTILINE)
    if match is None:
        raise ValueError(f"{readme} has no ```python block")
    return match.group(1)


def _check_distributions(session: nox.Session, files: list[Path]) -> None:
    """Each package has one sdist and one wheel in `files`, each holding the project's LICENSE."""
    dists = sorted(p.parent.name for p in PACKAGES.glob("*/pyproject.toml"))
    license_text = (ROOT / "LICENSE").read_bytes()
    for dist in dists:
        ours = [f for f in files if f.name.startswith(f"{dist.replace('-', '_')}-")]
        (wheel,) = [f for f in ours if f.suffix == ".whl"]
        (sdist,) = [f for f in ours if f.name.endswith(".tar.gz")]
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
            if len(names) != 1 or z.read(names[0]) != license_text:
                session.error(f"{wheel.name} does not hold the project's LICENSE")
        with tarfile.open(sdist) as t:
            member = t.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/LICENSE")
            if member is None or member.read() != license_text:
                session.error(f"{sdist.name} does not hold the project's LICENSE")
    session.log(f"{len(dists)} sdists and wheels, each with the LICENSE")


_AUTHORS = "import importlib.metadata as m, json; print(json.dumps({{d: m.metadata(d)['Author'] for d in {0}}}))"


def _dist_of(wheel: Path) -> str:
    """The distribution name of a wheel file (rl_agents-0.1.0-py3-none-any.whl: rl-agents)."""
    return canonicalize_name(wheel.name.split("-")[0])


def _install_fresh(session: nox.Session, spec: str, smoke: str) -> None:
    """Install `spec` from dist/ (pip's --find-links; third-party packages from the index, torch
    first as everywhere) into a fresh environment, check that it brought only what it declares,
    and run `smoke` there, in an empty folder."""
    tmp = Path(session.create_tmp()).resolve() / re.sub(r"\W+", "-", spec)
    shutil.rmtree(tmp, ignore_errors=True)
    session.run(sys.executable, "-m", "venv", str(tmp / "venv"), external=True)
    python = str(tmp / "venv" / "bin" / "python")
    closure = _closure(spec)
    pip = [python, "-m", "pip", "install", "--quiet", *NO_COMPILE]
    if "torch" in _third_party(closure):
        session.run(*pip, TORCH, external=True)
    taken = [str(wheel) for wheel in DIST.glob("*.whl") if _dist_of(wheel) in TAKEN_ON_PYPI]
    taken = [w for w in taken if _dist_of(Path(w)) in closure]
    session.run(*pip, "--find-links", str(DIST), spec, *taken, external=True)
    _check_installed(session, spec, closure, python)
    authors = session.run(
        python, "-c", _AUTHORS.format(sorted(closure)), external=True, silent=True
    )
    strangers = {
        d: a for d, a in json.loads(authors.strip().splitlines()[-1]).items() if a != AUTHOR
    }
    if strangers:
        session.error(f"installing {spec} brought another project's packages: {strangers}")
    code = smoke if "\n" in smoke else _first_python_block(ROOT / smoke)
    (tmp / "work").mkdir()
    (tmp / "work" / "smoke.py").write_text(code)
    session.chdir(tmp / "work")
    try:
        session.run(python, "smoke.py", external=True, env={"OMP_NUM_THREADS": "1"}, silent=True)
    finally:
        session.chdir(ROOT)
    session.log(f"{spec}: installed from dist/ with only what it declares; its smoke test ran")
    shutil.rmtree(tmp, ignore_errors=True)


@nox.session
def build(session: nox.Session) -> None:
    """Build an sdist and a wheel of every package into dist/ and check them (twine check
    --strict, check-wheel-contents, the LICENSE in each); then install what the READMEs name,
    from dist/, each into a fresh environment, and run its smoke test there."""
    # The build backend once, here, instead of in an isolated environment per package (the
    # packages all name the same one).
    backend = {r for p in PACKAGES.glob("*/pyproject.toml") for r in _build_requires(p)}
    session.install(*DIST_TOOLS, *sorted(backend))
    shutil.rmtree(DIST, ignore_errors=True)
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        build = ["python", "-m", "build", "--no-isolation", "--outdir", str(DIST)]
        session.run(*build, str(pyproject.parent), silent=True)
    files = sorted(DIST.iterdir())
    session.run("twine", "check", "--strict", *map(str, files))
    session.run("check-wheel-contents", *(str(f) for f in files if f.suffix == ".whl"))
    _check_distributions(session, files)
    for spec, smoke in INSTALL_SMOKE.items():
        _install_fresh(session, spec, smoke)
    _discard_venv(session)


def _release_commit(dist: str, version: str) -> str:
    """The commit that made a release: the one that added its record."""
    record = f"releases/{dist}-{version}.json"
    log = ["git", "log", "-1", "--format=%H", "--", record]
    return subprocess.run(log, cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def _lowest_releases(dist: str) -> dict[str, tuple[str, str]]:
    """For each sibling that installing `dist` brings, the lowest release that every range on
    it in that closure allows and that installs beside the others: `{sibling: (version,
    commit)}`. A release whose own ranges exclude a sibling installed with it is passed over
    (rl-algos 0.2.0 asks for rl-replay<0.3, rl-suite for rl-replay>=0.3: rl-suite cannot have
    both); a sibling with no such release is left out: today's code is the lowest that fits."""
    closure = _closure(dist)
    ranges: dict[str, SpecifierSet] = {}
    for member, extras in closure.items():
        for requirement in _requirements(member, extras):
            name = canonicalize_name(requirement.name)
            if _is_sibling(name):
                ranges[name] = ranges.get(name, SpecifierSet()) & requirement.specifier
    installed: dict[str, Version] = {}  # the version each sibling is installed at
    lowest = {}
    for sibling in _dependency_order(set(ranges)):
        allowed = ranges[sibling]
        versions = [
            Version(p.stem.removeprefix(f"{sibling}-")) for p in RELEASES.glob(f"{sibling}-*.json")
        ]
        candidates = sorted(v for v in versions if v in allowed)
        if not candidates:
            raise ValueError(f"{dist}: no release of {sibling} satisfies {sibling}{allowed}")
        installed[sibling] = Version(_project(sibling)["version"])  # (unless a release fits)
        for version in candidates:
            commit = _release_commit(sibling, str(version))
            needs = _requirements_of(_project_at(sibling, commit), closure.get(sibling))
            fits = all(
                installed[canonicalize_name(need.name)] in need.specifier
                for need in needs
                if canonicalize_name(need.name) in installed
            )
            if fits:
                lowest[sibling], installed[sibling] = (str(version), commit), version
                break
    return lowest


def _dependency_order(names: set[str]) -> list[str]:
    """`names`, each after the siblings it requires today."""
    order: list[str] = []
    pending = sorted(names)
    while pending:
        for name in pending:
            needs = {canonicalize_name(r.name) for r in _requirements(name)}
            if not needs & (set(pending) - {name}):
                order.append(name)
                pending.remove(name)
                break
        else:
            raise ValueError(f"the siblings {pending} require each other")
    return order


def _project_at(dist: str, commit: str) -> dict:
    """The [project] table of packages/<dist>/pyproject.toml at `commit`."""
    show = ["git", "show", f"{commit}:packages/{dist}/pyproject.toml"]
    text = subprocess.run(show, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return tomllib.loads(text)["project"]


# What of a pyproject decides how a package behaves beside its siblings (its description,
# README substitutions and classifiers do not).
BEHAVIOUR_KEYS = ("dependencies", "optional-dependencies", "requires-python", "scripts")


def _changed_since(dist: str, commit: str) -> bool:
    """Whether what `dist` ships differs from `commit`'s: its src/, or what its pyproject
    declares that behaviour depends on (BEHAVIOUR_KEYS)."""
    diff = subprocess.run(
        ["git", "diff", "--quiet", commit, "--", f"packages/{dist}/src"], cwd=ROOT
    )
    if diff.returncode != 0:
        return True
    then, now = _project_at(dist, commit), _project(dist)
    return any(then.get(key) != now.get(key) for key in BEHAVIOUR_KEYS)


@nox.session
def compat(session: nox.Session) -> None:
    """Each package's tests against the lowest release of each sibling its ranges allow, each
    rebuilt from the commit that made it (`nox -s compat -- rl-replay` for one package). A
    package whose siblings' lowest releases ship today's code is said so and not run twice:
    its `tests` session covers it."""
    dists = session.posargs or sorted(p.parent.name for p in PACKAGES.glob("*/pyproject.toml"))
    for dist in dists:
        lowest = _lowest_releases(dist)
        older = {s: vc for s, vc in lowest.items() if _changed_since(s, vc[1])}
        if not older:
            named = ", ".join(f"{s} {v}" for s, (v, _) in lowest.items()) or "no sibling"
            session.log(f"{dist}: its lowest allowed siblings ({named}) are today's code")
            continue
        session.log(f"{dist}: against " + ", ".join(f"{s} {v}" for s, (v, _) in older.items()))
        _test_against(session, dist, older)
    _discard_venv(session)


def _test_against(session: nox.Session, dist: str, older: dict[str, tuple[str, str]]) -> None:
    """Run `dist`'s tests in a fresh environment holding `older`'s releases (built from their
    commits in a git worktree) and today's wheels of everything else it brings."""
    tmp = Path(session.create_tmp()).resolve() / f"compat-{dist}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    closure = _closure(dist)
    wheels = _wheels(session, sorted(set(closure) - set(older)))
    for sibling, (version, commit) in older.items():
        tree = tmp / f"{sibling}-{version}"
        session.run("git", "worktree", "add", "--detach", str(tree), commit, external=True)
        try:
            build = ["python", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp)]
            session.run(*build, str(tree / "packages" / sibling), silent=True)
        finally:
            session.run("git", "worktree", "remove", "--force", str(tree), external=True)
        (wheels[sibling],) = tmp.glob(f"{sibling.replace('-', '_')}-{version}-*.whl")
    python = str(tmp / "venv" / "bin" / "python")
    session.run(sys.executable, "-m", "venv", str(tmp / "venv"), external=True)
    pip = [python, "-m", "pip", "install", "--quiet", *NO_COMPILE]
    if "torch" in _third_party(closure):
        session.run(*pip, TORCH, external=True)
    paths = [
        f"{wheels[d]}[{','.join(sorted(extras))}]" if extras else str(wheels[d])
        for d, extras in closure.items()
    ]
    session.run(*pip, *TEST_TOOLS, XDIST, *paths, external=True)
    shutil.copytree(PACKAGES / dist / "tests", tmp / "tests")
    shutil.copy(ROOT / "pyproject.toml", tmp)
    session.chdir(tmp)
    try:
        pytest = [python, "-m", "pytest", *WORKERS, "--rootdir", str(tmp), "-p", "no:cacheprovider"]
        session.run(
            *pytest, "-m", "not serial", str(tmp / "tests"), external=True, success_codes=[0, 5]
        )
    finally:
        session.chdir(ROOT)
    shutil.rmtree(tmp, ignore_errors=True)


@nox.session
def api(session: nox.Session) -> None:
    """Compare each package's public API with its last release (tools/api_check.py, griffe):
    a breaking change fails unless the version was bumped for it."""
    session.install("griffe", "packaging")
    session.run("python", str(ROOT / "tools" / "api_check.py"), *session.posargs)
    _discard_venv(session)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ (MkDocs, strict: any warning fails: a broken
    link, a missing reference, a docstring that does not parse), then check it: every public
    name in the API reference, and the pages in headless Chromium (Debian's chromium and
    chromium-driver, which .ci/run installs). Screenshots land in artifacts/docs/. The code
    blocks of the pages run in the integration session (test_doc_blocks.py), where the
    packages are installed."""
    session.install("-r", str(ROOT / "docs" / "requirements.txt"))
    shutil.rmtree(ROOT / "site", ignore_errors=True)
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})
    _pytest(session, ROOT / "docs" / "tests")
    _discard_venv(session)


@nox.session(venv_backend="none")
def release(session: nox.Session) -> None:
    """Release one package: `nox -s release -- rl-replay minor` (see tools/release.py). Not
    part of a default run."""
    session.run(sys.executable, str(ROOT / "tools" / "release.py"), *session.posargs)


@nox.session
@nox.parametrize("spec", [nox.param(spec, id=spec) for spec in TEST_SPECS])
def tests(session: nox.Session, spec: str) -> None:
    """Install one package alone (not editable), import it and run its tests from outside the
    tree, on one pytest worker per core (those marked `serial` after, alone)."""
    closure = _install(session, spec)
    _check_installed(session, spec, closure)
    session.install(*TEST_TOOLS, XDIST)
    dist = Requirement(spec).name
    tmp = Path(session.create_tmp()).resolve()
    shutil.rmtree(tmp / "tests", ignore_errors=True)
    if (PACKAGES / dist / "tests").is_dir():  # git keeps no empty folder
        shutil.copytree(PACKAGES / dist / "tests", tmp / "tests")
    shutil.copy(ROOT / "pyproject.toml", tmp)  # the shared pytest configuration (markers ...)
    session.chdir(tmp)
    session.run("python", "-c", f"import {dist.replace('-', '_')}")
    _pytest(session, tmp / "tests", "--rootdir", str(tmp), "-p", "no:cacheprovider", workers=True)
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
    # rsl_rl: test_rsl_rl_adapter.py; griffe: test_api_check.py; pytest-xdist: the workers
    _install(session, END_TO_END, *TEST_TOOLS, "rsl-rl-lib", "griffe", XDIST)
    comparisons = [f"--ignore={ROOT / 'integration_tests' / name}" for name in COMPARISON_TESTS]
    _pytest(session, ROOT / "integration_tests", *comparisons, workers=True)
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
    session.install(*NO_COMPILE, TORCH, *peers, *TEST_TOOLS, "gymnasium[mujoco]", "matplotlib")
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    if not scripts:
        session.log("no benchmarks/*.py yet")
    for script in scripts:
        session.run("python", str(script), "--quick")
    _discard_venv(session)
