"""Shape figures of the code: the largest functions, the longest files, import cycles.

    python tools/code_shape.py [PACKAGE ...]      (default: sglang_lite constraints kernels frontend_dsl)

Import cycles are strongly connected components of the graph of imports between modules of one
package. Two graphs are reported: module-level imports (what runs on import; `if TYPE_CHECKING:`
blocks left out) and every import, function-local and TYPE_CHECKING ones included (an import
moved into a function or behind TYPE_CHECKING to dodge a cycle still is one).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PACKAGES = ("sglang_lite", "constraints", "sglang_lite_kernels", "frontend_dsl")
# The limits tests/unit/test_code_shape.py holds sglang_lite to (STYLE.md aims at 5-40 lines a
# function; these are the ceiling past which a file or a function is split).
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True, slots=True)
class Function:
    qualname: str
    path: str
    lineno: int
    lines: int


def module_files(package: str) -> dict[str, Path]:
    """Module name -> file, for every .py file under the package directory."""
    base = ROOT / package
    out = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def functions(path: Path, root: Path = ROOT) -> list[Function]:
    """Every function and method in the file, nested ones too, with its length in lines."""
    tree = ast.parse(path.read_text(), str(path))
    rel = str(path.relative_to(root))
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append(Function(name, rel, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def file_lengths(package: str) -> list[tuple[int, str]]:
    """(lines, path) of every module of the package, longest first."""
    return sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT)))
                   for p in module_files(package).values()), reverse=True)


def package_functions(package: str) -> list[Function]:
    """Every function and method of the package, longest first."""
    funcs = [f for p in module_files(package).values() for f in functions(p)]
    return sorted(funcs, key=lambda f: -f.lines)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts.pop()
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def imports(module: str, path: Path, known: set[str], *, local: bool) -> set[str]:
    """Modules of `known` that `module` imports: module level only, or also the function-local
    and TYPE_CHECKING ones (`local`)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def add(name: str) -> None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if not local and isinstance(child, ast.If) and _is_type_checking(child):
                continue
            nested = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.Import) and (local or not in_function):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom) and (local or not in_function):
                base = _resolve(module, is_package, child)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    add(full if full in known else base)
            visit(child, nested)

    visit(tree, False)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def import_cycles(package: str, *, local: bool) -> list[list[str]]:
    files = module_files(package)
    known = set(files)
    graph = {m: imports(m, p, known, local=local) for m, p in files.items()}
    return cycles(graph)


def main(argv: list[str]) -> None:
    packages = argv or list(DEFAULT_PACKAGES)
    for package in packages:
        print(f"== {package}: {len(module_files(package))} modules")
        print("largest functions:")
        for f in package_functions(package)[:15]:
            print(f"  {f.lines:4d}  {f.path}:{f.lineno}  {f.qualname}")
        print(f"files over {MAX_FILE_LINES} lines:")
        for n, path in file_lengths(package):
            if n > MAX_FILE_LINES:
                print(f"  {n:4d}  {path}")
        for local in (False, True):
            label = "import cycles (all imports, local and TYPE_CHECKING too)" if local else "import cycles (module level)"
            found = import_cycles(package, local=local)
            print(f"{label}: {len(found)}")
            for component in found:
                print("  " + " <-> ".join(component))


if __name__ == "__main__":
    main(sys.argv[1:])
