"""Import hygiene: ``import icesink`` is cheap and executor code never pulls in the catalog stack."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in json.loads(done.stdout)}


def test_import_icesink_starts_nothing_heavy() -> None:
    loaded = loaded_after("import icesink")
    assert not loaded & {"pyspark", "py4j", "sqlalchemy", "pyiceberg", "pyarrow", "alembic"}


def test_executor_code_needs_neither_a_catalog_nor_sqlalchemy() -> None:
    loaded = loaded_after("import icesink.writer.task, icesink.results")
    assert not loaded & {"sqlalchemy", "pyiceberg", "alembic", "click"}
    assert "pyarrow" in loaded
