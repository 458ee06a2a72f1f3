"""The documentation site: it builds strictly, its examples run, its reference misses nothing, and it renders.

The site is built once per test session with ``mkdocs build --strict`` (a broken link, a missing anchor or an
unknown generated table fails it). The examples run as :mod:`tests.helpers.docs_examples` describes.
"""

from __future__ import annotations

import ast
import html as html_module
import http.server
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.docs_examples import DOCS, Block, DocsError, blocks_of, pages

ROOT = DOCS.parent


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    if done.returncode != 0:
        warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
        pytest.fail("mkdocs build --strict failed:\n" + "\n".join(warnings or done.stderr.splitlines()[-30:]))
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "getting-started/index.html", "reference/stream-options/index.html"):
        assert (site / page).is_file(), page


# --- the examples -----------------------------------------------------------------------------------------------------


def _pages_with_examples() -> list[Any]:
    params = []
    for page in pages():
        try:
            blocks = blocks_of(page)
        except DocsError:
            continue  # test_every_code_block_says_what_it_is names it
        if blocks:
            name = page.relative_to(ROOT).as_posix()
            params.append(pytest.param(name, blocks, id=name))
    return params


@pytest.mark.spark
@pytest.mark.parametrize(("page", "blocks"), _pages_with_examples())
def test_examples(page: str, blocks: list[Block], tmp_path: Path) -> None:
    """Each page's python and bash blocks, in order, as a reader would paste them, in a fresh directory."""
    if all(b.not_run is not None for b in blocks):
        pytest.skip("; ".join(sorted({f"{b.page}:{b.line}: {b.not_run}" for b in blocks})))
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.docs_examples", page],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=900,
    )
    assert done.returncode == 0, f"{page}:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"


def test_every_code_block_says_what_it_is() -> None:
    """blocks_of refuses a fence without a language and an unknown language; this reads every page."""
    for page in pages():
        blocks_of(page)


def test_the_example_reader_finds_blocks_and_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.helpers.docs_examples as docs_examples

    monkeypatch.setattr(docs_examples, "DOCS", tmp_path / "docs")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "p.md"
    page.write_text(
        "# p\n\n```python\nx = 1\n```\n\n<!-- not run: needs Kafka -->\n```bash\nkafka-topics\n```\n\n"
        "!!! note\n    ```python\n    y = x\n    ```\n\n```text\nout\n```\n"
    )
    found = blocks_of(page)
    assert [(b.line, b.language, b.code, b.not_run) for b in found] == [
        (4, "python", "x = 1\n", None),
        (9, "bash", "kafka-topics\n", "needs Kafka"),
        (14, "python", "y = x\n", None),
    ]
    page.write_text("```\nanything\n```\n")
    with pytest.raises(ValueError, match=r"docs/p\.md:1: a code block without a language"):
        blocks_of(page)


# --- the reference misses nothing -------------------------------------------------------------------------------------


def _text(html: Path) -> str:
    return html_module.unescape(re.sub(r"<[^>]+>", "", html.read_text(encoding="utf-8")))


def test_every_option_setting_and_property_has_a_reference_entry(site: Path) -> None:
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.settings import SETTINGS
    from icesink.sink.options import StreamOptions

    options = _text(site / "reference/stream-options/index.html")
    missing = [name for name, _, _ in StreamOptions.reference() if name not in options]
    settings = _text(site / "reference/settings/index.html")
    missing += [name for name in SETTINGS if name not in settings]
    properties = _text(site / "reference/table-properties/index.html")
    missing += [name for name, *_ in MaintenancePolicy.reference() if name not in properties]
    missing += [name for name in _icesink_property_names() if name not in properties]
    missing += [name for name in _iceberg_properties_read() if name not in properties]
    assert missing == []


def _icesink_property_names() -> list[str]:
    """Every ``icesink.*`` name icesink writes into table metadata, as properties.py defines them."""
    tree = ast.parse((ROOT / "icesink/properties.py").read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            value = node.value.value
            if value.startswith("icesink."):
                # A prefix is documented with what follows it: ``<job id>``, or ``<branch>``.
                names.append(value + "<" if value.endswith(".") else value)
    assert len(names) >= 10, names
    return names


def _iceberg_properties_read() -> set[str]:
    """Iceberg table properties the code reads: pyiceberg's TableProperties constants and spelled-out names."""
    from pyiceberg.table import TableProperties

    found: set[str] = set()
    spelled = re.compile(r"""["'`]((?:write|history|commit|read)\.[a-z0-9.-]+[a-z0-9])["'`]""")
    for source in (ROOT / "icesink").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        constants = re.findall(r"TableProperties\.([A-Z_]+)", text)
        found.update(getattr(TableProperties, name) for name in constants if not name.endswith("_DEFAULT"))
        found.update(name for name in spelled.findall(text) if not name.endswith(".parquet"))
    assert "write.target-file-size-bytes" in found and "history.expire.max-snapshot-age-ms" in found
    return found


def test_every_cli_command_has_a_reference_entry(site: Path) -> None:
    import click

    from icesink.cli import main

    def commands(group: click.Group, prefix: str) -> Iterator[str]:
        for name, command in group.commands.items():
            yield f"{prefix} {name}"
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix} {name}")

    reference = _text(site / "reference/cli/index.html")
    listed = list(commands(main, "icesink"))
    assert len(listed) > 10
    assert [name for name in listed if name not in reference] == []


