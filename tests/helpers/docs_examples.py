"""The code examples of the documentation, as the tests run them.

Every ```python and ```bash block of a page under ``docs/`` runs, in page order, in one fresh directory and
one Python namespace per page (like a notebook). A block that cannot run here says why on the line before its
fence: ``<!-- not run: needs Kafka -->``. Output and illustrations are ```text; configuration files keep their
own language (yaml, toml, ini, sql, mermaid) and are not run. A fence with no language is refused, so every
block says what it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
NOT_RUN = re.compile(r"^\s*<!-- not run: (?P<reason>.+?) -->\s*$")
RUNNABLE = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
NOT_CODE = {"text", "yaml", "yml", "toml", "ini", "sql", "json", "mermaid", "dockerfile", "properties", "console"}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository's root
    line: int  # 1-based line of the first line of code
    language: str  # python or bash; others are not collected
    code: str
    not_run: str | None  # the reason, when the page says it cannot run here


class DocsError(ValueError):
    pass


def blocks_of(page: Path) -> list[Block]:
    """The runnable-language blocks of one page, in order."""
    name = page.relative_to(DOCS.parent).as_posix()
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = opening["info"].strip().split(" ")[0].split("{")[0].lower()
        if not language:
            raise DocsError(f"{name}:{i + 1}: a code block without a language (python, bash, text, yaml, ...)")
        reason = NOT_RUN.match(lines[i - 1]) if i else None
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and lines[j].strip(fence[0]).strip() == ""):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise DocsError(f"{name}:{i + 1}: a code block that is never closed")
        if language in RUNNABLE:
            found.append(Block(name, i + 2, RUNNABLE[language], "\n".join(body) + "\n", reason and reason["reason"]))
        elif language not in NOT_CODE:
            raise DocsError(f"{name}:{i + 1}: code block language {language!r} is neither run nor known as not code")
        i = j + 1
    return found


def pages() -> list[Path]:
    """The README and every page of the site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def run_page(name: str) -> None:
    """Run one page's blocks in this process, in the current directory (``python -m tests.helpers.docs_examples PAGE``).

    A page runs in a process of its own, started in its own directory: Spark resolves relative paths against
    the directory its JVM started in, and its Python workers open the embedded catalog (``./warehouse``)
    from theirs. The session examples get with ``getOrCreate()`` is made here first, small and quiet.
    """
    import os
    import subprocess
    import sys

    from pyspark.sql import SparkSession

    blocks = [b for b in blocks_of(ROOT / name) if b.not_run is None]
    from tests.helpers.streams import JOB_JAVA_OPTIONS

    # Only a page with Python blocks gets a session: one of bash blocks alone needs no JVM.
    spark = None
    if any(b.language == "python" for b in blocks):
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.driver.extraJavaOptions", JOB_JAVA_OPTIONS)  # a page's JVM lives for seconds
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
    namespace: dict[str, object] = {"__name__": "__main__"}
    path = f"{sys.prefix}/bin{os.pathsep}{os.environ['PATH']}"
    for block in blocks:
        print(f"--- {block.page}:{block.line} ({block.language})", flush=True)
        if block.language == "python":
            # Padded so that a traceback's line numbers are the page's.
            exec(compile("\n" * (block.line - 1) + block.code, block.page, "exec"), namespace)
        else:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], env={**os.environ, "PATH": path})
            if done.returncode != 0:
                sys.exit(f"{block.page}:{block.line}: the bash block exited with {done.returncode}")
    for query in spark.streams.active if spark is not None else ():
        query.stop()


if __name__ == "__main__":
    import sys

    run_page(sys.argv[1])
