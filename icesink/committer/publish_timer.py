"""The inline committer's publishing when a publish interval ends, or another tool fixes a branch, not only
after a commit.

With ``publish="10 minutes"`` the committer publishes at most that often, after a commit. A stream whose source
goes quiet has no commit to publish after, maybe for hours, and the snapshots the interval held back would wait
with it; so would a fix another tool made on a branch whose failed audit holds main back. A thread of the driver
publishes them once they are due, and looks at a held branch now and then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from icesink.committer.publisher import Publisher

log = logging.getLogger("icesink.committer")

# A pass that failed (the catalog away for a moment) is tried again after this long.
RETRY_SECONDS = 30.0
# The thread looks at the publisher at least this often: a commit in between may have published already.
LONGEST_SLEEP = 60.0
# While a failed audit holds main back, the branch is looked at this often: another tool's fix publishes then.
FIX_LOOK_SECONDS = 30.0


class PublishTimer:
    """Publishes what a stream's publish interval held back once it is due, and a fix of a branch a failed audit
    holds, while the stream has no commit.

    One thread at a time: it starts when a pass held snapshots back and ends when none are. ``lock`` is held while
    it publishes, and by the stream while it commits, so that the two never run the publisher at once.
    ``actions_waiting`` takes the tables whose partition-done actions failed after main moved. A stream that
    ended (``trigger={"availableNow": True}``) still publishes when due, while the driver runs, but not the
    tables a later stream met since (:mod:`icesink.committer.claims`): that one publishes them, by its own checks
    and policy.
    """

    def __init__(
        self,
        publisher: Publisher,
        lock: threading.Lock,
        actions_waiting: Callable[[Collection[str]], None] = lambda _: None,
    ) -> None:
        self._publisher = publisher
        self._lock = lock
        self._actions_waiting = actions_waiting
        self._guard = threading.Lock()  # over the fields below
        self._job_id: str | None = None
        self._looked_at = 0.0  # when the publisher last ran (monotonic)
        self._thread: threading.Thread | None = None

    def committed(self, job_id: str) -> None:
        """After the stream's commit and publishing pass: keep an eye on what the interval or an audit held back."""
        with self._guard:
            self._job_id = job_id
            self._looked_at = time.monotonic()
            if self._thread is not None or self._wait() is None:
                return
            self._thread = threading.Thread(target=self._run, name="icesink-publish-timer", daemon=True)
            self._thread.start()

    def _wait(self) -> float | None:
        """Seconds until the next pass (None: nothing to wait for): when the interval ends, and, while a failed
        audit holds main back, every :data:`FIX_LOOK_SECONDS`."""
        wait = self._publisher.seconds_until_due()
        if self._publisher.held_by_audit():
            again = self._looked_at + FIX_LOOK_SECONDS - time.monotonic()
            wait = again if wait is None else min(wait, again)
        return wait

    def _run(self) -> None:
        retry_at: float | None = None  # after a failed pass: when to try again
        while True:
            with self._lock:
                wait = self._wait() if retry_at is None else retry_at - time.monotonic()
                if wait is None:
                    with self._guard:
                        self._thread = None
                    return
                if wait <= 0:
                    retry_at = time.monotonic() + RETRY_SECONDS if self._failed_pass() else None
                    self._looked_at = time.monotonic()
                    continue
            time.sleep(min(wait, LONGEST_SLEEP))

    def _failed_pass(self) -> bool:
        """One pass of the publisher; whether it failed (a failure is logged, and tried again)."""
        with self._guard:
            job_id = self._job_id
        assert job_id is not None
        try:
            report = self._publisher.after_commit(job_id)
        except Exception as e:  # an audit that failed, or the catalog away: the stream goes on
            log.warning("job=%s: publishing after the publish interval failed: %s", job_id, e)
            return True
        if report.published:
            log.info("job=%s: published after the publish interval: %s", job_id, ", ".join(sorted(report.published)))
        self._actions_waiting(self._publisher.take_actions_waiting())
        return False
