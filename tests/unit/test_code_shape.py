"""The shape of the code itself: importing it changes nothing, its modules import in one direction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL_PACKAGES = ("sglang_lite", "constraints", "sglang_lite_kernels", "frontend_dsl")


def test_no_installed_distribution_ships_a_top_level_name_of_ours():
    """A top-level package of ours shadows any installed package of the same name (the repo root
    is first on sys.path): transformers 5.25 requires Hugging Face's ``kernels`` and imported our
    old ``kernels/`` in its place. Every dependency is installed here, so a collision shows."""
    import importlib.metadata

    shipped_by = importlib.metadata.packages_distributions()
    others = {name: sorted(set(shipped_by.get(name, [])) - {"sglang-lite"}) for name in TOP_LEVEL_PACKAGES}
    assert {name: dists for name, dists in others.items() if dists} == {}


def test_importing_the_packages_changes_no_environment_variable():
    code = (
        "import json, os; before = dict(os.environ); "
        "import sglang_lite_kernels, sglang_lite_kernels.sampling, sglang_lite_kernels.decode_attention, sglang_lite, "
        "sglang_lite.engine, sglang_lite.server.app, constraints, frontend_dsl; "
        "after = dict(os.environ); "
        "print(json.dumps({k: v for k, v in after.items() if before.get(k) != v}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


# Cycles left on purpose, each through annotations only (TYPE_CHECKING imports): a module
# that is one class's methods in a file of their own, typed by that class.
_KNOWN_TYPE_ONLY_CYCLES = {
    "constraints": [["constraints.pda_trie", "constraints.pda_walk", "constraints.pushdown"]],
}


@pytest.mark.parametrize("package", ["sglang_lite", "constraints", "sglang_lite_kernels"])
def test_no_import_cycles(package):
    from tools.code_shape import import_cycles

    assert import_cycles(package, local=False) == []
    assert import_cycles(package, local=True) == _KNOWN_TYPE_ONLY_CYCLES.get(package, [])


def test_imports_point_one_way():
    """frontend_dsl -> sglang_lite -> constraints, sglang_lite_kernels (DESIGN.md): never back."""
    from tools.code_shape import imports, module_files

    known = {m for p in TOP_LEVEL_PACKAGES for m in module_files(p)}
    lower = {"sglang_lite": ("frontend_dsl",),
             "constraints": ("sglang_lite", "frontend_dsl", "sglang_lite_kernels"),
             "sglang_lite_kernels": ("sglang_lite", "frontend_dsl", "constraints")}
    wrong = []
    for package, forbidden in lower.items():
        for module, path in module_files(package).items():
            for target in imports(module, path, known, local=True):
                if target.split(".")[0] in forbidden:
                    wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_no_module_of_the_engine_is_over_the_file_limit():
    """One concept per file (STYLE.md): a module past the limit holds more than one."""
    from tools.code_shape import MAX_FILE_LINES, file_lengths

    assert [(n, path) for n, path in file_lengths("sglang_lite") if n > MAX_FILE_LINES] == []


def test_no_function_of_the_engine_is_over_the_function_limit():
    from tools.code_shape import MAX_FUNCTION_LINES, package_functions

    long = [f"{f.path}:{f.lineno} {f.qualname} ({f.lines} lines)"
            for f in package_functions("sglang_lite") if f.lines > MAX_FUNCTION_LINES]
    assert long == []


def test_a_function_over_the_limit_is_measured_as_such(tmp_path):
    """The function measure counts every line of a definition: one over the limit is seen."""
    from tools.code_shape import MAX_FUNCTION_LINES, functions

    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "big.py"
    path.write_text("def long():\n" + body + "\n")
    (found,) = functions(path, root=tmp_path)
    assert found.qualname == "long" and found.lines == MAX_FUNCTION_LINES + 1 > MAX_FUNCTION_LINES


def test_the_request_to_token_table_is_never_read_back_to_the_host():
    """A request's slots live on the host (its pages); the device table is written from them.
    A ``.cpu()`` / ``.tolist()`` / ``.item()`` / ``.numpy()`` on it would be a device sync."""
    import re

    from tools.code_shape import module_files

    read_back = re.compile(r"req_to_token\b[^\n]*\.(cpu|tolist|item|numpy)\(")
    found = [f"{path.relative_to(ROOT)}:{i}" for path in module_files("sglang_lite").values()
             for i, line in enumerate(path.read_text().splitlines(), 1) if read_back.search(line)]
    assert found == []
