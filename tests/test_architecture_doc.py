"""docs/architecture.md names only things that exist: every dotted Python name it gives resolves to a module,
class, function or method, and every Go function its walk names is defined in the framework plugin."""

from __future__ import annotations

import importlib
import re

from tests import REPO

DOC = REPO / "docs" / "architecture.md"
GO_PLUGIN = REPO / "scheduler" / "pkg" / "kubenexus"
PROTO = REPO / "proto" / "kubenexus" / "placement" / "v1" / "placement.proto"
PYTHON_NAME = re.compile(r"^(?:placement|kubenexus|agent)(?:\.\w+)+$")


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\s]+)`", text)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def _go_functions() -> set[str]:
    source = "\n".join(path.read_text() for path in GO_PLUGIN.glob("*.go") if not path.name.endswith("_test.go"))
    return set(re.findall(r"^func (?:\([^)]*\) )?(\w+)\(", source, flags=re.MULTILINE))


def test_every_dotted_python_name_resolves() -> None:
    names = sorted({name for name in _backticked(DOC.read_text()) if PYTHON_NAME.match(name)})
    assert len(names) > 40  # the walks name the path step by step
    assert [name for name in names if not _resolves(name)] == []


def test_the_walks_go_steps_name_functions_the_plugin_defines() -> None:
    text = DOC.read_text()
    walk = text[text.index("## Walk 1:") : text.index("## Walk 2:")]
    functions = _go_functions()
    methods = {name.removeprefix("Plugin.") for name in _backticked(walk) if name.startswith("Plugin.")}
    helpers = {name for name in _backticked(walk) if re.fullmatch(r"[a-z][A-Za-z]*", name)}
    assert methods >= {"PreFilter", "Reserve", "Permit", "PreBind", "PostFilter"}
    assert sorted((methods | helpers) - functions) == []


def test_the_walks_rpcs_are_the_contracts() -> None:
    text = DOC.read_text()
    walk = text[text.index("## Walk 1:") : text.index("## Walk 2:")]
    rpcs = set(re.findall(r"rpc (\w+)\(", PROTO.read_text()))
    named = set(re.findall(r"(?:a|one) `(\w+)` RPC|asks `(\w+)`", walk))
    flat = {name for pair in named for name in pair if name}
    assert flat
    assert flat <= rpcs
