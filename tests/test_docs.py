"""The docs stay true: every file, module, class and function that docs/ and README.txt
name exists in the repository.

Checked: paths (``kafkaesque/hot/log.py``, ``scripts/bench/``, ``tests/power/power_cut.py``)
and bare file names (``append.lua``, ``log_appends.py``, ``operations.md``) exist; a name
written right after a Python file (``kafkaesque/hot/durability.py`` ``probe``) is defined in
it; ``Class.member`` for a class of the project's names a member of it (or of a base
class of the project's). Kafka's own classes (``KafkaApis``, ``AclEntry``...) are not the
project's and are not checked.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.txt", *sorted((REPO / "docs").glob("*.md"))]
SOURCE_DIRS = ("kafkaesque", "wire", "storage_pg", "scripts", "tests")
FILE_SUFFIXES = ("py", "lua", "sh", "md", "cfg", "toml", "c", "js", "json", "txt")

PATH = re.compile(
    r"(?<![\w/.-])((?:kafkaesque|wire|storage_pg|scripts|tests|docs|\.ci)/[\w./*-]*[\w/])"
)
BARE_FILE = re.compile(rf"(?<![\w/.-])([\w-]+\.(?:{'|'.join(FILE_SUFFIXES)}))(?![\w/])")
FILE_THEN_NAME = re.compile(r"`([\w/]+\.py)` `(\w+)(?:\(\))?`")
MEMBER = re.compile(r"`([A-Z]\w*)\.(\w+)(?:\(\))?`")
# Files the docs name that are not the project's: the standard library's, Kafka's tools,
# what the embedded PostgreSQL and scripts/jepsen.py write at run time.
NOT_OURS = {"selectors.py", "kafka-acls.sh", "postgres.json", "result.json", "summary.txt"}
FOREIGN_SUFFIXES = {"scala", "java", "clj"}  # `FetchSession.scala`: Kafka's, not a member


def _tracked_files() -> list[Path]:
    skipped = {".venv", ".git", "node_modules", "__pycache__", ".kafkaesque"}
    return [
        p
        for p in REPO.rglob("*")
        if p.is_file() and not skipped.intersection(p.relative_to(REPO).parts)
    ]


@cache
def _names_by_file() -> dict[str, set[str]]:
    """Every file's base name -> the relative paths of the files with that name."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in _tracked_files():
        found[path.name].add(str(path.relative_to(REPO)))
    return found


@cache
def _python() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, list[str]]]:
    """(names defined per file, at any depth; members per class; base class names per
    class) of every Python file of the project."""
    defined: dict[str, set[str]] = {}
    members: dict[str, set[str]] = defaultdict(set)
    bases: dict[str, list[str]] = defaultdict(list)
    for directory in SOURCE_DIRS:
        for path in (REPO / directory).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            names: set[str] = set()
            for node in ast.walk(tree):  # nested functions and methods too
                names.update(_bound(node))
                if isinstance(node, ast.ClassDef):
                    # A generic base (``Base[T]``) is its subscripted name.
                    named = (b.value if isinstance(b, ast.Subscript) else b for b in node.bases)
                    bases[node.name] += [b.id for b in named if isinstance(b, ast.Name)]
                    for item in ast.walk(node):
                        members[node.name].update(_bound(item))
                        if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                            members[node.name].add(item.attr)
            defined[str(path.relative_to(REPO))] = names
    return defined, members, bases


def _bound(node: ast.AST) -> set[str]:
    """The names a statement binds (functions, classes, assignments, imports)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def _has_member(cls: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    _, members, bases = _python()
    if member in members[cls]:
        return True
    return any(_has_member(b, member, seen | {cls}) for b in bases[cls] if b not in seen)


def _problems(doc: Path) -> list[str]:
    text = doc.read_text()
    where = doc.relative_to(REPO)
    problems = []
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if any(part.isupper() for part in re.split(r"[/.]", path)):
            continue  # a placeholder: scripts/bench/NAME.py
        if "*" in path or "..." in path:
            if not any(REPO.glob(path.replace("...", "*"))):
                problems.append(f"{where}: {path} matches no file")
        elif not (REPO / path).exists():
            problems.append(f"{where}: {path} does not exist")
    for match in BARE_FILE.finditer(text):
        name = match.group(1)
        if name in NOT_OURS or name.split(".")[0].isupper():
            continue
        if name not in _names_by_file():
            problems.append(f"{where}: no file is named {name}")
    defined, members, _ = _python()
    for match in FILE_THEN_NAME.finditer(text):
        file, name = match.groups()
        candidates = [f for f in defined if f == file or f.endswith("/" + file)]
        if candidates and not any(name in defined[f] for f in candidates):
            problems.append(f"{where}: {file} defines no {name}")
    for match in MEMBER.finditer(text):
        cls, member = match.groups()
        if member in FOREIGN_SUFFIXES:
            continue
        if cls in members and not _has_member(cls, member):
            problems.append(f"{where}: {cls} has no member {member}")
    return problems


def test_every_file_module_class_and_function_the_docs_name_exists() -> None:
    problems = [problem for doc in DOCS for problem in _problems(doc)]
    assert not problems, "\n".join(problems)


def test_the_cli_guide_lists_every_command() -> None:
    from kafkaesque.cli import main

    guide = (REPO / "docs" / "cli.md").read_text()
    missing = [name for name in main.commands if not re.search(rf"\b{name}\b", guide)]
    assert not missing, f"docs/cli.md does not list: {', '.join(missing)}"
