import threading

import pytest

import baton

FAILURES = []
_REPORTED = threading.Condition()


def _heard(failure):
    with _REPORTED:
        FAILURES.append(failure)
        _REPORTED.notify_all()
    return True


def failure_after(count, containing, timeout=30):
    """The first failure the controller's hook heard after the first `count` whose report has
    `containing` in it (a late report of an earlier test's failure does not count); None if none
    came within `timeout` seconds."""

    def found():
        return next((f for f in FAILURES[count:] if containing in f), None)

    with _REPORTED:
        _REPORTED.wait_for(lambda: found() is not None, timeout)
        return found()


@pytest.fixture(scope="session", autouse=True)
def controller():
    # Tests kill workers on purpose: the controller hears of it here instead of exiting.
    baton.set_supervise(_heard)
    yield
    baton.shutdown()
