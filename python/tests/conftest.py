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


def failure_after(count, timeout=30):
    """The first failure the controller's hook heard after the first `count`; None if none came
    within `timeout` seconds."""
    with _REPORTED:
        _REPORTED.wait_for(lambda: len(FAILURES) > count, timeout)
        return FAILURES[count] if len(FAILURES) > count else None


@pytest.fixture(scope="session", autouse=True)
def controller():
    # Tests kill workers on purpose: the controller hears of it here instead of exiting.
    baton.set_supervise(_heard)
    yield
    baton.shutdown()
