"""Release one package: ``python tools/release.py rl-replay minor`` (``nox -s release -- rl-replay
minor`` runs it).

It bumps the package's version (``major``, ``minor`` or ``patch``; on 0.x a ``minor`` bump is
the breaking one), moves its CHANGELOG's Unreleased section under the new version and today's
date, widens nothing but moves the range of every sibling that depends on it and that the new
version leaves (``rl-replay>=0.1,<0.2`` becomes ``>=0.2,<0.3``, said in that sibling's
CHANGELOG), writes the record ``releases/<package>-<version>.json`` and commits all of it as
one commit, "Release <package> <version>". The release's code is that commit:
``git log -1 --format=%H -- releases/<package>-<version>.json`` finds it, so any release can be
rebuilt from git. The working tree must be clean (nothing else slips into a release).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
BUMPS = ("major", "minor", "patch")
UNRELEASED = "## [Unreleased]"


def bumped(version: Version, bump: str) -> Version:
    major, minor, patch = version.release[:3]
    if bump == "major":
        return Version(f"{major + 1}.0.0")
    if bump == "minor":
        return Version(f"{major}.{minor + 1}.0")
    return Version(f"{major}.{minor}.{patch + 1}")


def compatible_range(version: Version) -> str:
    """What a sibling declares to accept ``version`` and what may follow without a breaking
    change: on 0.x the same minor version, from 1.0 the same major one."""
    major, minor = version.release[:2]
    if major == 0:
        return f">=0.{minor},<0.{minor + 1}"
    return f">={major}.{minor},<{major + 1}"


def _version_line(text: str) -> re.Match[str]:
    match = re.search(r'^version = "([^"]+)"$', text, re.MULTILINE)
    if match is None:
        raise SystemExit("pyproject.toml has no version line")
    return match


def _changelog_released(text: str, version: Version, date: str) -> str:
    """The CHANGELOG with its Unreleased section under ``version`` and a new, empty Unreleased."""
    if UNRELEASED not in text:
        raise SystemExit(f"the CHANGELOG has no '{UNRELEASED}' section")
    start = text.index(UNRELEASED) + len(UNRELEASED)
    following = text.find("\n## [", start)
    body = text[start : following if following != -1 else len(text)].strip("\n")
    if not body:
        raise SystemExit("the CHANGELOG's Unreleased section is empty: nothing to release")
    release = f"{UNRELEASED}\n\n## [{version}] - {date}\n\n{body}\n"
    rest = "" if following == -1 else text[following:]
    return text[: text.index(UNRELEASED)] + release + rest


def _note_unreleased(text: str, line: str) -> str:
    """``line`` added to the Unreleased section's "Changed" list (a list made at the
    section's end when it has none)."""
    start = text.index(UNRELEASED) + len(UNRELEASED)
    following = text.find("\n## [", start)
    end = following if following != -1 else len(text)
    section = text[start:end]
    if "\n### Changed\n" in section:
        at = start + section.index("\n### Changed\n") + len("\n### Changed\n")
        return text[:at] + f"\n- {line}" + text[at:]
    body = section.rstrip("\n")
    return text[:start] + f"{body}\n\n### Changed\n\n- {line}\n" + text[end:]


def _moved_ranges(package: str, version: Version) -> dict[Path, list[tuple[str, str]]]:
    """The siblings whose declared ranges of ``package`` leave out ``version``: each pyproject
    with its old and new requirement strings (its dependencies' and its extras')."""
    moved: dict[Path, list[tuple[str, str]]] = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        for quoted in re.findall(r'"([^"]+)"', pyproject.read_text()):
            try:
                requirement = Requirement(quoted)
            except ValueError:
                continue
            if requirement.name != package or version in requirement.specifier:
                continue
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            new = f"{package}{extras}{compatible_range(version)}"
            moved.setdefault(pyproject, []).append((quoted, new))
    return moved


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def release(package: str, bump: str, date: str, commit: bool = True) -> Version:
    folder = ROOT / "packages" / package
    if not (folder / "pyproject.toml").is_file():
        packages = sorted(p.name for p in (ROOT / "packages").iterdir() if p.is_dir())
        raise SystemExit(f"no package {package!r}; packages: {', '.join(packages)}")
    if commit and _git("status", "--porcelain"):
        raise SystemExit("the working tree has changes: commit or stash them before a release")
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text()
    line = _version_line(text)
    old = Version(line.group(1))
    new = bumped(old, bump)
    record = ROOT / "releases" / f"{package}-{new}.json"
    if record.exists():
        raise SystemExit(f"{record.relative_to(ROOT)} exists: {package} {new} was released")
    changelog = folder / "CHANGELOG.md"
    writes = {  # (every text made before any is written: a refusal leaves the tree as it was)
        pyproject: text[: line.start(1)] + str(new) + text[line.end(1) :],
        changelog: _changelog_released(changelog.read_text(), new, date),
    }
    for sibling, pairs in _moved_ranges(package, new).items():
        sibling_text = sibling.read_text()
        for before, after in pairs:
            sibling_text = sibling_text.replace(f'"{before}"', f'"{after}"')
            print(f"{sibling.parent.name}: {before} -> {after}")
        writes[sibling] = sibling_text
        notes = sibling.parent / "CHANGELOG.md"
        before, after = pairs[0]  # (its dependencies' requirement, extras and all)
        line_text = f"Requires `{after}` (was `{before}`)."
        writes[notes] = _note_unreleased(notes.read_text(), line_text)
    for path, content in writes.items():
        path.write_text(content)
    changed = list(writes)
    record.parent.mkdir(exist_ok=True)
    entry = {"package": package, "version": str(new), "previous": str(old), "date": date}
    entry["built_from"] = "the commit that adds this file: git log -1 --format=%H -- " + str(
        record.relative_to(ROOT)
    )
    record.write_text(json.dumps(entry, indent=2) + "\n")
    changed.append(record)
    print(f"{package}: {old} -> {new} ({record.relative_to(ROOT)})")
    if commit:
        _git("add", *(str(p.relative_to(ROOT)) for p in changed))
        _git("commit", "--quiet", "-m", f"Release {package} {new}")
        print(f"committed: {_git('log', '-1', '--format=%h %s').strip()}")
    return new


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", help="the distribution, e.g. rl-replay")
    parser.add_argument("bump", choices=BUMPS)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--no-commit", action="store_true", help="write the files, commit nothing")
    args = parser.parse_args(argv)
    release(args.package, args.bump, args.date, commit=not args.no_commit)


if __name__ == "__main__":
    sys.exit(main())
