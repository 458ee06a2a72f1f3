"""Running a snapshot's checks: each one's problems, by check, and what ran (so it can be run again)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icesink.audit.inputs import AuditInput

Check = Callable[["AuditInput"], list[str]]

log = logging.getLogger("icesink.audit")

PROBLEMS_KEPT = 10  # per check: a check that returns thousands of problems is recorded by its first ones


@dataclass(frozen=True)
class AuditOutcome:
    """The checks' verdict on one snapshot."""

    problems: dict[str, list[str]]  # by check name, only the checks that failed
    checks: list[dict[str, object]]  # every check that ran, described
    rows_checked: int

    @property
    def passed(self) -> bool:
        return not self.problems


def check_name(check: object) -> str:
    """How messages and the record name a check: a built-in as it was written, a function by its name, any other
    callable by its class's name."""
    from icesink.checks import BUILT_INS

    if isinstance(check, BUILT_INS):
        return str(check)
    return getattr(check, "__qualname__", None) or getattr(check, "__name__", None) or type(check).__name__


def describe_check(check: object) -> dict[str, object]:
    """A check as the audit record keeps it: a built-in by its arguments, a function by where it can be imported
    from (``module:name``), so that ``icesink audit`` can run it again."""
    import inspect

    describe = getattr(check, "describe", None)
    if callable(describe):
        try:
            described = describe()
        except Exception:  # a check's own description that fails: named, not rebuilt
            described = None
        if isinstance(described, dict) and isinstance(described.get("check"), str):
            return dict(described)
    module = getattr(check, "__module__", None)
    qualname = getattr(check, "__qualname__", None)
    found: dict[str, object] = {"check": "function", "name": check_name(check)}
    # Only a function at the top level of a module another process can import is found again by its name (not a
    # lambda, a closure, a method, or one of the script that ran the stream).
    importable = inspect.isfunction(check) and module not in (None, "__main__") and qualname and "." not in qualname
    if importable and "<" not in str(qualname):
        found["function"] = f"{module}:{qualname}"
    return found


def import_check(described: dict[str, object]) -> Check | None:
    """A recorded check made again: a built-in from its arguments, a function imported; None if it cannot be."""
    from icesink.checks import from_description

    built_in = from_description(described)
    if built_in is not None:
        return built_in
    where = described.get("function")
    if not isinstance(where, str) or ":" not in where:
        return None
    module, qualname = where.split(":", 1)
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # a module that fails to import, or no longer has it: it cannot be run from here
        return None
    return found if callable(found) and not isinstance(found, type) else None


def run_checks(checks: Sequence[Check], audit: AuditInput) -> AuditOutcome:
    """Every check on ``audit``; a check that raises or returns something other than a list of strings fails,
    with what it did as its problem (a broken check must not let rows through)."""
    problems: dict[str, list[str]] = {}
    names: list[str] = []
    for check in checks:
        name = check_name(check)
        if name in names:  # two checks of one name (two lambdas): told apart by their place
            name = f"{name} #{len(names) + 1}"
        names.append(name)
        try:
            found = check(audit)
        except (Exception, SystemExit) as e:  # whatever a check of the user's raises is its verdict: failed, and why
            log.warning("table=%s snapshot=%d: check %s raised %r", audit.identifier, audit.snapshot_id, name, e)
            problems[name] = [f"the check raised {type(e).__name__}: {e}"]
            continue
        if not isinstance(found, list | tuple) or not all(isinstance(p, str) for p in found):
            problems[name] = [f"the check returned {found!r}; a check returns a list of problems as strings"]
            continue
        if found:
            kept = list(found[:PROBLEMS_KEPT])
            if len(found) > PROBLEMS_KEPT:
                kept.append(f"... and {len(found) - PROBLEMS_KEPT} more problem(s)")
            problems[name] = kept
    return AuditOutcome(problems, [describe_check(c) for c in checks], audit.added.num_rows)
