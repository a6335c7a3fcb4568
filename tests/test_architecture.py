"""The seams between packages (docs/architecture.md), checked on the source, not by convention.

- no import cycles inside ``src/verilive`` (imports under ``if TYPE_CHECKING:`` are not run and
  do not count), and none between ``eval/`` and ``train/``;
- no service's ``api`` module is imported by another package;
- ``capture/`` imports nothing private (``_name``) from ``face/``;
- engine modules (everything but ``server/``, the route modules ``api.py`` and ``*_routes.py`` and
  the composition roots ``deps.py``) import no HTTP library (fastapi, starlette, httpx);
- no HTTP status is written by hand outside ``server/``: no ``HTTPException``, no error status
  (4xx/5xx) as a ``status_code=`` or ``status=`` literal; errors carry their status in their class
  (``verilive/errors.py``), which routes and engines raise.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SERVICES = ("voice", "face", "capture")
PACKAGE = SRC / "verilive"
HTTP_LIBRARIES = ("fastapi", "starlette", "httpx")


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def runtime_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run at import time or call time (not under ``if TYPE_CHECKING``)."""

    def walk(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (n for c in child.orelse for n in walk_one(c))
                continue
            yield from walk_one(child)

    def walk_one(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from walk(node)

    yield from walk(tree)


def graph(base: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a ``from pkg import name`` counts ``pkg.name`` when
    that is a module, else ``pkg``)."""
    files = {module_name(p, base): p for pkg in packages for p in (base / pkg).rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                assert node.level == 0, f"{path}: relative import (the project uses absolute ones)"
                base_mod = node.module or ""
                targets = [
                    f"{base_mod}.{a.name}" if f"{base_mod}.{a.name}" in files else base_mod
                    for a in node.names
                ]
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    edges[mod].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_in_the_package() -> None:
    assert cycles(graph(SRC, ("verilive",))) == []


def test_no_import_cycle_between_eval_and_train() -> None:
    edges = graph(ROOT, ("eval", "train"))
    assert cycles(edges) == []
    eval_to_train = any(t.startswith("train") for m, ts in edges.items() if m.startswith("eval") for t in ts)
    train_to_eval = any(t.startswith("eval") for m, ts in edges.items() if m.startswith("train") for t in ts)
    assert not (eval_to_train and train_to_eval), "eval/ and train/ import each other"


def test_no_service_imports_another_services_routes() -> None:
    edges = graph(SRC, ("verilive",))
    bad = [
        (m, t)
        for m, ts in edges.items()
        for t in ts
        if t.endswith(".api")
        and t.split(".")[1] in SERVICES
        and m.split(".")[1] != t.split(".")[1]
        and m != "verilive.server.app"  # the app factory mounts each service's router
    ]
    assert bad == []


def test_capture_imports_nothing_private_from_face() -> None:
    bad = []
    for path in (SRC / "verilive" / "capture").rglob("*.py"):
        for node in runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verilive.face"):
                bad += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert bad == []


def is_http_layer(path: Path) -> bool:
    """``server/``, the route modules (``api.py``, ``*_routes.py``) and the composition roots
    (``deps.py``): the modules that may know about HTTP. Everything else under ``src/verilive`` is
    an engine module."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] == "server" or path.name in ("api.py", "deps.py") or path.stem.endswith("_routes")


def http_imports(tree: ast.Module) -> list[str]:
    """The HTTP libraries a module imports, at any depth (``TYPE_CHECKING`` imports included: an
    engine has no business naming HTTP types at all)."""
    found = []
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found += [n for n in names if n.split(".")[0] in HTTP_LIBRARIES]
    return found


def hand_written_statuses(tree: ast.Module) -> list[str]:
    """``HTTPException`` (raised, called or imported) and error statuses (4xx/5xx) written as
    ``status_code=`` or ``status=`` literals."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.Attribute) and "HTTPException" in ast.unparse(node):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and any(a.name == "HTTPException" for a in node.names):
            found.append(f"line {node.lineno}: import of HTTPException")
        elif isinstance(node, ast.keyword) and node.arg in ("status_code", "status"):
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, int) and v.value >= 400:
                found.append(f"line {node.lineno}: {node.arg}={v.value}")
    return found


def test_engines_import_no_http_library() -> None:
    bad = {
        str(p.relative_to(PACKAGE)): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if not is_http_layer(p) and (found := http_imports(ast.parse(p.read_text())))
    }
    assert bad == {}, "engine modules import HTTP libraries (move the HTTP part to a route module)"


def test_no_status_code_written_by_hand_outside_server() -> None:
    bad = {
        str(p.relative_to(PACKAGE)): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).parts[0] != "server"
        and (found := hand_written_statuses(ast.parse(p.read_text())))
    }
    assert bad == {}, "raise an error class of verilive/errors.py (it carries the status) instead"


def test_the_layer_checkers_find_what_they_look_for() -> None:
    """The two checkers above on made-up sources, so that a passing rule is not a blind one."""
    engine = ast.parse(
        "import numpy\nfrom starlette.concurrency import run_in_threadpool\nimport httpx.auth\n"
    )
    assert http_imports(engine) == ["starlette.concurrency", "httpx.auth"]
    statuses = ast.parse(
        "raise VeriliveError('x', status=413)\n"
        "JSONResponse({}, status_code=503)\n"
        "raise HTTPException(404)\n"
        "Response(status_code=304)\n"
        "VeriliveError('x', code='UNKNOWN')\n"
    )
    assert hand_written_statuses(statuses) == [
        "line 1: status=413",
        "line 2: status_code=503",
        "line 3: HTTPException",
    ]
    assert is_http_layer(PACKAGE / "capture" / "sdk_routes.py") and is_http_layer(
        PACKAGE / "server" / "app.py"
    )
    assert not is_http_layer(PACKAGE / "capture" / "service.py")


def test_the_checker_finds_a_cycle() -> None:
    """The cycle finder itself: a made-up graph with one cycle and one chain."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c"]]
