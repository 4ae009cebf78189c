"""The layers hold: each layer imports only itself, the generated wire code, and the PUBLIC names of
the layer directly below it.

    hipdnn (root: __init__, cli, sdk, reference)   may use anything
    hipdnn.torch  ->  hipdnn.frontend  ->  hipdnn.backend  ->  hipdnn.plugins  ->  C ABI (plugin_sdk/include)
    hipdnn.wire (generated FlatBuffers code)         may be imported by every layer

Checked statically (``ast``), so an import inside a function or under ``TYPE_CHECKING`` counts, as does
``importlib.import_module("...")`` with a literal name. Relative imports are resolved first.

- torch (the optional PyTorch layer, ``pip install "hipdnn[torch]"``): ``hipdnn.torch``, ``hipdnn.wire`` and
  names of ``hipdnn.frontend`` not starting with ``_``; nothing from the backend, the plugins nor the
  root. Nothing below imports it: it needs torch, which the rest of hipdnn does not.
- frontend: ``hipdnn.frontend``, ``hipdnn.wire``, and names of ``hipdnn.backend`` not starting with
  ``_``; nothing from ``hipdnn.plugins`` (the backend re-exports what the frontend needs), nor the
  package root or its top-level modules.
- backend: ``hipdnn.backend``, ``hipdnn.wire``, and names of ``hipdnn.plugins`` not starting with
  ``_``; nothing from ``hipdnn.frontend`` nor the package root (``import hipdnn``,
  ``from hipdnn import x``).
- plugins: ``hipdnn.plugins`` and ``hipdnn.wire``; nothing from ``hipdnn.backend``,
  ``hipdnn.frontend`` nor the root.

Within a layer, too, the imports go one way: no module of the package reaches itself through its
imports (``test_no_import_cycles``).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hipdnn"
ROOT = "hipdnn"
WIRE = "hipdnn.wire"

#: layer -> the layer directly below it, whose public names it may use (None: the bottom layer).
LAYERS: dict[str, str | None] = {
    # hipdnn.torch (attention for PyTorch) sits on the frontend's public API, above every other layer
    "hipdnn.torch": "hipdnn.frontend",
    # hipdnn.device (GPU buffers and streams) sits beside the frontend: a leaf over the backend's errors
    "hipdnn.device": "hipdnn.backend",
    "hipdnn.frontend": "hipdnn.backend",
    "hipdnn.backend": "hipdnn.plugins",
    "hipdnn.plugins": None,
}

#: Known violations in files being rewritten by another change; (file relative to the repository,
#: imported name). DELETE an entry when its import is gone: test_allow_lists_are_not_stale fails on
#: entries that no longer match anything, so the list only ever shrinks.
BEING_FIXED: frozenset[tuple[str, str]] = frozenset()

#: Long-standing upward imports accepted on purpose (e.g. the backend reading hipdnn.frontend.types),
#: each with its reason. None: the committed backend imports nothing from the frontend. Do not add an
#: entry to make this test pass; move the shared definition down a layer instead.
ACCEPTED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    file: str  # relative to the repository, with forward slashes
    line: int
    target: str  # absolute dotted name: a module, or module.name for `from module import name`


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(source: str, module: str, file: str, is_package: bool = False) -> Iterator[Import]:
    """Every import in ``source`` (anywhere in the file), as absolute dotted targets."""
    tree = ast.parse(source, filename=file)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(file, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            for alias in node.names:
                yield Import(file, node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield Import(file, node.lineno, first.value)


def _within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


def problem(layer: str, target: str) -> str | None:
    """Why ``target``, imported by a module of ``layer``, breaks the layering (None: it does not)."""
    if not _within(target, ROOT):
        return None  # standard library or third party
    if _within(target, WIRE) or _within(target, layer):
        return None
    below = LAYERS[layer]
    if below is not None and _within(target, below):
        private = [p for p in target[len(below) + 1 :].split(".") if p.startswith("_")]
        if private:
            return f"uses the private name {private[0]!r} of {below}"
        return None
    for other in LAYERS:
        if _within(target, other):
            direction = "upward" if list(LAYERS).index(other) < list(LAYERS).index(layer) else "skipping a layer"
            return f"imports from {other} ({direction})"
    return "imports the package root or one of its top-level modules (above every layer)"


def layer_of(module: str) -> str | None:
    return next((layer for layer in LAYERS if _within(module, layer)), None)


def layered_modules() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (REPO / Path(*layer.split("."))).rglob("*.py"))


def all_imports() -> list[tuple[str, Import]]:
    out = []
    for path in layered_modules():
        module = module_name(path)
        layer = layer_of(module)
        assert layer is not None, module
        rel = path.relative_to(REPO).as_posix()
        out += [(layer, imp) for imp in imports_of(path.read_text(), module, rel, path.name == "__init__.py")]
    return out


def violations() -> list[tuple[Import, str]]:
    found = []
    for layer, imp in all_imports():
        why = problem(layer, imp.target)
        if why is not None:
            found.append((imp, why))
    return found


# -- the checker itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layer", "target", "expected"),
    [
        ("hipdnn.frontend", "numpy", None),
        ("hipdnn.frontend", "hipdnn.wire.Graph.GraphT", None),
        ("hipdnn.frontend", "hipdnn.frontend.types.DataType", None),
        ("hipdnn.frontend", "hipdnn.backend.BackendHandle", None),
        ("hipdnn.frontend", "hipdnn.backend.plan_cache.PlanKey", None),
        ("hipdnn.frontend", "hipdnn.backend._private", "private name '_private'"),
        ("hipdnn.frontend", "hipdnn.backend._mod.Name", "private name '_mod'"),
        ("hipdnn.frontend", "hipdnn.plugins.loader.ffi", "skipping a layer"),
        ("hipdnn.frontend", "hipdnn", "package root"),
        ("hipdnn.frontend", "hipdnn.Graph", "package root"),
        ("hipdnn.frontend", "hipdnn.sdk", "package root"),
        ("hipdnn.backend", "hipdnn.plugins.PluginError", None),
        ("hipdnn.backend", "hipdnn.plugins._cdef.sdk_cdef", "private name '_cdef'"),
        ("hipdnn.backend", "hipdnn.frontend.types.DataType", "upward"),
        ("hipdnn.backend", "hipdnn", "package root"),
        ("hipdnn.backend", "hipdnn.wire", None),
        ("hipdnn.plugins", "hipdnn.plugins._cdef.sdk_cdef", None),
        ("hipdnn.plugins", "hipdnn.backend.enums", "upward"),
        ("hipdnn.plugins", "hipdnn.frontend", "upward"),
        ("hipdnn.plugins", "hipdnn", "package root"),
        ("hipdnn.torch", "torch", None),
        ("hipdnn.torch", "hipdnn.torch.plans.Plan", None),
        ("hipdnn.torch", "hipdnn.frontend.Graph", None),
        ("hipdnn.torch", "hipdnn.frontend._private", "private name '_private'"),
        ("hipdnn.torch", "hipdnn.backend.BackendHandle", "skipping a layer"),
        ("hipdnn.torch", "hipdnn.plugins.loader", "skipping a layer"),
        ("hipdnn.torch", "hipdnn", "package root"),
        ("hipdnn.frontend", "hipdnn.torch.scaled_dot_product_attention", "upward"),
        ("hipdnn.backend", "hipdnn.torch", "upward"),
    ],
)
def test_problem(layer: str, target: str, expected: str | None) -> None:
    why = problem(layer, target)
    if expected is None:
        assert why is None, why
    else:
        assert why is not None and expected in why, why


def test_imports_are_found_everywhere_and_resolved() -> None:
    source = (
        "import hipdnn\n"
        "from hipdnn import Graph\n"
        "from . import enums\n"
        "from ..frontend.types import DataType\n"
        "def f():\n"
        "    from hipdnn.plugins import loader\n"
        "    importlib.import_module('hipdnn.frontend.graph')\n"
        "if TYPE_CHECKING:\n"
        "    import hipdnn.frontend.graph as g\n"
    )
    got = [i.target for i in imports_of(source, "hipdnn.backend.descriptors", "x.py")]
    assert sorted(got) == sorted(
        [
            "hipdnn",
            "hipdnn.Graph",
            "hipdnn.backend.enums",
            "hipdnn.frontend.types.DataType",
            "hipdnn.plugins.loader",
            "hipdnn.frontend.graph",
            "hipdnn.frontend.graph",
        ]
    )
    pkg = [i.target for i in imports_of("from . import base\n", "hipdnn.frontend.ops", "x.py", is_package=True)]
    assert pkg == ["hipdnn.frontend.ops.base"]


def test_every_layer_has_modules() -> None:
    modules = [module_name(p) for p in layered_modules()]
    for layer in LAYERS:
        assert any(_within(m, layer) for m in modules), layer
    assert "hipdnn.frontend.ops.base" in modules  # subpackages are walked too


# -- the rule ----------------------------------------------------------------------------------


def test_layers_hold() -> None:
    known = BEING_FIXED | ACCEPTED
    new = [
        f"{imp.file}:{imp.line}: {imp.target}: {why}"
        for imp, why in violations()
        if (imp.file, imp.target) not in known
    ]
    assert not new, "layering violations (see this file's docstring for the rules):\n" + "\n".join(new)


def test_allow_lists_are_not_stale() -> None:
    seen = {(imp.file, imp.target) for imp, _ in violations()}
    stale = sorted((BEING_FIXED | ACCEPTED) - seen)
    assert not stale, f"these allowed violations are gone; delete them from the allow-list: {stale}"


# -- no import circles -------------------------------------------------------------------------
#
# The package's modules and their imports form a graph that must have no cycle. Every import counts,
# wherever it sits (module level, under ``TYPE_CHECKING``, inside a function): a deferred import is
# the same dependency, and counting it keeps a circle from being hidden by moving an import into a
# function. ``from x import y`` names the module ``x.y`` when that is a module, else ``x``. The implicit
# import of a module's parent packages is not an edge: a package's ``__init__`` re-exporting its
# submodules is the usual shape, not a circle.


def package_modules() -> dict[str, Path]:
    """Every module of the hipdnn package, the generated wire code included, by dotted name. A
    ``.pyi`` stub stands for a compiled extension (``hipdnn.backend._execute_core``)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py*")):
        if path.suffix in (".py", ".pyi"):
            found.setdefault(module_name(path), path)  # the .py source wins over its stub
    return found


