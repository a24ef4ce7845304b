"""The import graph of flashsim: layers, the one door to the GPU harness, CLI code in one place, no cycles.

The graph is static: every module under flashsim/ and gpu/ (the harness, installed as ``flashsim.gpu``) is
parsed with ``ast``, and every import of a project module is an edge, at module level or inside a function
alike, and so is ``importlib.import_module("flashsim. ...")`` with a literal name.

Nodes: ``flashsim.<name>`` for a subpackage flashsim/<name>/ (every module under it), the module itself for
a top-level module flashsim/<name>.py, and ``flashsim`` for the package root (flashsim/__init__.py).

Layers, low to high; a module imports its own layer and the ones below, never one above:

- base:  errors, _version, options, outputs, progress, device (the one door to the GPU harness)
- core:  the simulator (CORE below)
- front: the package root (its lazy ``flash_attn_func``), api, check, run, session (records, replays and
         forces traces of the FA kernels: it runs them), testing, locate, strategies, triton and numba (other
         compilers' kernels launched on the core): the library's entry points, built on the core
- gpu:   the GPU harness (flashsim.gpu): scripts run on a GPU machine, cupy's runtime, and what turns the
         reports they commit into package data (sass_evidence)
- entry: flashsim.cli (the ``flashsim`` command), __main__, the pytest plugin

Only :mod:`flashsim.device` (and the harness itself) imports ``flashsim.gpu``. The ALLOWED_* constants name
the edges that break a rule today and go away with work in progress elsewhere; each says why it remains.
An entry that no longer matches an edge fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BASE = {"flashsim.errors", "flashsim._version", "flashsim.options", "flashsim.outputs", "flashsim.progress",
        "flashsim.device"}
CORE = {"flashsim.numerics", "flashsim.layout", "flashsim.warp", "flashsim.smem", "flashsim.swizzle",
        "flashsim.attention", "flashsim.kernels", "flashsim.trace", "flashsim.sass", "flashsim.cuda",
        "flashsim.viz", "flashsim.cluster", "flashsim.golden", "flashsim.validation"}
FRONT = {"flashsim", "flashsim.api", "flashsim.check", "flashsim.run", "flashsim.session", "flashsim.testing",
         "flashsim.locate", "flashsim.strategies", "flashsim.triton", "flashsim.numba", "flashsim.fuzz",
         "flashsim.divergence"}
GPU = {"flashsim.gpu"}
ENTRY = {"flashsim.cli", "flashsim.__main__", "flashsim.pytest_plugin"}
LAYERS = {"base": BASE, "core": CORE, "front": FRONT, "gpu": GPU, "entry": ENTRY}
RANK = {node: i for i, nodes in enumerate(LAYERS.values()) for node in nodes}

#: the one edge into the harness: flashsim.device looks the harness up by name at call time (the core
#: depends on that interface, the harness implements it), so it is left out of the cycle check
DOOR = ("flashsim.device", "flashsim.gpu")

# Allow-lists: (importer, imported) -> why the edge remains. The importer is a module or a package prefix
# (``flashsim.trace`` matches flashsim.trace.record); the imported side is a node (see the module docstring).

#: imports of the GPU harness from outside flashsim.gpu and flashsim.device (rule a)
ALLOWED_GPU_IMPORTS: dict[tuple[str, str], str] = {}

#: imports of a higher layer (rule b)
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

#: package edges left out of the cycle check (rule c): each closes a cycle today
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}

#: modules that may import argparse outside flashsim.cli: parsing helpers, the harness's own scripts
ARGPARSE_OK = {"flashsim.options": "argparse types of the option definitions shared with the pytest plugin",
               "flashsim.gpu": "each harness script is its own command: python -m flashsim.gpu.<script>"}
#: command-line code still outside flashsim.cli (rule d)
ALLOWED_CLI_OUTSIDE: dict[str, str] = {}


# ------------------------------------------------------------------------------------------------ the graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "gpu":
        parts = ["flashsim", "gpu", *parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("flashsim", "gpu"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                out[_module_name(path)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module that importing ``name`` loads last (a.b.c -> a.b when c is a name in a.b)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        # "from a import b": b is a module of a, or a name defined in a
        return [f"{stem}.{a.name}" if _resolve(f"{stem}.{a.name}") == f"{stem}.{a.name}" else stem
                for a in node.names]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "importlib"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [node.args[0].value]
    return []


def _edges() -> list[tuple[str, str, int]]:
    """(importer, imported module, line) of every import of a project module."""
    out = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for name in _imported(node, module, path.name == "__init__.py"):
                if name == "flashsim" or name.startswith("flashsim."):
                    target = _resolve(name)
                    if target is not None and target != module:
                        out.append((module, target, node.lineno))
    return out


EDGES = _edges()


def node(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _matches(key: tuple[str, str], src: str, dst: str) -> bool:
    a, b = key
    return (src == a or src.startswith(a + ".")) and (dst == b or (b != "flashsim" and dst.startswith(b + ".")))


def _check(violations: list[tuple[str, str, int]], allowed: dict, what: str) -> None:
    """Every violation allowed; every allowance still needed."""
    bad = [f"{s} -> {d} (line {n})" for s, d, n in violations if not any(_matches(k, s, d) for k in allowed)]
    stale = [k for k in allowed if not any(_matches(k, s, d) for s, d, _ in violations)]
    assert not bad, f"{what}:\n  " + "\n  ".join(bad)
    assert not stale, f"allow-list entries that no edge needs any more (remove them): {stale}"


# ------------------------------------------------------------------------------------------------ the rules


def test_every_node_has_a_layer():
    nodes = {node(m) for m in MODULES}
    assert nodes <= set(RANK), f"modules in no layer (add them to one in this file): {sorted(nodes - set(RANK))}"
    assert set(RANK) <= nodes, f"layers name modules that do not exist: {sorted(set(RANK) - nodes)}"


def test_only_the_device_module_imports_the_gpu_harness():
    viol = [(s, d, n) for s, d, n in EDGES
            if node(d) == "flashsim.gpu" and node(s) != "flashsim.gpu" and s != "flashsim.device"]
    _check([(s, node(d), n) for s, d, n in viol], ALLOWED_GPU_IMPORTS,
           "imports of the GPU harness outside flashsim.device (go through flashsim.device)")


def test_no_module_imports_a_higher_layer():
    viol = [(s, node(d), n) for s, d, n in EDGES
            if node(d) != "flashsim.gpu" and RANK[node(d)] > RANK[node(s)]]
    _check(viol, ALLOWED_UPWARD, "imports of a higher layer (base < core < front < gpu < entry)")


@pytest.mark.parametrize("low", ["base", "core"])
def test_core_never_reaches_the_cli_the_plugin_or_the_front(low):
    """The rule the issue states, spelled out: core packages import neither the CLI, the pytest plugin, the
    front modules nor the GPU harness (the last through flashsim.device only)."""
    high = FRONT | ENTRY | GPU
    viol = [(s, node(d), n) for s, d, n in EDGES if node(s) in LAYERS[low] and node(d) in high
            and (s, node(d)) != DOOR]
    allowed = {k: v for k, v in {**ALLOWED_UPWARD, **ALLOWED_GPU_IMPORTS}.items()
               if any(_matches(k, s, d) for s, d, _ in viol)}
    _check(viol, allowed, f"{low} modules importing front / entry / GPU-harness modules")


def _package_graph() -> dict[str, set[str]]:
    graph = defaultdict(set)
    for s, d, _ in EDGES:
        a, b = node(s), node(d)
        if a != b and (a, b) != DOOR and (a, b) not in ALLOWED_CYCLE_EDGES:
            graph[a].add(b)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_between_packages():
    cycles = _cycles(_package_graph())
    detail = []
    for comp in cycles:
        detail.append(" <-> ".join(comp) + ":\n    " + "\n    ".join(
            f"{s} -> {d} (line {n})" for s, d, n in EDGES if node(s) in comp and node(d) in comp and node(s) != node(d)
            and (node(s), node(d)) not in ALLOWED_CYCLE_EDGES and (node(s), node(d)) != DOOR))
    assert not cycles, "cycles between packages:\n  " + "\n  ".join(detail)
    pairs = {(node(s), node(d)) for s, d, _ in EDGES}
    stale = [k for k in ALLOWED_CYCLE_EDGES if k not in pairs]
    assert not stale, f"ALLOWED_CYCLE_EDGES entries no edge needs any more (remove them): {stale}"
    # an allowed edge that no longer closes a cycle is not needed either
    full = _package_graph()
    for k in ALLOWED_CYCLE_EDGES:
        full[k[0]].add(k[1])
    in_cycle = {(a, b) for comp in _cycles(full) for a in comp for b in comp}
    assert set(ALLOWED_CYCLE_EDGES) <= in_cycle, (
        f"ALLOWED_CYCLE_EDGES entries that close no cycle (remove them): {sorted(set(ALLOWED_CYCLE_EDGES) - in_cycle)}")


def _imports_argparse(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.Import) and any(a.name == "argparse" for a in n.names)
               or isinstance(n, ast.ImportFrom) and n.module == "argparse" for n in ast.walk(tree))


def test_command_line_code_lives_in_flashsim_cli():
    """argparse only in flashsim.cli (and the parsing helpers and harness scripts ARGPARSE_OK names); no
    ``cli`` module inside another package."""
    def ok(m):
        return node(m) == "flashsim.cli" or any(m == k or m.startswith(k + ".") for k in ARGPARSE_OK)

    outside = {m for m, p in MODULES.items() if not ok(m) and (_imports_argparse(p) or m.endswith(".cli"))}
    assert outside <= set(ALLOWED_CLI_OUTSIDE), (
        f"command-line code outside flashsim/cli: {sorted(outside - set(ALLOWED_CLI_OUTSIDE))}")
    assert set(ALLOWED_CLI_OUTSIDE) <= outside, (
        f"ALLOWED_CLI_OUTSIDE entries no longer needed (remove them): {sorted(set(ALLOWED_CLI_OUTSIDE) - outside)}")


def test_the_graph_sees_every_kind_of_import():
    """The scanner itself: module-level, function-level and importlib imports, relative imports, gpu/ mapped
    to flashsim.gpu."""
    pairs = {(s, d) for s, d, _ in EDGES}
    assert ("flashsim.device", "flashsim.gpu.runtime") in pairs          # importlib.import_module("...")
    assert ("flashsim", "flashsim.api") in pairs                         # inside __getattr__
    assert ("flashsim.cli", "flashsim.cli.trace") in pairs               # from flashsim.cli import trace
    assert ("flashsim.gpu.validate", "flashsim.gpu.cases") in pairs      # gpu/ is flashsim.gpu
    assert all(s in MODULES and d in MODULES for s, d in pairs)
