"""wire/protocol/kio_types.py is scripts/gen_kio_types.py's output: the handlers' kio
aliases cannot drift from the versions wire/handlers/__init__.py HANDLERS offers."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gen_kio_types.py"


@cache
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


def test_the_generator_reads_the_version_ranges_the_broker_offers() -> None:
    """It reads the HANDLERS table from source (the handlers import its output)."""
    from wire.handlers import supported

    assert _generator().offered_ranges() == supported()


def _aliases() -> dict[str, set[str]]:
    """Each alias of the checked-in file -> the kio classes it names (a narrower alias
    that a union names, expanded)."""
    tree = ast.parse((REPO / "wire" / "protocol" / "kio_types.py").read_text())
    written = {
        node.target.id: {part.strip() for part in ast.unparse(node.value).split("|")}
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }

    def classes(alias: str) -> set[str]:
        return set().union(*(classes(m) if m in written else {m} for m in written[alias]))

    return {alias: classes(alias) for alias in written}


def test_every_api_offered_has_its_request_and_response_at_the_versions_offered() -> None:
    """Checked against kio's own index, not the generator's reading of kio's sources."""
    from kio.schema.index import api_key_map, schema_name_map

    from wire.handlers import HANDLERS

    aliases = _aliases()
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


def test_importing_it_imports_no_kio_schema_version() -> None:
    """The aliases exist for the checker alone: importing every kio version costs seconds.
    In a fresh interpreter, as the handlers import it already in this one."""
    probe = (
        "import re, sys\n"
        "import wire.protocol.kio_types as k\n"
        "assert not hasattr(k, 'MetadataRequest')\n"
        "print([m for m in sys.modules if re.match(r'kio[.]schema[.][a-z_]+[.]v[0-9]', m)])\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]"


def test_each_check_narrows_to_exactly_the_versions_of_its_alias() -> None:
    """A ``TypeIs`` function is trusted by the checker: its version test must hold for
    exactly the versions its alias names, of those offered."""
    from kio.schema.index import api_key_map, schema_name_map

    import wire.protocol.kio_types as kio_types
    from wire.handlers import HANDLERS

    aliases = _aliases()
    keys = {name: key for key, name in api_key_map.items()}
    checked = [extra for extra in _generator().EXTRA if extra.check]
    assert checked
    for extra in checked:
        api = HANDLERS[keys[extra.api]]
        offered = set(range(api.min_version, api.max_version + 1))
        named = {int(c.split(f"{extra.api}.v")[1].split(".")[0]) for c in aliases[extra.alias]}
        assert named and named < offered, extra.alias
        for version in offered & set(schema_name_map[extra.api]):
            body = type("Body", (), {"__version__": version})()
            assert getattr(kio_types, extra.check)(body) == (version in named), (
                extra.check,
                version,
            )