def resolve_module(target: str, modules: Collection[str]) -> str | None:
    """The module of hipdnn that importing ``target`` (``pkg.mod`` or ``pkg.mod.name``) reads."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def import_graph() -> dict[str, dict[str, Import]]:
    """module -> {module of hipdnn it imports: the first import statement naming it}."""
    modules = package_modules()
    graph: dict[str, dict[str, Import]] = {}
    for module, path in modules.items():
        edges: dict[str, Import] = {}
        if path.suffix == ".py":
            rel = path.relative_to(REPO).as_posix()
            for imp in imports_of(path.read_text(), module, rel, path.name == "__init__.py"):
                target = resolve_module(imp.target, modules)
                if target is not None and target != module:
                    edges.setdefault(target, imp)
        graph[module] = edges
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One shortest cycle through each strongly connected component of ``graph`` that has more than
    one node, as ``[a, b, ..., a]``; an empty list when the graph is acyclic."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def strongconnect(root: str) -> None:  # Tarjan's algorithm, iterative
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)

    cycles = []
    for component in sorted(components, key=min):
        start = min(component)
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:  # breadth-first, back to start, inside the component
            following = []
            for node in frontier:
                for child in sorted(graph.get(node, ())):
                    if child in component and child not in previous:
                        previous[child] = node
                        following.append(child)
            frontier = following
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(previous[path[-1]])
        cycles.append(path[::-1])
    return cycles


def test_find_cycles() -> None:
    assert find_cycles({"a": ["b"], "b": ["c"], "c": []}) == []
    assert find_cycles({"a": ["b"], "b": ["a"]}) == [["a", "b", "a"]]
    got = find_cycles({"a": ["b"], "b": ["c", "d"], "c": ["a"], "d": ["b"], "e": ["e2"], "e2": ["e"]})
    assert got == [["a", "b", "c", "a"], ["e", "e2", "e"]]


def test_imports_resolve_to_modules() -> None:
    modules = {"hipdnn", "hipdnn.plugins", "hipdnn.plugins.loader"}
    assert resolve_module("hipdnn.plugins.loader.SkippedPlugin", modules) == "hipdnn.plugins.loader"
    assert resolve_module("hipdnn.plugins.loader", modules) == "hipdnn.plugins.loader"
    assert resolve_module("hipdnn.plugins.PluginError", modules) == "hipdnn.plugins"
    assert resolve_module("numpy.linalg", modules) is None
    graph = import_graph()
    assert "hipdnn.backend._execute_core" in graph["hipdnn.backend.execute_core"]  # a compiled module, by its stub
    assert "hipdnn.frontend.shortcuts" in graph["hipdnn.frontend.graph"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    shown = [
        " -> ".join(cycle)
        + "\n"
        + "\n".join(
            f"    {graph[a][b].file}:{graph[a][b].line} imports {graph[a][b].target}" for a, b in zip(cycle, cycle[1:])
        )
        for cycle in cycles
    ]
    assert not cycles, "import cycles in the hipdnn package (move the shared piece to one side):\n" + "\n".join(shown)
