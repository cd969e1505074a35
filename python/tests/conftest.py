import pytest

import baton

FAILURES = []


@pytest.fixture(scope="session", autouse=True)
def controller():
    # Tests kill workers on purpose: the controller hears of it here instead of exiting.
    baton.set_supervise(lambda failure: FAILURES.append(failure) or True)
    yield
    baton.shutdown()
