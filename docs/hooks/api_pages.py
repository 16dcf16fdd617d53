"""MkDocs hook: one API reference page per package, generated from its ``__all__``.

Each public name gets its own section (signature and docstring, read from the sources by
griffe through mkdocstrings), so a page lists exactly what ``from <package> import *`` gives,
in ``__all__``'s order, then the package's protocols that ``__all__`` leaves out (the
structural types its public signatures ask for, such as the runner a ``Checkpointer`` saves),
so that each protocol is documented beside what uses it. rl-suite re-exports the seven libraries: its page documents only the
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


def load(package: str) -> griffe.Module:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "packages" / package / "src")])
    return loader.load(module_name(package))


def public_names(package: str) -> list[str]:
    """The package's ``__all__``; for the umbrella, its own names (``TRAINER``)."""
    if package == UMBRELLA:
        init = ROOT / "packages" / package / "src" / module_name(package) / "__init__.py"
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "TRAINER":
                return list(ast.literal_eval(node.value))
        raise ValueError(f"{init} has no TRAINER list")
    exports = load(package).exports
    if not exports:
        raise ValueError(f"{package} has no __all__")
    return [str(name) for name in exports]


def unexported_protocols(package: str) -> list[str]:
    """The paths of the ``typing.Protocol`` classes declared in the package, not in its
    ``__all__`` and not private by name."""
    module = load(package)
    exported = set(module.exports or [])

    def classes(parent: griffe.Module) -> list[griffe.Class]:
        found = [item for item in parent.classes.values() if not item.is_alias]
        return found + [item for child in parent.modules.values() for item in classes(child)]

    return [
        item.path
        for item in classes(module)
        if any(str(base).rsplit(".", 1)[-1] == "Protocol" for base in item.bases)
        and not item.name.startswith("_")
        and item.name not in exported
    ]


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
    protocols = [] if package == UMBRELLA else unexported_protocols(package)
    if protocols:
        lines += [
            "## Protocols",
            "",
            "What the signatures above ask of the objects given to them, by attribute (any",
            "object that has these attributes fits; nothing to inherit). They are not exported:",
            "a type checker reads them from the signatures.",
            "",
        ]
        for path in protocols:
            lines += [f"::: {path}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for package in PACKAGES:
        files.append(File.generated(config, f"reference/{package}.md", content=page(package)))
    return files
