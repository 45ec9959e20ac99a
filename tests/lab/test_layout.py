"""benchmarks/ stays a house one can find one's way in (issue 15).

Sub-packages by feature, no import cycle between its modules (lazy imports
inside functions included), no function over 60 lines, no module over 600,
and `lab list` / `lab exec` start without the plotting stack or the probes' clients
(socketio, requests). Read with ast:
nothing here imports the modules it checks but the lab's entry point, in a
process of its own.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from benchmarks.stages import ROOT

BENCHMARKS = ROOT / "benchmarks"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of benchmarks/ (packages as their __init__)."""
    found = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of benchmarks/ a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("benchmarks."))
    return {name for name in found if name in known}


def test_benchmarks_has_sub_packages_by_feature():
    packages = [p for p in BENCHMARKS.iterdir() if (p / "__init__.py").exists()]
    assert len(packages) >= 3, packages


def test_no_import_cycle():
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    # a package's __init__ imports nothing here, so a module importing its package's
    # sibling is never a cycle through the package
    assert all(not graph[name] for name, path in known.items() if path.name == "__init__.py")
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(" -> ".join([*path[path.index(name):], name]))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_no_function_over_60_lines_no_module_over_600():
    long_functions, big_modules = [], []
    for path in modules().values():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            big_modules.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - start + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert not big_modules, big_modules
    assert not long_functions, long_functions


# What `import benchmarks.lab` must not load: the report's plotting stack (imported
# when a report is drawn), the probes' HTTP and Socket.IO clients (imported in the
# probe's own process), and Locust with its gevent (the client host's). Each took
# `lab list` and `--help` from under 0.3 s to 0.8 s and more (issue 49); a module set,
# not a time, since this box's timings move with what else runs on it.
HEAVY = ("pandas", "matplotlib", "numpy", "scipy", "PIL", "socketio", "engineio", "requests",
         "urllib3", "redis", "tornado", "websocket", "locust", "gevent")


def test_lab_starts_without_heavy_modules():
    """`lab list` and `lab exec` import the lab, and none of HEAVY with it."""
    code = f"import sys, benchmarks.lab; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_outside_the_venv_a_module_run_names_the_environment_to_activate():
    """`python -m benchmarks.lab list` with a Python that lacks the lab's packages (-S:
    no site-packages) exits with one line naming `source .venv/bin/activate`."""
    got = subprocess.run([sys.executable, "-S", "-m", "benchmarks.lab", "list"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 1 and got.stdout == ""
    assert got.stderr.count("\n") == 1 and "source .venv/bin/activate" in got.stderr
    assert "Traceback" not in got.stderr
