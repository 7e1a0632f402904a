"""The import rules the packages' docstrings state, checked on the source (ast; nothing is
imported): who may import a wire handler, which way imports between the top-level
packages point, that wire/protocol/ stands alone, that no imports form a cycle, and
that only the hot store (kafkaesque/hot/) reaches Redis.

Every ``import`` counts, at the top of a module or inside a function; for cycles, those
under ``if TYPE_CHECKING:`` do not (they never run). Importing ``a.b.c`` also runs the
packages ``a`` and ``a.b``, so a cycle through a package's ``__init__.py`` is a cycle too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("kafkaesque", "wire", "storage_pg")
TABLE = "wire.handlers"  # the API table, wire/handlers/__init__.py: imports every handler
HANDLER = TABLE + "."
HOT = "kafkaesque.hot"  # the hot store: the only package that reaches Redis
# What only the hot store may use: redis-py, the key layout, the engines.
HOT_ONLY_MODULES = ("kafkaesque.hot.keys", "kafkaesque.hot.slots", "kafkaesque.hot.tier")
# Attributes that hold a Redis client, its scripts or say "this is a cluster": reaching
# one outside the hot store is a Redis access or a cluster branch there. (``keys`` only
# when not called: ``dict.keys()`` is fine, ``log.keys.topic(...)`` is not.)
HOT_ATTRIBUTES = ("redis", "scripts", "cluster")


@dataclass(frozen=True, slots=True)
class Import:
    target: str  # the module imported: one of ours, or what the statement names
    line: int
    typing_only: bool  # under ``if TYPE_CHECKING:``


@cache
def _modules() -> dict[str, Path]:
    """Every module of PACKAGES by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _ours(name: str) -> str:
    """The longest of our modules ``name`` is, or is inside (``name`` if none)."""
    modules = _modules()
    candidate = name
    while candidate:
        if candidate in modules:
            return candidate
        candidate = candidate.rpartition(".")[0]
    return name


@cache
def _imports(module: str) -> tuple[Import, ...]:
    """What ``module`` imports: ``from p import m`` of a module m is an import of p.m."""
    path = _modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(_ours(alias.name), node.lineno, typing_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in _modules() else _ours(source)
                found.append(Import(target, node.lineno, typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(ast.parse(path.read_text(), str(path)), False)
    return tuple(i for i in found if i.target != module)


def _where(module: str, imp: Import) -> str:
    return f"{_modules()[module].relative_to(REPO)}:{imp.line} imports {imp.target}"


def _all_imports() -> Iterator[tuple[str, Import]]:
    for module in _modules():
        for imp in dict.fromkeys(_imports(module)):  # once per line and module imported
            yield module, imp


def _top(name: str) -> str:
    return name.partition(".")[0]


def test_handlers_never_import_each_other_and_only_the_connection_imports_the_table() -> None:
    """Only the table imports handler modules, and only wire/net/connection.py imports the
    table (``handle``, ``supported``): what handlers share lives outside wire/handlers/."""
    wrong = [
        _where(module, imp)
        for module, imp in _all_imports()
        if (imp.target.startswith(HANDLER) and module != TABLE)
        or (imp.target == TABLE and module != "wire.net.connection")
    ]
    assert not wrong, "\n".join(wrong)


def test_imports_between_packages_point_one_way() -> None:
    """kafkaesque imports neither wire nor storage_pg (but its CLI, which composes them,
    and its web console, which reads the archive); wire and storage_pg never import each
    other."""
    refused = {
        "kafkaesque": {"wire", "storage_pg"},
        "wire": {"storage_pg"},
        "storage_pg": {"wire"},
    }
    wrong = [
        _where(module, imp)
        for module, imp in _all_imports()
        if _top(imp.target) in refused[_top(module)]
        and not (module == "kafkaesque.cli" or module.startswith("kafkaesque.cli."))
        # the web console composes too: its Archive page reads storage_pg (never wire)
        and not (module.startswith("kafkaesque.console") and _top(imp.target) == "storage_pg")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_protocol_package_imports_nothing_of_the_project() -> None:
    """wire/protocol/ (parsing and encoding, no I/O) imports nothing from kafkaesque or the
    rest of wire."""
    wrong = [
        _where(module, imp)
        for module, imp in _all_imports()
        if (module == "wire.protocol" or module.startswith("wire.protocol."))
        and _top(imp.target) in PACKAGES
        and not (imp.target == "wire.protocol" or imp.target.startswith("wire.protocol."))
    ]
    assert not wrong, "\n".join(wrong)


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it runs when imported: what it imports (not under
    TYPE_CHECKING), and their packages but its own."""
    graph: dict[str, set[str]] = {module: set() for module in _modules()}
    for module, imp in _all_imports():
        if imp.typing_only or imp.target not in graph:
            continue
        graph[module].add(imp.target)
        parts = imp.target.split(".")
        for n in range(1, len(parts)):
            package = ".".join(parts[:n])
            if package in graph and not (module == package or module.startswith(package + ".")):
                graph[module].add(package)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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
    return components


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One cycle through a component, as the modules in import order (the first again
    at the end): the shortest back to its first module."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & component):
                if successor == start:
                    return [*paths[node], start]
                if successor not in paths:
                    paths[successor] = [*paths[node], successor]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def test_no_import_cycles() -> None:
    graph = _graph()
    found = _cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(
        " -> ".join(_a_cycle(graph, component)) for component in found
    )


def test_the_cycle_check_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [{"a", "b", "c"}]
    assert _a_cycle(graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]


def _redis_reaches(source: str) -> Iterator[tuple[int, str]]:
    """Where ``source`` reaches Redis itself: imports redis-py or what only the hot store
    uses, or touches a client, its scripts, its keys or its cluster flag."""
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
            for name in names:
                if name.split(".")[0] == "redis" or name.startswith(HOT_ONLY_MODULES):
                    yield node.lineno, f"imports {name}"
        elif isinstance(node, ast.Attribute):
            if node.attr in HOT_ATTRIBUTES or (node.attr == "keys" and id(node) not in called):
                yield node.lineno, f".{node.attr}"


def test_only_the_hot_store_reaches_redis() -> None:
    """No Redis client, key or cluster branch outside kafkaesque/hot/: everything else asks
    its stores (``Log.stores``, ``GroupStore``, ...)."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for module, path in _modules().items()
        if module != HOT and not module.startswith(HOT + ".")
        for line, what in _redis_reaches(path.read_text())
    ]
    assert not found, "Redis reached outside the hot store:\n" + "\n".join(found)


def test_the_redis_check_finds_each_way_of_reaching_redis() -> None:
    source = """
import redis.asyncio
from kafkaesque.hot.keys import Keys
async def f(log, d):
    await log.redis.get(log.keys.topics)
    if log.cluster:
        pass
    return list(d.keys())
"""
    assert sorted(_redis_reaches(source)) == [
        (2, "imports redis.asyncio"),
        (3, "imports kafkaesque.hot.keys"),
        (5, ".keys"),
        (5, ".redis"),
        (6, ".cluster"),
    ]
