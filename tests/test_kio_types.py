"""wire/protocol/kio_types.py is scripts/gen_kio_types.py's output: the handlers' kio
aliases cannot drift from the versions wire/handlers/__init__.py HANDLERS offers."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gen_kio_types.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_kio_types", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple classes look their module up
    spec.loader.exec_module(module)
    return module


def test_checked_in_file_is_the_generated_one() -> None:
    generated = _generator().render()
    assert (REPO / "wire" / "protocol" / "kio_types.py").read_text() == generated, (
        "run: .venv/bin/python scripts/gen_kio_types.py"
    )


def test_every_api_offered_has_its_request_and_response_at_the_versions_offered() -> None:
    """Checked against kio's own index, not the generator's reading of kio's sources."""
    from kio.schema.index import api_key_map, schema_name_map

    from wire.handlers import HANDLERS

    tree = ast.parse((REPO / "wire" / "protocol" / "kio_types.py").read_text())
    written = {
        node.target.id: {part.strip() for part in ast.unparse(node.value).split("|")}
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }

    def classes(alias: str) -> set[str]:  # a narrower alias a union names, expanded
        return set().union(*(classes(m) if m in written else {m} for m in written[alias]))

    aliases = {alias: classes(alias) for alias in written}
    for key, api in HANDLERS.items():
        for version, classes in schema_name_map[api_key_map[key]].items():
            for where in classes.values():  # "kio.schema.fetch.v4.request:FetchRequest"
                module, name = where.split(":")
                offered = api.min_version <= version <= api.max_version
                assert (f"{module}.{name}" in aliases[name]) == offered, (name, version)
    # A narrowed alias holds only its versions.
    assert aliases["InitProducerIdRequestV3Plus"] == {
        f"kio.schema.init_producer_id.v{v}.request.InitProducerIdRequest"
        for v in range(3, HANDLERS[22].max_version + 1)
    }


def test_nothing_is_defined_at_run_time() -> None:
    """Importing the module must not import kio's schema versions (seconds)."""
    before = {name for name in sys.modules if name.startswith("kio.schema.metadata.v")}
    import wire.protocol.kio_types as kio_types

    assert not hasattr(kio_types, "MetadataRequest")
    after = {name for name in sys.modules if name.startswith("kio.schema.metadata.v")}
    assert after == before
