"""Check each package's public API against its last release: ``python tools/api_check.py
[PACKAGE ...]`` (``nox -s api`` runs it for all of them).

The last release of a package is the highest version among its records,
``releases/<package>-<version>.json``; its code is the commit that added that record. The
check compares the release's ``__all__`` with today's (a name gone is a breaking change) and
runs griffe over both (an object removed, a parameter removed, renamed, moved or made
required, a default changed ...). A breaking change fails the check unless the package's
version was bumped for one since the release (0.x: a minor bump; from 1.0: a major one):
then the changes are listed and pass. Exit status 1 on a failure.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import griffe
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def last_release(package: str) -> tuple[Version, str] | None:
    """The version of ``package``'s last release and the commit that made it (None: never
    released)."""
    records = [json.loads(p.read_text()) for p in (ROOT / "releases").glob(f"{package}-*.json")]
    records = [r for r in records if r["package"] == package]
    if not records:
        return None
    version = max(Version(r["version"]) for r in records)
    record = f"releases/{package}-{version}.json"
    return version, _git("log", "-1", "--format=%H", "--", record).strip()


def breaking_bump(old: Version, new: Version) -> bool:
    """Whether ``old`` to ``new`` is a bump that may break the API."""
    if old.major == 0:
        return new.major > 0 or new.minor > old.minor
    return new.major > old.major


def _exported(source: str) -> set[str] | None:
    """The names in a module's ``__all__`` when it is a literal list or tuple of strings
    (None when it is computed: rl-suite's, the union of the other packages' and its own)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                return None
    return set()


def _version(package: str) -> Version:
    text = (ROOT / "packages" / package / "pyproject.toml").read_text()
    match = re.search(r'^version = "([^"]+)"$', text, re.MULTILINE)
    assert match is not None, package
    return Version(match.group(1))


def findings(package: str, commit: str) -> list[str]:
    """The breaking changes of ``package``'s API since ``commit``, one line each."""
    module = package.replace("-", "_")
    src = ROOT / "packages" / package / "src"
    init = f"packages/{package}/src/{module}/__init__.py"
    before, now = _exported(_git("show", f"{commit}:{init}")), _exported((ROOT / init).read_text())
    gone = set() if before is None or now is None else before - now  # (else griffe's alone)
    lines = [f"{module}.{name}: removed from __all__" for name in sorted(gone)]
    # (load_git takes the search path relative to the repository: an absolute one would
    # read today's files instead of the release's)
    old = griffe.load_git(module, ref=commit, repo=ROOT, search_paths=[src.relative_to(ROOT)])
    new = griffe.load(module, search_paths=[src])
    for breakage in griffe.find_breaking_changes(old, new):  # (names gone from the module)
        lines.append(f"{breakage.obj.path}: {breakage.explain()}")
    # What the public names stand for lives in private modules, which griffe's comparison of
    # the package skips: compare those modules, keeping what concerns a public name.
    targets = {}
    for name in sorted(before or ()):
        member = old.members.get(name)
        path = getattr(member, "target_path", None) or getattr(member, "path", None)
        if path and path.startswith(f"{module}.") and name in new.members:
            targets[path] = name
    for private in sorted({path.rsplit(".", 1)[0] for path in targets} - {module}):
        relative = private.removeprefix(f"{module}.")
        for breakage in griffe.find_breaking_changes(old[relative], new[relative]):
            path = breakage.obj.path
            owner = next((t for t in targets if path == t or path.startswith(f"{t}.")), None)
            if owner is not None:
                public = f"{module}.{targets[owner]}{path.removeprefix(owner)}"
                lines.append(f"{public}: {breakage.explain()}")
    return lines


def check(package: str) -> bool:
    """Print what changed in ``package``'s API since its last release; False when the
    change is breaking and the version was not bumped for it."""
    released = last_release(package)
    if released is None:
        print(f"{package}: never released, nothing to compare with")
        return True
    version, commit = released
    lines = findings(package, commit)
    current = _version(package)
    allowed = breaking_bump(version, current)
    verdict = "breaking, allowed by the bump to " + str(current) if allowed else "breaking"
    for line in lines:
        print(f"{package}: {line} ({verdict})")
    if not lines:
        print(f"{package}: the API of {version} (commit {commit[:10]}) is kept")
    elif not allowed:
        print(
            f"{package}: breaking changes since {version}: bump the version for them "
            f"(nox -s release -- {package} {'minor' if version.major == 0 else 'major'}) or "
            "keep the old names and signatures"
        )
    return allowed or not lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", help="default: every package")
    args = parser.parse_args(argv)
    packages = args.packages or sorted(
        p.parent.name for p in ROOT.glob("packages/*/pyproject.toml")
    )
    results = [check(package) for package in packages]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
