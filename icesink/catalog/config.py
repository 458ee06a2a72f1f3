"""Typed catalog configuration, resolved the way pyiceberg users already configure catalogs.

Order of precedence (highest first): arguments, ``PYICEBERG_CATALOG__<NAME>__*``
environment variables, ``.pyiceberg.yaml`` (``$PYICEBERG_HOME``, ``~``, the
working directory). With no catalog named and nothing configured, the embedded
default is used: SQLite at ``./warehouse/catalog.db`` and a ``file://``
warehouse under ``./warehouse``. A catalog named but defined nowhere is an
error, unless its uri is given too (then the name is only a label).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from icesink import paths
from icesink.errors import ConfigError

DEFAULT_CATALOG_NAME = "default"
CATALOG_NAME_ENV = "ICESINK_CATALOG"
EMBEDDED_DIRECTORY = "warehouse"


def _embedded_uri(root: Path) -> str:
    # SQLAlchemy percent-decodes the database path of a URL; a literal "%" must be written "%25".
    return f"sqlite:///{str(root / 'catalog.db').replace('%', '%25')}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of an SQLite URI, absolute (decoded as SQLAlchemy and SQLite decode it).

    None for other databases and for in-memory SQLite. SQLite's own URI
    filenames (``sqlite:///file:/abs/db?uri=true``) are understood too.
    """
    from urllib.parse import unquote

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        return None
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    database = url.database
    if str(url.query.get("uri", "")).lower() == "true" and database.startswith("file:"):
        if url.query.get("mode") == "memory":
            return None
        location = database.removeprefix("file:").split("?", 1)[0].split("#", 1)[0]
        if location.startswith("//"):  # file://host/path: only the local host is allowed
            location = "/" + location[2:].split("/", 1)[-1]
        database = unquote(location)
        if not database or database == ":memory:":
            return None
    return Path(database).absolute()


