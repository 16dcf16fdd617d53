"""The shape of the packages' code, against the limits the guide sets: ``python
tools/code_shape.py [--check]``.

Measured from the sources alone (``ast``, nothing imported), over ``packages/*/src``:

- the deepest inheritance chain: the class with the most of our classes among its ancestors
  (itself, its bases, their bases ..., mixins included: what a reader must open to know it);
- the longest classes and files, in lines;
- import circles between the modules of a package (an import under ``if TYPE_CHECKING:`` is
  not counted; one inside a function is);
- private names (``_name``) imported from another module;
- the word ``Any`` in the sources.

``--check`` exits 1 when a limit is broken (LIMITS); without it the figures are printed only.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"chain": 4, "class_lines": 350, "file_lines": 600}
SHOWN = 8  # longest classes and files printed


@dataclass
class ClassInfo:
    module: str
    name: str
    lines: int
    bases: list[str]  # as written: "Base", "module.Base"


@dataclass
class Module:
    name: str  # rl_replay._base
    path: Path
    lines: int
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module.name"
    runtime_deps: set[str] = field(default_factory=set)  # modules of the same package
    private_imports: list[str] = field(default_factory=list)


def modules() -> Iterator[Module]:
    for path in sorted(ROOT.glob("packages/*/src/*/**/*.py")):
        src = next(parent for parent in path.parents if parent.name == "src")
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(part for part in parts if part != "__init__")
        yield Module(name, path, len(path.read_text().splitlines()))


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _runtime_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The module's imports, but those under ``if TYPE_CHECKING:`` (an import inside a
    function still ties the two modules: a circle that only a late import hides is one)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not (isinstance(node, ast.If) and _is_type_checking(node)):
            stack += ast.iter_child_nodes(node)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.name.split(".")
    if module.path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def read(module: Module, classes: list[ClassInfo], names: set[str]) -> None:
    """Fill in ``module``'s imports and classes; ``names``: every module's name (``from .
    import _device`` imports a module, not a private name)."""
    tree = ast.parse(module.path.read_text())
    top = module.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                module.imports[alias.asname or alias.name] = f"{source}.{alias.name}"
                is_module = f"{source}.{alias.name}" in names
                if alias.name.startswith("_") and source.startswith(top) and not is_module:
                    module.private_imports.append(f"{module.name} imports {source}.{alias.name}")
        elif isinstance(node, ast.ClassDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            bases = [ast.unparse(base) for base in node.bases]
            classes.append(ClassInfo(module.name, node.name, lines, bases))
    for node in _runtime_imports(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if source.split(".")[0] != top:
                continue
            submodules = [f"{source}.{alias.name}" for alias in node.names]
            if all(name in names for name in submodules):
                module.runtime_deps.update(submodules)  # (from . import _device)
            else:
                module.runtime_deps.add(source)


def resolve(classes: list[ClassInfo], modules_by_name: dict[str, Module]) -> dict[str, list[str]]:
    """Each of our classes (``module.Name``) -> its bases that are our classes, by path."""
    by_path = {f"{c.module}.{c.name}": c for c in classes}

    def find(module: str, name: str, seen: int = 0) -> str | None:
        if f"{module}.{name}" in by_path:
            return f"{module}.{name}"
        target = modules_by_name[module].imports.get(name) if module in modules_by_name else None
        if target is None or seen > 10:
            return None
        source, _, original = target.rpartition(".")
        return find(source, original, seen + 1) if source in modules_by_name else None

    bases: dict[str, list[str]] = {}
    for path, info in by_path.items():
        found = [find(info.module, base.split("[")[0].rsplit(".", 1)[-1]) for base in info.bases]
        bases[path] = [base for base in found if base]
    return bases


def deepest_chain(bases: dict[str, list[str]]) -> list[str]:
    """The class with the most of our classes among its ancestors, and those ancestors (nearest
    first, as a method resolution order lists them)."""
    memo: dict[str, list[str]] = {}

    def ancestors(path: str) -> list[str]:
        if path not in memo:
            memo[path] = [path]  # (a guard against a cycle)
            found = [path]
            for base in bases.get(path, []):
                found += [item for item in ancestors(base) if item not in found]
            memo[path] = found
        return memo[path]

    return max((ancestors(path) for path in bases), key=len, default=[])


def circles(modules_by_name: dict[str, Module]) -> list[list[str]]:
    """The import cycles among the modules of each package, each once."""
    graph = {
        name: sorted(dep for dep in module.runtime_deps if dep in modules_by_name and dep != name)
        for name, module in modules_by_name.items()
    }
    found: dict[frozenset[str], list[str]] = {}

    def visit(node: str, path: list[str]) -> None:
        for dep in graph[node]:
            if dep in path:
                cycle = path[path.index(dep) :]
                found.setdefault(frozenset(cycle), [*cycle, dep])
            else:
                visit(dep, [*path, dep])

    for name in sorted(graph):
        visit(name, [name])
    return list(found.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a limit is broken")
    args = parser.parse_args()
    all_modules = list(modules())
    classes: list[ClassInfo] = []
    names = {module.name for module in all_modules}
    for module in all_modules:
        read(module, classes, names)
    by_name = {module.name: module for module in all_modules}
    chain = deepest_chain(resolve(classes, by_name))
    long_classes = sorted(classes, key=lambda c: -c.lines)
    long_files = sorted(all_modules, key=lambda m: -m.lines)
    cycles = circles(by_name)
    private = [line for module in all_modules for line in module.private_imports]
    any_count = sum(len(re.findall(r"\bAny\b", module.path.read_text())) for module in all_modules)

    print(f"deepest inheritance chain: {len(chain)} classes: {' > '.join(chain)}")
    print(f"longest classes (limit {LIMITS['class_lines']} lines):")
    for info in long_classes[:SHOWN]:
        print(f"  {info.lines:5d}  {info.module}.{info.name}")
    print(f"longest files (limit {LIMITS['file_lines']} lines):")
    for module in long_files[:SHOWN]:
        print(f"  {module.lines:5d}  {module.path.relative_to(ROOT)}")
    print(f"import circles: {len(cycles)}")
    for cycle in cycles:
        print("  " + " -> ".join(cycle))
    print(f"private names imported from another module: {len(private)}")
    for line in private:
        print(f"  {line}")
    print(f"'Any' in packages/*/src: {any_count}")

    broken = []
    if len(chain) > LIMITS["chain"]:
        broken.append(f"an inheritance chain of {len(chain)} classes")
    broken += [
        f"class {c.module}.{c.name}: {c.lines} lines"
        for c in classes
        if c.lines > LIMITS["class_lines"]
    ]
    broken += [
        f"file {m.path.relative_to(ROOT)}: {m.lines} lines"
        for m in all_modules
        if m.lines > LIMITS["file_lines"]
    ]
    broken += [f"import circle {' -> '.join(cycle)}" for cycle in cycles]
    broken += [f"private import: {line}" for line in private]
    if args.check and broken:
        print("limits broken:\n  " + "\n  ".join(broken), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
