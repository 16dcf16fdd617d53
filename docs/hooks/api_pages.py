"""MkDocs hook: one API reference page per package, generated from its ``__all__``.

Each public name gets its own section (signature and docstring, read from the sources by
griffe through mkdocstrings), so a page lists exactly what ``from <package> import *`` gives,
in ``__all__``'s order. rl-suite re-exports the seven libraries: its page documents only the
trainer's own names (``TRAINER``) and links the rest to their home pages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["rl-arrays", "rl-replay", "rl-samplers", "rl-agents", "rl-algos", "rl-runners"]
PACKAGES += ["rl-launch", "rl-suite"]
UMBRELLA = "rl-suite"


def module_name(package: str) -> str:
    return package.replace("-", "_")


def public_names(package: str) -> list[str]:
    """The package's ``__all__``; for the umbrella, its own names (``TRAINER``)."""
    if package == UMBRELLA:
        init = ROOT / "packages" / package / "src" / module_name(package) / "__init__.py"
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "TRAINER":
                return list(ast.literal_eval(node.value))
        raise ValueError(f"{init} has no TRAINER list")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "packages" / package / "src")])
    exports = loader.load(module_name(package)).exports
    if not exports:
        raise ValueError(f"{package} has no __all__")
    return [str(name) for name in exports]


def page(package: str) -> str:
    module = module_name(package)
    lines = [f"# {package}", "", f"::: {module}", "    options:", "      members: false"]
    lines += ["      show_root_heading: false", ""]
    if package == UMBRELLA:
        lines += [
            "rl-suite re-exports every public name of the seven libraries (`from rl_suite import",
            "ReplayBuffer` is rl-replay's `ReplayBuffer`); they are documented on their own",
            "pages: " + ", ".join(f"[{p}]({p}.md)" for p in PACKAGES if p != UMBRELLA) + ".",
            "Below are the trainer's own names.",
            "",
        ]
    for name in public_names(package):
        lines += [f"::: {module}.{name}", ""]
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for package in PACKAGES:
        files.append(File.generated(config, f"reference/{package}.md", content=page(package)))
    return files
