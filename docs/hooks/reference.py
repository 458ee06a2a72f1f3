"""Reference tables generated from the code's own definitions, so no option, property or setting is written twice.

A page asks for a table with a comment on a line of its own, ``<!-- generated: NAME -->``; the build replaces it
with the table made from the definition NAME names (``GENERATORS``). An unknown NAME fails the build.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _inline(text: str) -> str:
    """Docstring markup (reST roles and double backquotes) as Markdown, safe inside a table cell."""
    text = re.sub(r":(?:class|func|meth|mod|data|attr):`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`").replace("|", "\\|").replace("\n", " ")
    # Outside code spans, "<NAME>" would reach the page as an HTML tag.
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_inline(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def stream_options() -> str:
    from icesink.sink.options import TABLE_OPTIONS, StreamOptions

    rows = [
        (
            f"`{name}`",
            f"`{default}`" if name != "table" else default,
            meaning + (" *Per table.*" if name in TABLE_OPTIONS else ""),
        )
        for name, default, meaning in StreamOptions.reference()
    ]
    return _table(("option", "default", "meaning"), rows)


def maintenance_properties() -> str:
    from icesink.maintenance.policy import MaintenancePolicy

    rows = [
        (f"`{name}`", f"`{default}`", allowed, meaning)
        for name, default, allowed, meaning in MaintenancePolicy.reference()
    ]
    return _table(("table property", "default", "allowed", "meaning"), rows)


def _named(reference: dict[str, str], header: str) -> str:
    return _table((header, "meaning"), ((f"`{name}`", meaning) for name, meaning in reference.items()))


def snapshot_properties() -> str:
    from icesink.properties import SNAPSHOT_SUMMARY_REFERENCE

    return _named(SNAPSHOT_SUMMARY_REFERENCE, "snapshot summary property")


def marker_properties() -> str:
    from icesink.properties import TABLE_PROPERTY_REFERENCE

    return _named(TABLE_PROPERTY_REFERENCE, "table property")


def writer_properties() -> str:
    from icesink.properties import WRITER_PROPERTY_REFERENCE

    return _named(WRITER_PROPERTY_REFERENCE, "table property")


def iceberg_properties() -> str:
    from icesink.properties import ICEBERG_PROPERTY_REFERENCE

    return _named(ICEBERG_PROPERTY_REFERENCE, "Iceberg table property")


def settings() -> str:
    from icesink.settings import SETTING_GROUPS, SETTINGS

    grouped = [name for names in SETTING_GROUPS.values() for name in names]
    if sorted(grouped) != sorted(SETTINGS):
        odd = sorted(set(SETTINGS) ^ set(grouped))
        raise ValueError(f"every setting belongs to one group of SETTING_GROUPS: {odd}")
    return "\n\n".join(
        f"## {group}\n\n" + _named({name: SETTINGS[name] for name in names}, "environment variable")
        for group, names in SETTING_GROUPS.items()
    )


def debezium_types() -> str:
    from icesink.debezium_events.connect_types import TYPE_TABLE

    header = ("Connect schema (logical name)", "Spark", "Iceberg", "read as")
    lines = ["| " + " | ".join(header) + " |", "|---|---|---|---|"]
    # The table is written in Markdown already (the code's error messages quote it).
    lines += ["| " + " | ".join(row) + " |" for row in TYPE_TABLE]
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[], str]] = {
    "stream-options": stream_options,
    "maintenance-properties": maintenance_properties,
    "snapshot-properties": snapshot_properties,
    "marker-properties": marker_properties,
    "writer-properties": writer_properties,
    "iceberg-properties": iceberg_properties,
    "settings": settings,
    "debezium-types": debezium_types,
}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: no generated table {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)


ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):<code>(~?)([\w.]+)</code>")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    # The docstrings are written for help() and Sphinx-style roles; mkdocstrings' Google style leaves a role as
    # text (":class:`~a.B`"), so it is shown as Python would name it: ``B`` for ``~a.B``, else the whole path.
    html = ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)
    # mkdocs-click 0.9 prints click 8.3's "no default" marker as it is.
    return html.replace("<code>Sentinel.UNSET</code>", "")
