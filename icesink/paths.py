"""How icesink turns names and values into file locations: one rule, used everywhere.

1. **A location is literal.** ``scheme://authority/path`` names the file whose
   path on that storage is exactly ``path``, byte for byte: nothing is ever
   percent-decoded. This is how pyiceberg, Iceberg Java (Hadoop's ``Path``)
   and iceberg-rust resolve the paths in manifests, so the manifest names a
   file by the exact string it was written at.
2. **Every path segment icesink derives from a name or value is
   percent-encoded** (:func:`segment`): partition field names and values,
   job ids in file names, namespace and table directories. What comes out
   is ASCII without ``/``, ``#``, ``?``, ``%``-ambiguity or spaces, so the
   literal rule and URI parsers (which cut at ``#`` and ``?``) agree on it.
3. **Locations a user gives** (the warehouse, a table location) are used as
   given, spaces and non-ASCII letters included; ``#`` and ``?`` are refused
   because URI parsers, pyiceberg's among them, cut the path there
   (:func:`check_location`). The embedded default warehouse is the working
   directory's ``warehouse`` folder written literally (``Path.as_uri()``
   would percent-encode it, which under rule 1 names another directory).

``icesink committer gc`` compares locations in :func:`normal_form`, which also
decodes, so a file is kept if any spelling of a reference could mean it.

This module is imported by executors: standard library only.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from urllib.parse import quote, unquote

S3_SCHEMES = ("s3", "s3a", "s3n")
_URI_BREAKERS = ("#", "?")


# File systems cap one path component at 255 bytes; leave room for what is put around a segment.
MAX_SEGMENT = 120


def segment(text: str, limit: int = MAX_SEGMENT) -> str:
    """``text`` as (part of) one path segment: every byte outside ``A-Za-z0-9_.-~`` percent-encoded (UTF-8).

    Longer results are cut to ``limit`` characters and end in a hash of the
    whole, so values that share a long prefix stay apart: the location need
    not spell a value out in full (the manifest holds it), only be unique.
    """
    encoded = quote(text, safe="")
    # "." and ".." are directory names with a meaning of their own.
    if encoded in (".", ".."):
        return encoded.replace(".", "%2E")
    return _bounded(encoded, limit)


def _bounded(encoded: str, limit: int) -> str:
    if len(encoded) <= limit:
        return encoded
    digest = hashlib.sha256(encoded.encode("ascii")).hexdigest()[:16]
    cut = limit - len(digest) - 1
    # Never cut inside a %XX escape.
    escape = encoded.rfind("%", max(0, cut - 2), cut)
    if escape != -1:
        cut = escape
    return f"{encoded[:cut]}~{digest}"


def join(location: str, *segments: str) -> str:
    """``location`` with already-encoded ``segments`` appended, one ``/`` between each."""
    return "/".join([location.rstrip("/"), *segments])


def file_uri(path: str | os.PathLike[str]) -> str:
    """A local absolute path as a literal ``file://`` location (no percent-encoding, see rule 3)."""
    return f"file://{os.path.abspath(path)}"


@dataclass(frozen=True)
class Location:
    """A location split literally: ``scheme`` ("" for a plain path), ``authority`` (bucket, host) and ``path``."""

    scheme: str
    authority: str
    path: str

    @property
    def is_object_store(self) -> bool:
        return self.scheme in S3_SCHEMES

    @property
    def is_local(self) -> bool:
        return self.scheme in ("", "file")


def parse(location: str) -> Location:
    """Split ``location`` without decoding anything (rule 1)."""
    scheme, separator, rest = location.partition("://")
    if not separator:
        if location.startswith("file:"):  # file:/x, as Hadoop writes it
            return Location("file", "", location.removeprefix("file:"))
        return Location("", "", location)
    authority, slash, path = rest.partition("/")
    return Location(scheme.lower(), authority, slash + path)


def check_location(what: str, location: str) -> None:
    """Refuse a user-given location that URI parsers would cut short (rule 3)."""
    breakers = [c for c in _URI_BREAKERS if c in location]
    if breakers:
        from icesink.errors import ConfigError

        raise ConfigError(
            f"{what} {location!r} contains {' and '.join(repr(c) for c in breakers)}, which Iceberg readers "
            "take for the start of a URI query or fragment; choose a location without them"
        )


def normal_form(location: str) -> str:
    """One spelling per file for comparisons: scheme aliases unified, percent-escapes decoded, no doubled ``/``.

    Decoding makes ``a%20b`` and ``a b`` compare equal: when it is unclear which
    of two files a reference means, both count as referenced.
    """
    parsed = parse(location)
    scheme = "s3" if parsed.is_object_store else ("file" if parsed.is_local else parsed.scheme)
    path = unquote(parsed.path)
    while "//" in path:
        path = path.replace("//", "/")
    return f"{scheme}://{parsed.authority}{path}"
