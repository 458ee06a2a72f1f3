"""What the committer daemon tells operators: Prometheus metrics and a health endpoint.

``GET /metrics`` serves the Prometheus text format, ``GET /healthz`` answers
200 while the daemon is healthy and 503 (with the reasons) once a table has
failed too often in a row or stopped on a terminal error.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class CommitterMetrics:
    """The daemon's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.commits = Counter("icesink_commits", "Snapshots committed", ["table"], registry=self.registry)
        self.checkpoints = Counter(
            "icesink_checkpoints_committed", "Checkpoints committed", ["table"], registry=self.registry
        )
        self.skipped = Counter(
            "icesink_checkpoints_already_committed",
            "Checkpoints found already in the table (skipped)",
            ["table"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "icesink_commit_duration_seconds",
            "Time to build and commit one snapshot",
            ["table"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "icesink_pending_checkpoints", "Staged checkpoints waiting", ["table"], registry=self.registry
        )
        self.last_success = Gauge(
            "icesink_last_success_timestamp_seconds",
            "Unix time of the table's last successful commit (seconds since: time() - this)",
            ["table"],
            registry=self.registry,
        )
        self.failures = Gauge(
            "icesink_consecutive_failures", "Failed commit attempts in a row", ["table"], registry=self.registry
        )
        self.equality_delete_files = Counter(
            "icesink_equality_delete_files_committed",
            "Equality delete files committed as staged, not converted at commit: a checkpoint's keys may sit in "
            "more rows than icesink.equality-deletes.convert-max-rows (or conversion is off); maintenance "
            "converts them",
            ["table"],
            registry=self.registry,
        )
        self.audits = Counter(
            "icesink_audits",
            "Branch snapshots audited (write-audit-publish), by outcome: passed or failed",
            ["table", "outcome"],
            registry=self.registry,
        )
        self.published = Counter(
            "icesink_publishes", "Times main moved to an audited branch snapshot", ["table"], registry=self.registry
        )
        self.active = Gauge(
            "icesink_committer_active", "1 while this committer holds its lease", registry=self.registry
        )

    def committed(
        self,
        table: str,
        snapshots: int,
        checkpoints: int,
        skipped: int,
        seconds: list[float],
        equality_delete_files: int = 0,
    ) -> None:
        self.commits.labels(table).inc(snapshots)
        self.equality_delete_files.labels(table).inc(equality_delete_files)
        self.checkpoints.labels(table).inc(checkpoints)
        self.skipped.labels(table).inc(skipped)
        for value in seconds:
            self.duration.labels(table).observe(value)
        self.last_success.labels(table).set(time.time())
        self.failures.labels(table).set(0)


class StatusServer:
    """Serves ``/metrics`` and ``/healthz`` on a background thread."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: CommitterMetrics,
        health: Callable[[], list[str]],
        jobs: Callable[[], list[dict[str, object]]] = list,
        failures: Callable[[], list[dict[str, object]]] = list,
        audits: Callable[[], list[dict[str, object]]] = list,
    ) -> None:
        """``health`` gives the reasons the daemon is unhealthy; ``jobs`` each job with its tables; ``failures``
        each table whose last commit failed, with the error's table, checkpoint and job as fields; ``audits`` each
        table whose publishing a failed audit holds (write-audit-publish: the data's problem, not the daemon's)."""
        registry = metrics.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    body, status, kind = generate_latest(registry), 200, CONTENT_TYPE_LATEST
                elif self.path.startswith("/healthz"):
                    problems = health()
                    try:
                        streams = jobs()
                    except Exception as e:  # the ledger unreachable: health still answers, saying so
                        streams = [{"error": str(e)}]
                    report = {
                        "healthy": not problems,
                        "problems": problems,
                        "failures": failures(),
                        "audits": audits(),
                        "jobs": streams,
                    }
                    body = json.dumps(report, default=_json_value).encode()
                    status, kind = (503 if problems else 200), "application/json"
                else:
                    body, status, kind = b"not found\n", 404, "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # requests are not worth a log line each

        self._server = ThreadingHTTPServer((host, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _json_value(value: object) -> str:
    """Moments as ISO 8601 (as the CLI's JSON gives them), anything else as its text."""
    isoformat = getattr(value, "isoformat", None)
    return str(isoformat()) if callable(isoformat) else str(value)
