"""monarch.config over baton: configure()/configured() take Monarch's keys. baton reads none of
them yet (its settings are RuntimeOptions and BATON_* variables): each key is kept, so that
get_global_config() shows it, and reported once as ignored."""

import contextlib
import sys

_settings: dict = {}
_reported: set = set()


def _report(keys):
    for k in sorted(set(keys) - _reported):
        _reported.add(k)
        print(f"baton.monarch: config key {k!r} is ignored by baton", file=sys.stderr)


def configure(**kwargs):
    """Sets Monarch configuration keys for this process."""
    _report(kwargs)
    _settings.update(kwargs)


def get_global_config():
    """Every key set so far."""
    return dict(_settings)


def get_runtime_config():
    return dict(_settings)


@contextlib.contextmanager
def configured(**overrides):
    """Sets keys for the length of a with block; yields the configuration."""
    _report(overrides)
    saved = dict(_settings)
    _settings.update(overrides)
    try:
        yield dict(_settings)
    finally:
        _settings.clear()
        _settings.update(saved)


__all__ = ["configure", "configured", "get_global_config", "get_runtime_config"]
