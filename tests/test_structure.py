"""The shape of the code, as a newcomer relies on it: no import circles between modules (imports
made only for type checking count too: they hide a call back at run time), every import runs down
the layers storage <- raft <- api <- app (the pipeline reads storage's formats, and app's CLI runs
it), and no module grows past about 500 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"storage": 0, "raft": 1, "pipeline": 1, "api": 2, "app": 3,  # the pipeline: storage's codecs only
          "client": 3}  # the client: the API's wire formats
LINES_MAX = 500
GENERATED = ("_pb2.py", "_pb2_grpc.py")


def modules() -> dict[str, Path]:
    """raftlog.<folder>.<module> -> its file."""
    found = {}
    for folder in LAYERS:
        for path in sorted((ROOT / folder).glob("*.py")):
            name = f"raftlog.{folder}" if path.stem == "__init__" else f"raftlog.{folder}.{path.stem}"
            found[name] = path
    return found


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of the others, wherever they stand (TYPE_CHECKING blocks included)."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets.add(base)
                targets |= {f"{base}.{alias.name}" for alias in node.names}  # `from package import module`
        # a module's own package (its __init__) is loaded before it anyway: not an edge of a circle
        graph[name] = {t for t in targets if t in known and t != name and not name.startswith(f"{t}.")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int:
    return LAYERS[module.split(".")[1]] if module.count(".") else -1


def test_the_checks_find_a_circle_and_an_upward_import() -> None:
    graph = {"raftlog.raft.a": {"raftlog.raft.b"}, "raftlog.raft.b": {"raftlog.raft.c"},
             "raftlog.raft.c": {"raftlog.raft.a", "raftlog.api.d"}, "raftlog.api.d": set()}
    assert circles(graph) == [["raftlog.raft.a", "raftlog.raft.b", "raftlog.raft.c"]]
    assert layer("raftlog.raft.c") < layer("raftlog.api.d")


def test_no_module_imports_in_a_circle() -> None:
    assert circles(imports(modules())) == []


def test_every_import_runs_down_the_layers() -> None:
    graph = imports(modules())
    upward = [f"{a} -> {b}" for a, targets in graph.items() for b in sorted(targets)
              if layer(b) > layer(a) or (layer(b) == layer(a) and a.split(".")[1] != b.split(".")[1])]
    assert upward == []


def test_no_module_is_much_over_500_lines() -> None:
    long = {f"{path.relative_to(ROOT)}: {n}" for path in modules().values()
            if not path.name.endswith(GENERATED) and (n := len(path.read_text().splitlines())) > LINES_MAX}
    assert long == set()
