"""The ``icesink`` format of pyspark's Python data source API, registered by :func:`register`, and
:func:`read_stream`, which reads it.

* ``spark.readStream.format("icesink")``: a table's changes (:mod:`icesink.changelog.source`), or several
  tables' at consistent cuts with ``option("tables", ...)`` (:mod:`icesink.changelog.tables_source`);
* ``df.writeStream.format("icesink")``: appends (:mod:`icesink.sink.datasource_writer`).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import CaseInsensitiveDict, DataSource

from icesink.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from icesink.catalog.config import CatalogConfig
    from icesink.changelog.source import ChangelogStreamReader
    from icesink.changelog.tables_source import TablesStreamReader
    from icesink.sink.datasource_writer import IcesinkStreamWriter


class IcesinkDataSource(DataSource):
    """The ``icesink`` format."""

    @classmethod
    def name(cls) -> str:
        return "icesink"

    def schema(self) -> StructType:
        from icesink.changelog.modes import check_mode
        from icesink.changelog.source import ReadOptions, spark_schema

        if "tables" in self.options:
            from icesink.changelog.tables_source import TablesReadOptions, tables_schema

            return tables_schema(TablesReadOptions.of(self.options))
        options = ReadOptions.of(self.options)
        table = options.load()
        check_mode(options.table, options.mode, options.net_changes, table)
        return spark_schema(table.schema(), options.mode, options.with_watermark)

    def streamReader(self, schema: StructType) -> ChangelogStreamReader | TablesStreamReader:
        from icesink.changelog.source import ChangelogStreamReader, ReadOptions

        if "tables" in self.options:
            from icesink.changelog.tables_source import TablesReadOptions, TablesStreamReader

            return TablesStreamReader(TablesReadOptions.of(self.options), schema)
        return ChangelogStreamReader(ReadOptions.of(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> IcesinkStreamWriter:
        from icesink.sink.datasource_writer import IcesinkStreamWriter

        return IcesinkStreamWriter.create(dict(self.options), schema, overwrite)


def register(spark: SparkSession) -> None:
    """Make ``spark.readStream.format("icesink")`` (and ``writeStream.format("icesink")``) available."""
    spark.dataSource.register(IcesinkDataSource)


def read_stream(
    spark: SparkSession,
    table: str | None = None,
    *,
    tables: Sequence[str] | None = None,
    catalog: str | CatalogConfig | Mapping[str, str] | None = None,
    **options: Any,
) -> DataFrame:
    """The table's changes as a streaming DataFrame (``spark.readStream.format("icesink")``, docs/reading/changes.md).

    Options: ``mode`` (``changelog``/``append``), ``starting`` (``earliest``, ``latest``, a snapshot id (an int,
    or a string of digits), an ISO 8601 timestamp (UTC unless it has a zone) or a ``datetime`` (naive: UTC)),
    ``max-files-per-trigger``, ``max-rows-per-trigger``, ``net-changes``, ``with-watermark`` (``_commit_watermark``,
    the table's watermark as of each change's commit, for ``icesink.stream(..., watermark_from=...)``);
    ``catalog`` is a catalog name, a ``CatalogConfig`` or pyiceberg properties as for :func:`icesink.stream`. Any
    other option is refused.

    ``tables=[...]`` instead of ``table``: the changes of several tables in one stream, every micro-batch
    ending at one consistent cut of the catalog (``_table`` names a row's table, a struct column per table
    holds its columns; ``starting`` is ``earliest`` or ``latest``; no per-trigger limits).
    """
    # Here, not at the top: executors unpickle the data source by this module and need no catalog code.
    from icesink.catalog.config import CatalogConfig

    if (table is None) == (tables is None):
        raise ConfigError("read_stream: name the table to read (table=...) or several (tables=[...]), not both")
    given: dict[str, str] = {}
    if tables is not None:
        if isinstance(tables, str) or not all(isinstance(t, str) for t in tables):
            raise ConfigError(f"read_stream: tables= is a list of table names, not {tables!r}")
        given["tables"] = json.dumps(list(tables), ensure_ascii=False)
    else:
        given["table"] = str(table)
    if isinstance(catalog, CatalogConfig):
        catalog = {**catalog.properties, "name": catalog.name, "uri": catalog.uri, "warehouse": catalog.warehouse}
    if isinstance(catalog, str):
        given["catalog"] = catalog
    elif catalog is not None:
        given.update({f"catalog.{key}": str(value) for key, value in catalog.items()})
    given.update({key.replace("_", "-"): _option_text(value) for key, value in options.items()})
    # Checked here first, as the query's source will check them: an unknown table or option is refused as
    # icesink's own error, not inside Spark's wrapping of a data source's failure.
    IcesinkDataSource(CaseInsensitiveDict(given)).schema()
    register(spark)
    return spark.readStream.format("icesink").options(**given).load()


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime.datetime):
        return value.isoformat()  # naive stays naive, which the source reads as UTC
    return str(value)
