"""Import hygiene: ``import icesink`` is cheap and executor code never pulls in the catalog stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in json.loads(done.stdout)}


def test_import_icesink_starts_nothing_heavy() -> None:
    loaded = loaded_after("import icesink")
    assert not loaded & {"pyspark", "py4j", "sqlalchemy", "pyiceberg", "pyarrow", "alembic"}


def test_executor_code_needs_neither_a_catalog_nor_sqlalchemy() -> None:
    # The data source's writer goes to executors pickled, with the CatalogConfig it keeps: unpickling it imports
    # these two modules there, where only the base install may be.
    loaded = loaded_after(
        "import icesink.writer.task, icesink.writer.json_tables, icesink.results, icesink.debezium_events.decode_task, "
        "icesink.sink.datasource_writer, icesink.catalog.config"
    )
    assert not loaded & {"sqlalchemy", "pyiceberg", "alembic", "click"}
    assert "pyarrow" in loaded


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in a source file."""
    import ast

    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def test_layers_import_only_downwards_and_pyiceberg_internals_stay_in_one_package() -> None:
    root = Path(__file__).parent.parent / "icesink"
    # Layer -> what it must never import: the front door and the committer sit above the catalog,
    # the pyiceberg boundary and the executor code.
    forbidden = {
        "catalog": ("icesink.committer", "icesink.sink", "icesink.reader", "icesink.maintenance", "icesink.changelog"),
        "iceberg": ("icesink.committer", "icesink.sink", "icesink.catalog", "icesink.reader"),
        "writer": ("icesink.committer", "icesink.sink", "icesink.catalog", "icesink.iceberg"),
        "committer": ("icesink.sink", "icesink.reader"),
        "maintenance": ("icesink.committer", "icesink.sink"),
        "changelog": ("icesink.committer", "icesink.maintenance"),
        "reader.py": ("icesink.sink", "icesink.committer"),
        # A stream's watermark and its partitions' spans as plain values, below everything that uses them.
        "completeness": (
            "icesink.committer",
            "icesink.sink",
            "icesink.catalog",
            "icesink.iceberg",
            "icesink.reader",
            "icesink.maintenance",
        ),
        # Checks and the audit of one snapshot: below the committer, which decides what to audit and publishes.
        "audit": ("icesink.committer", "icesink.sink"),
        # Decoding change events runs on executors and types values: nothing of the catalog or the commit.
        "debezium_events": (
            "icesink.committer",
            "icesink.sink",
            "icesink.catalog",
            "icesink.iceberg",
            "icesink.reader",
        ),
    }
    problems = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        layer = relative.parts[0]
        for module, names in _imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden.get(layer, ())):
                problems.append(f"{relative} imports {module}")
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if module.startswith("pyiceberg") and private and layer != "iceberg":
                problems.append(f"{relative} imports pyiceberg's private {private} from {module}")
    assert problems == []


def _private_names_defined(root: Path) -> set[str]:
    """Every ``_name`` a package defines: attributes it assigns, functions, classes, annotated names."""
    import ast

    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_private_pyiceberg_attributes_are_used_only_inside_the_iceberg_package() -> None:
    """``x._name`` outside ``icesink/iceberg`` where pyiceberg defines ``_name`` (``self._…`` is icesink's own)."""
    import ast

    import pyiceberg

    root = Path(__file__).parent.parent / "icesink"
    theirs = _private_names_defined(Path(pyiceberg.__file__).parent)
    assert {"_lazy_id_to_parent", "_do_commit"} <= theirs  # the scan below sees pyiceberg's internals
    problems = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] == "iceberg":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or node.attr not in theirs:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            problems.append(f"{relative}:{node.lineno} uses pyiceberg's private {node.attr}")
    assert problems == []


def _runtime_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import a module can run, function-local ones included; imports under
    ``if TYPE_CHECKING:`` never run and are left out."""
    import ast

    found: list[tuple[str, list[str]]] = []
    todo: list[ast.AST] = [ast.parse(path.read_text())]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                todo.extend(child.orelse)
            else:
                todo.append(child)
    return found


def test_no_import_cycle_not_even_through_a_function_local_import() -> None:
    root = Path(__file__).parent.parent / "icesink"
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names in _runtime_imports(path):
            for imported in names or [""]:
                submodule = f"{module}.{imported}"
                if submodule in modules:
                    graph[name].add(submodule)
                elif module in modules:
                    graph[name].add(module)
    # A cycle is a module that reaches itself.
    cycles = []
    for start in sorted(graph):
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            current = todo.pop()
            if current == start:
                cycles.append(start)
                break
            if current not in seen:
                seen.add(current)
                todo.extend(graph[current])
    assert cycles == []


def test_no_two_modules_share_a_file_name() -> None:
    """Two ``changes.py`` (one in ``writer/``, one in ``sink/``) made readers open the wrong file."""
    root = Path(__file__).parent.parent / "icesink"
    seen: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(root)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_modules_and_functions_stay_short_or_say_why() -> None:
    """No module over 400 lines and no function over 60 without a reason near its top (``# Over N lines:``)."""
    import ast

    root = Path(__file__).parent.parent / "icesink"
    problems = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        if len(lines) > 400 and not any(line.startswith("# Over 400 lines:") for line in lines[:20]):
            problems.append(f"{path.relative_to(root)}: {len(lines)} lines")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                head = lines[node.lineno - 1 : node.lineno + 3]
                if length > 60 and not any("# Over 60 lines:" in line for line in head):
                    problems.append(f"{path.relative_to(root)}: {node.name} is {length} lines")
    assert problems == []


# Driver code imports at the top, where a reader looks. Lazy imports stay at the front door (icesink/__init__.py,
# the CLI), at the executor boundary (writer/, debezium_events/, the data source and its writer, whose modules
# Spark loads on executors, with the catalog configuration the writer keeps) and in the read side (changelog/,
# reader.py), where Spark must not be imported early.
DRIVER_CODE = ("committer", "catalog", "sink", "maintenance", "cut.py")
EXECUTOR_BOUNDARY = {"sink/datasource_writer.py", "catalog/config.py"}


def test_driver_modules_import_at_the_top() -> None:
    import ast

    root = Path(__file__).parent.parent / "icesink"
    local = []
    for part in DRIVER_CODE:
        for path in [root / part] if part.endswith(".py") else sorted((root / part).rglob("*.py")):
            relative = str(path.relative_to(root))
            if relative in EXECUTOR_BOUNDARY:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    local += [
                        f"{relative}:{inner.lineno}"
                        for inner in ast.walk(node)
                        if isinstance(inner, ast.Import | ast.ImportFrom)
                    ]
    assert local == []
