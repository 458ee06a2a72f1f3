"""File systems for executors: local disks and S3-compatible object stores, with pyarrow only.

Executors get the catalog's ``s3.*`` properties (pyiceberg's names, so one
configuration serves the committer's FileIO and the executors alike) through
the writer spec. Without credentials in the properties, pyarrow's default AWS
chain applies (environment, instance profile), which keeps secrets out of the
spec entirely.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

from icesink import paths

# The pyiceberg S3 properties the executors' pyarrow file system understands.
S3_PROPERTIES = (
    "s3.endpoint",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.region",
    "s3.proxy-uri",
    "s3.connect-timeout",
    "s3.request-timeout",
    "s3.force-virtual-addressing",
    "s3.anonymous",
)
SECRET_PROPERTIES = frozenset({"s3.access-key-id", "s3.secret-access-key", "s3.session-token"})


def storage_options(properties: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The properties executors need to reach the warehouse, in a stable order."""
    return tuple((key, str(properties[key])) for key in S3_PROPERTIES if properties.get(key) not in (None, ""))


def split_location(location: str, options: tuple[tuple[str, str], ...] = ()) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system and the path inside it for a local, ``file://`` or ``s3://`` location.

    The path is taken literally, never percent-decoded (see :mod:`icesink.paths`).
    """
    parsed = paths.parse(location)
    if parsed.is_local:
        return pafs.LocalFileSystem(), parsed.path
    if parsed.is_object_store:
        return _s3(options), f"{parsed.authority}{parsed.path}"
    filesystem, path = pafs.FileSystem.from_uri(location)
    return filesystem, path


@functools.lru_cache(maxsize=8)
def _s3(options: tuple[tuple[str, str], ...]) -> pafs.S3FileSystem:
    """One S3 client per process and configuration: creating one per file would dominate small writes."""
    config = dict(options)
    kwargs: dict[str, object] = {}
    endpoint = config.get("s3.endpoint")
    if endpoint:
        parsed = urlparse(endpoint)
        if parsed.scheme:
            kwargs["scheme"] = parsed.scheme
            kwargs["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
        else:
            kwargs["endpoint_override"] = endpoint
    if "s3.access-key-id" in config:
        kwargs["access_key"] = config["s3.access-key-id"]
        kwargs["secret_key"] = config.get("s3.secret-access-key")
        kwargs["session_token"] = config.get("s3.session-token")
    if "s3.region" in config:
        kwargs["region"] = config["s3.region"]
    if "s3.proxy-uri" in config:
        kwargs["proxy_options"] = config["s3.proxy-uri"]
    for key, name in (("s3.connect-timeout", "connect_timeout"), ("s3.request-timeout", "request_timeout")):
        if key in config:
            kwargs[name] = float(config[key])
    if config.get("s3.force-virtual-addressing", "").lower() == "true":
        kwargs["force_virtual_addressing"] = True
    if config.get("s3.anonymous", "").lower() == "true":
        kwargs["anonymous"] = True
    return pafs.S3FileSystem(**kwargs)