def test_every_public_name_has_an_api_entry(site: Path) -> None:
    import icesink

    html = (site / "reference/python/index.html").read_text(encoding="utf-8")
    missing = [
        name
        for name in icesink.__all__
        if f'id="icesink.{name}"' not in html and f'id="icesink.errors.{name}"' not in html
    ]
    assert missing == []


# --- the pages render in a real browser -------------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser(site: Path) -> Iterator[tuple[Any, str]]:
    if not (CHROMIUM and CHROMEDRIVER):
        reason = "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("ICESINK_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    import functools
    import threading

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1280,1600",
        # Nothing leaves the machine: every host but the site's loopback server fails to resolve.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        driver.quit()
        server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the built site without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _wait(driver: Any, script: str, what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 20).until(lambda d: d.execute_script(script), message=what)


def test_the_home_page_renders(browser: tuple[Any, str]) -> None:
    driver, base = browser
    driver.get(f"{base}/")
    assert "icesink" in driver.title
    text = _wait(driver, "return document.querySelector('article').innerText", "home page text")
    assert "Exactly-once" in text or "exactly once" in text
    nav = driver.execute_script("return [...document.querySelectorAll('nav a')].map(a => a.innerText)")
    assert {"Getting started", "Guarantees", "Performance"} <= {n.strip() for n in nav}


def test_a_reference_page_renders_its_generated_table(browser: tuple[Any, str]) -> None:
    from icesink.sink.options import StreamOptions

    driver, base = browser
    driver.get(f"{base}/reference/stream-options/")
    cells = _wait(
        driver,
        "return [...document.querySelectorAll('article table td:first-child')].map(td => td.innerText)",
        "option table",
    )
    assert [c.strip() for c in cells] == [name for name, _, _ in StreamOptions.reference()]


def test_the_performance_page_shows_its_charts(browser: tuple[Any, str]) -> None:
    driver, base = browser
    driver.get(f"{base}/performance/")
    charts = _wait(
        driver,
        "const imgs = [...document.querySelectorAll('article img')].filter(i => i.src.includes('/charts/'));"
        "return imgs.length && imgs.every(i => i.complete) ? imgs.map(i => [i.src, i.naturalWidth]) : null",
        "charts loaded",
    )
    shipped = sorted(p.name for p in (DOCS / "charts").glob("*.png"))
    assert sorted(src.rsplit("/", 1)[1] for src, _ in charts) == shipped
    assert all(width >= 400 for _, width in charts), charts


def test_the_architecture_diagrams_render(browser: tuple[Any, str]) -> None:
    driver, base = browser
    driver.get(f"{base}/architecture/")
    # The theme draws each mermaid block as an SVG in a closed shadow root, which page scripts cannot see;
    # the browser's own DOM view (pierce) can.
    drawn = _wait(driver, "return document.querySelectorAll('.mermaid').length", "mermaid blocks")
    assert drawn >= 2

    def diagrams() -> int:
        document = driver.execute_cdp_cmd("DOM.getDocument", {"depth": -1, "pierce": True})
        return sum(1 for host in _nodes(document["root"]) if _drawn_diagram(host))

    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda _: diagrams() == drawn, message="every mermaid block drawn as an SVG")


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in [*node.get("children", []), *node.get("shadowRoots", [])]:
        yield from _nodes(child)


def _drawn_diagram(host: dict[str, Any]) -> bool:
    """A .mermaid element whose shadow root holds an SVG with drawn shapes in it."""
    attributes = dict(zip(host.get("attributes", [])[::2], host.get("attributes", [])[1::2], strict=True))
    if "mermaid" not in attributes.get("class", "").split():
        return False
    for root in host.get("shadowRoots", []):
        for node in _nodes(root):
            if node.get("nodeName") == "svg" and sum(1 for n in _nodes(node) if n.get("nodeName") == "g") > 3:
                return True
    return False