def redact_uri(uri: str) -> str:
    """The URI with any password hidden, safe for logs and error messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(uri).render_as_string(hide_password=True)
    except Exception:  # an unparsable URI has no password we can find
        return uri.split("@")[-1] if "@" in uri else uri


@dataclass(frozen=True)
class CatalogConfig:
    """Where the catalog database and the warehouse are.

    Attributes:
        name: the catalog name; rows in ``iceberg_tables`` are keyed by it.
        uri: SQLAlchemy URL of the catalog database (``sqlite:///…``, ``postgresql+psycopg2://…``).
        warehouse: root location of new tables (``file:///…`` or ``s3://bucket/prefix``).
        properties: any further pyiceberg catalog/FileIO properties (``s3.endpoint``, …).
        embedded: true for icesink's own SQLite default, which is created and migrated on first use.
    """

    name: str
    uri: str
    warehouse: str
    properties: Mapping[str, str] = field(default_factory=dict)
    embedded: bool = False

    @classmethod
    def embedded_default(
        cls, root: str | os.PathLike[str] = EMBEDDED_DIRECTORY, name: str = DEFAULT_CATALOG_NAME
    ) -> CatalogConfig:
        path = Path(root).absolute()
        paths.check_location("the embedded catalog's directory", str(path))
        return cls(name=name, uri=_embedded_uri(path), warehouse=paths.file_uri(path), embedded=True)

    @classmethod
    def resolve(
        cls,
        name: str | None = None,
        uri: str | None = None,
        warehouse: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> CatalogConfig:
        """Merge arguments with the pyiceberg configuration of catalog ``name``."""
        from pyiceberg.utils.config import Config

        pyiceberg_config = Config()
        from_environment = os.environ.get(CATALOG_NAME_ENV)
        used_environment = from_environment if name is None or name == from_environment else None
        for given, where in ((used_environment, CATALOG_NAME_ENV), (name, "the catalog name")):
            if given is not None and not given.strip():
                # An unset shell variable ($CAT) must not mean "the embedded catalog".
                raise ConfigError(
                    f"{where} is empty; name a catalog (or leave it out entirely for icesink's embedded one)"
                )
        named = name or from_environment
        name = named or DEFAULT_CATALOG_NAME
        defined = pyiceberg_config.get_catalog_config(name)
        if defined is None and named and not uri and name.lower() != DEFAULT_CATALOG_NAME:
            raise _undefined_catalog(name, pyiceberg_config.get_known_catalogs())
        configured = {k: str(v) for k, v in (defined or {}).items()}
        merged = {**configured, **(properties or {})}
        if uri:
            merged["uri"] = uri
        if warehouse:
            merged["warehouse"] = warehouse
        kind = merged.pop("type", "sql")
        if kind != "sql":
            raise ConfigError(
                f"catalog {name!r} is configured with type {kind!r}; icesink commits through a SQL catalog "
                "(type: sql) because its exactly-once protocol relies on the database's compare-and-swap"
            )
        if "uri" not in merged:
            if merged:
                # Settings for a catalog without a database would otherwise be dropped for the embedded one.
                raise ConfigError(
                    f"catalog {name!r} has settings ({', '.join(sorted(merged))}) but no uri; set the catalog "
                    f"database URI (PYICEBERG_CATALOG__{name.upper()}__URI, uri: in .pyiceberg.yaml, or --uri)"
                )
            return cls.embedded_default(name=name)
        resolved_uri = merged.pop("uri")
        resolved_warehouse = _warehouse(name, resolved_uri, merged.pop("warehouse", None))
        _validate_uri(name, resolved_uri)
        _validate_properties(name, merged)
        return cls(name=name, uri=resolved_uri, warehouse=resolved_warehouse, properties=merged)

    def pyiceberg_properties(self) -> dict[str, str]:
        """Properties for pyiceberg's ``SqlCatalog``; the schema belongs to icesink's migrations."""
        return {
            **self.properties,
            "uri": self.uri,
            "warehouse": self.warehouse,
            "init_catalog_tables": "false",
        }

    def describe(self) -> str:
        return f"catalog {self.name!r} at {redact_uri(self.uri)}"


def _pyiceberg_yaml() -> Path | None:
    """The ``.pyiceberg.yaml`` pyiceberg reads: the first of ``$PYICEBERG_HOME``, ``~``, the working directory."""
    for directory in (os.environ.get("PYICEBERG_HOME"), os.path.expanduser("~"), os.getcwd()):
        if directory and (Path(directory) / ".pyiceberg.yaml").is_file():
            return Path(directory) / ".pyiceberg.yaml"
    return None


def _undefined_catalog(name: str, known: list[str]) -> ConfigError:
    """A named catalog nobody defined: silently using the embedded one would write where no one looks."""
    source = f" (from {CATALOG_NAME_ENV}={name})" if os.environ.get(CATALOG_NAME_ENV) == name else ""
    defined = ", ".join(repr(k) for k in sorted(known)) or "none"
    yaml = _pyiceberg_yaml()
    where = str(yaml) if yaml else ".pyiceberg.yaml in $PYICEBERG_HOME, ~ or the working directory"
    return ConfigError(
        f"catalog {name!r}{source} is not defined; defined catalogs: {defined}. Define it under catalog: in "
        f"{where}, or with PYICEBERG_CATALOG__{name.upper()}__URI and __WAREHOUSE, or pass its uri "
        "(--uri, uri=); without a catalog name icesink uses its embedded default"
    )


def _validate_uri(name: str, uri: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(uri)
    except ArgumentError as e:
        raise ConfigError(
            f"catalog {name!r}: {redact_uri(uri)!r} is not a database URL; expected e.g. "
            "sqlite:///warehouse/catalog.db or postgresql+psycopg2://user@host:5432/db"
        ) from e


def _known_s3_properties() -> set[str]:
    import pyiceberg.io

    known = {v for k, v in vars(pyiceberg.io).items() if k.startswith("S3_") and isinstance(v, str) and "/" not in v}
    return known | {"s3.path-style-access"}  # iceberg-rust's name, for catalogs shared with its readers


def _validate_properties(name: str, properties: Mapping[str, str]) -> None:
    """A misspelt object-store setting would otherwise surface as an access error deep inside a Spark task."""
    import difflib

    known = _known_s3_properties()
    for key in sorted(properties):
        if key.startswith("s3.") and key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            env = f"PYICEBERG_CATALOG__{name.upper()}__{key.upper().replace('.', '__').replace('-', '_')}"
            raise ConfigError(f"catalog {name!r}: unknown setting {key!r} (e.g. from {env}){hint}")


def _warehouse(name: str, uri: str, given: str | None) -> str:
    """The catalog's warehouse: the one given, else beside an SQLite file; always with a scheme."""
    if given is None:
        database_file = sqlite_path(uri)
        if database_file is None:
            raise ConfigError(
                f"catalog {name!r} ({redact_uri(uri)}) has no warehouse; set "
                f"PYICEBERG_CATALOG__{name.upper()}__WAREHOUSE or pass warehouse="
            )
        given = paths.file_uri(database_file.parent)
    paths.check_location(f"catalog {name!r}: warehouse", given)
    if not paths.parse(given).scheme:
        # A plain directory: iceberg-rust refuses locations without a scheme.
        given = paths.file_uri(given)
    return given


def resolve_catalog(catalog: str | CatalogConfig | Mapping[str, str] | None) -> CatalogConfig:
    """Accept a catalog name, a ready config, pyiceberg-style properties, or nothing (the default)."""
    if isinstance(catalog, CatalogConfig):
        return catalog
    if catalog is None or isinstance(catalog, str):
        return CatalogConfig.resolve(name=catalog)
    properties = {k: str(v) for k, v in catalog.items()}
    return CatalogConfig.resolve(
        name=properties.pop("name", None),
        uri=properties.pop("uri", None),
        warehouse=properties.pop("warehouse", None),
        properties=properties,
    )


def catalog_from_options(options: Mapping[str, str]) -> CatalogConfig:
    """A data source's catalog: ``catalog`` (a name) and ``catalog.<key>`` (pyiceberg properties)."""
    properties = {k[len("catalog.") :]: str(v) for k, v in options.items() if k.startswith("catalog.")}
    name = options.get("catalog")
    if properties:
        return resolve_catalog({**properties, **({"name": name} if name else {})})
    return resolve_catalog(name)


# Options Spark itself hands a Python data source (pyspark 4.3, lower-cased): the argument of
# load()/start(), the writer's checkpoint directory, and queryName(); "__"-prefixed ones are Spark internals.
SPARK_OPTIONS = ("path", "checkpointlocation", "queryname")


def check_data_source_options(what: str, options: Mapping[str, str], known: tuple[str, ...]) -> str:
    """The table a data source's options name, after refusing any option it would ignore.

    ``known`` are the source's own options besides ``table``, ``catalog`` and
    ``catalog.<key>``; an unknown one is a :class:`ConfigError` naming the
    closest known option. ``path`` (``load("ns.t")``, ``start("ns.t")``) names the table too.
    """
    import difflib

    own = ("table", "catalog", *known)
    for key in sorted(options):
        if key in own or key in SPARK_OPTIONS or key.startswith(("catalog.", "__")):
            continue
        close = difflib.get_close_matches(key, own, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{what}: unknown option {key!r}{hint}; its options are {', '.join(own)}, catalog.<key>")
    table, path = options.get("table"), options.get("path")
    if table and path and table != path:
        raise ConfigError(f"{what}: option table={table!r} and path {path!r} name different tables; give one")
    if not (table or path):
        raise ConfigError(f'{what} needs .option("table", "namespace.table")')
    return str(table or path)
