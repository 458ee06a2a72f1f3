"""Every ``ICESINK_*`` environment variable, in one place.

The catalog itself is configured the pyiceberg way (``PYICEBERG_CATALOG__<NAME>__URI``,
``__WAREHOUSE``, ``__S3__ENDPOINT``, ...; see :mod:`icesink.catalog.config`);
these are icesink's own settings. The documentation's settings reference
is generated from this table, and docker-compose.yml and the code use these
names (a test keeps them in step). An ``ICESINK_*`` variable that is not
listed here is a startup error (a misspelt setting would otherwise be
ignored without a word).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from icesink.errors import ConfigError


@dataclass(frozen=True)
class DaemonSetting:
    """One setting of ``icesink committer run``: its option, its default, and what it means. The command's
    options and help, and this setting's entry in the reference, are all made from it."""

    option: str
    default: float | int | str | bool | None  # None: off unless given; a bool: a flag
    meaning: str
    default_note: str = ""  # said after the default in the reference

    def described(self) -> str:
        """As the settings reference says it: the meaning, then the default."""
        if isinstance(self.default, bool):
            return f"true: {self.meaning}"
        shown = (
            "off when unset"
            if self.default is None
            else f"{self.default:g}"
            if isinstance(self.default, float)
            else str(self.default)
        )
        return f"{self.meaning} ({shown}{self.default_note})"


DAEMON_SETTINGS: dict[str, DaemonSetting] = {
    "ICESINK_POLL_INTERVAL": DaemonSetting("--poll-interval", 0.5, "seconds between ledger polls"),
    "ICESINK_LEASE_TTL": DaemonSetting(
        "--lease-ttl", 10, "seconds without renewal after which a standby committer takes over"
    ),
    "ICESINK_METRICS_PORT": DaemonSetting("--metrics-port", None, "port for /metrics (Prometheus) and /healthz"),
    "ICESINK_METRICS_HOST": DaemonSetting(
        "--metrics-host", "127.0.0.1", "address for the metrics port", "; 0.0.0.0 in a container"
    ),
    "ICESINK_MAX_FAILURES": DaemonSetting(
        "--max-failures", 5, "failures in a row after which a table makes /healthz answer 503"
    ),
    "ICESINK_EXPIRE_SNAPSHOTS": DaemonSetting(
        "--expire-snapshots",
        False,
        "drop snapshots past each table's history.expire.* retention in every commit (keeps commit cost flat)",
    ),
    "ICESINK_MAINTAIN": DaemonSetting(
        "--maintain",
        False,
        "between commits, convert leftover equality deletes and compact small files when due (icesink.maintain.*)",
    ),
}

SETTINGS: dict[str, str] = {
    # Catalog selection
    "ICESINK_CATALOG": "catalog name whose ``PYICEBERG_CATALOG__<NAME>__*`` settings are used (default: default)",
    # Committer daemon (`icesink committer run`)
    **{name: setting.described() for name, setting in DAEMON_SETTINGS.items()},
    # The example streaming job (examples/stream_job.py)
    "ICESINK_SOURCE_DIR": "directory of newline-delimited JSON order files the example job streams from",
    "ICESINK_TABLE": "table the example job writes (namespace.table)",
    "ICESINK_CHECKPOINT_LOCATION": "Spark checkpoint directory of the example job",
    "ICESINK_COMMITTER": "inline (the job commits) or daemon (a committer service commits)",
    "ICESINK_TRIGGER": "'available-now' (process what is there, then exit) or a processing interval like '10 seconds'",
    "ICESINK_JOB_ID": "job id recorded in snapshot summaries (default: derived from the Spark query id)",
    # Crash testing and the test suite
    "ICESINK_FAILPOINTS": "comma-separated failpoints at which the process kills itself (crash tests only)",
    "ICESINK_FAILPOINT_SCOPE": "'group' kills the whole process group at a failpoint (crash tests only)",
    "ICESINK_REQUIRE_PG": "1: PostgreSQL tests fail instead of skipping when PostgreSQL is absent (CI)",
    "ICESINK_REQUIRE_BROWSER": "1: the docs browser tests fail instead of skipping when chromium is absent (CI)",
    "ICESINK_TEST_PG_URL": "PostgreSQL URL of the test suite's server",
    "ICESINK_FAULT_SEED": "seed of the random fault-injection cases",
    "ICESINK_SOAK_FILES": "input files per job in the soak test",
    "ICESINK_DEBEZIUM_SEEDS": "how many random Debezium histories the test suite streams per catalog (default 1)",
}


# The settings by who reads them, for the documentation's reference (every setting is in one group).
SETTING_GROUPS: dict[str, tuple[str, ...]] = {
    "Catalog": ("ICESINK_CATALOG",),
    "The committer daemon (`icesink committer run`)": tuple(DAEMON_SETTINGS),
    "Only the example job (`examples/stream_job.py`; `icesink.stream` itself reads none of these)": (
        "ICESINK_SOURCE_DIR",
        "ICESINK_TABLE",
        "ICESINK_CHECKPOINT_LOCATION",
        "ICESINK_COMMITTER",
        "ICESINK_TRIGGER",
        "ICESINK_JOB_ID",
    ),
    "Crash tests and the test suite only": (
        "ICESINK_FAILPOINTS",
        "ICESINK_FAILPOINT_SCOPE",
        "ICESINK_REQUIRE_PG",
        "ICESINK_REQUIRE_BROWSER",
        "ICESINK_TEST_PG_URL",
        "ICESINK_FAULT_SEED",
        "ICESINK_SOAK_FILES",
        "ICESINK_DEBEZIUM_SEEDS",
    ),
}


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse unknown ``ICESINK_*`` variables, naming the closest known one."""
    environ = os.environ if environ is None else environ
    for name in sorted(environ):
        if name.startswith("ICESINK_") and name not in SETTINGS:
            close = difflib.get_close_matches(name, sorted(SETTINGS), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"unknown setting {name} in the environment{hint} (docs/reference/settings.md lists every setting)"
            )


def setting(name: str, default: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """A listed setting's value from the environment."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not an icesink setting")
    return (os.environ if environ is None else environ).get(name, default)


def require(name: str, environ: Mapping[str, str] | None = None) -> str:
    """A setting that must be there: its absence is a startup error that says what it is for."""
    value = setting(name, environ=environ)
    if not value:
        raise ConfigError(f"{name} is not set: {SETTINGS[name]}")
    return value
