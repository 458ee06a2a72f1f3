"""The ``icesink`` format of pyspark's Python data source API, registered by :func:`icesink.register`.

* ``spark.readStream.format("icesink")``: a table's changes (:mod:`icesink.changelog.source`), or several
  tables' at consistent cuts with ``option("tables", ...)`` (:mod:`icesink.changelog.tables_source`);
* ``df.writeStream.format("icesink")``: appends (:mod:`icesink.sink.datasource_writer`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from icesink.changelog.source import ChangeStreamReader
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
        return spark_schema(table.schema(), options.mode)

    def streamReader(self, schema: StructType) -> ChangeStreamReader | TablesStreamReader:
        from icesink.changelog.source import ChangeStreamReader, ReadOptions

        if "tables" in self.options:
            from icesink.changelog.tables_source import TablesReadOptions, TablesStreamReader

            return TablesStreamReader(TablesReadOptions.of(self.options), schema)
        return ChangeStreamReader(ReadOptions.of(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> IcesinkStreamWriter:
        from icesink.sink.datasource_writer import IcesinkStreamWriter

        return IcesinkStreamWriter.create(dict(self.options), schema, overwrite)
