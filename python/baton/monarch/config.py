"""monarch.config over baton: configure()/configured() take Monarch's keys. Those that mean
something in baton act on it:

    enable_log_forwarding=False       workers' output is not printed at the controller
    stop_actor_timeout, mesh_terminate_timeout ("30s", or seconds)
                                      how long a proc mesh's stop() waits for each step
    process_exit_timeout              how long a lost link waits to see its process exit
    default_transport                 accepted: baton picks unix sockets on a host, TLS over
                                      TCP between hosts

The timeouts are the runtime's, fixed as it starts (at the program's first mesh): set them
before. Every other key is kept, so that get_global_config() shows it, and reported once, on
standard error, as ignored by baton."""

import contextlib
import re
import sys

_settings: dict = {}
_reported: set = set()

# Keys baton reads, each to the runtime option it sets (milliseconds), or None where acting on
# it is done here (log forwarding) or nothing is to be done (transport).
_TIMEOUTS = {
    "stop_actor_timeout": "stop_grace_ms",
    "mesh_terminate_timeout": "stop_grace_ms",
    "process_exit_timeout": "exit_wait_ms",
}
_KNOWN = {*_TIMEOUTS, "enable_log_forwarding", "default_transport"}

_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def seconds(value):
    """A duration as Monarch writes it ("30s", "5m", "1h 30m", "250ms") or a number of
    seconds, in seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text)
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([a-z]+)", "", text).strip():
        raise ValueError(f"not a duration: {value!r} (e.g. '30s', '5m', '1h 30m')")
    total = 0.0
    for number, unit in parts:
        if unit not in _UNITS:
            raise ValueError(f"{value!r}: unknown unit {unit!r} (ms, s, m, h)")
        total += float(number) * _UNITS[unit]
    return total


def runtime_options():
    """What the runtime takes from the configuration as it starts: {option: milliseconds}."""
    return {_TIMEOUTS[k]: int(seconds(v) * 1000) for k, v in _settings.items() if k in _TIMEOUTS}


def _report(keys):
    """Says once per key that baton ignores it, or that a timeout comes too late."""
    from .. import _runtime

    for k in sorted(set(keys) - _KNOWN - _reported):
        _reported.add(k)
        print(f"baton.monarch: config key {k!r} is ignored by baton", file=sys.stderr)
    for k in keys:
        if k in _TIMEOUTS and _runtime.running() and k not in _reported:
            _reported.add(k)
            print(f"baton.monarch: config key {k!r} takes effect in a runtime started "
                  "after it is set; this program's has started", file=sys.stderr)


def _sync():
    """The runtime's settings, made from the keys set now (the only place they come from)."""
    from .. import _runtime

    _runtime.start_options.clear()
    _runtime.start_options.update(runtime_options())
    _runtime.show_all_output(bool(_settings.get("enable_log_forwarding", True)))


def _check(keys):
    for k in keys:
        if k in _TIMEOUTS:
            # A bad duration is refused before anything is set.
            if isinstance(keys[k], bool) or seconds(keys[k]) < 0:
                raise ValueError(f"{k}={keys[k]!r}: give a duration of 0 or more, e.g. '30s'")


def configure(**kwargs):
    """Sets Monarch configuration keys for this process."""
    _check(kwargs)
    _settings.update(kwargs)
    _report(kwargs)
    _sync()


def get_global_config():
    """Every key set so far."""
    return dict(_settings)


def get_runtime_config():
    return dict(_settings)


@contextlib.contextmanager
def configured(**overrides):
    """Sets keys for the length of a with block; yields the configuration."""
    _check(overrides)
    saved = dict(_settings)
    _settings.update(overrides)
    _report(overrides)
    _sync()
    try:
        yield dict(_settings)
    finally:
        _settings.clear()
        _settings.update(saved)
        _sync()


def clear_runtime_config():
    """Forgets what configure() set (the runtime's settings back to baton's own)."""
    _settings.clear()
    _sync()


class Encoding:
    """Monarch's message encodings: accepted as values (baton has one wire format)."""

    Bincode = "bincode"
    Json = "json"
    Multipart = "multipart"


def _parametrized(combos):
    """A pytest decorator running the test once per {key: value} of `combos`, under
    configured(**combo)."""
    import functools
    import inspect

    import pytest

    def decorate(fn):
        if inspect.iscoroutinefunction(fn):
            async def wrapper(*args, _monarch_config, **kwargs):
                with configured(**_monarch_config):
                    return await fn(*args, **kwargs)
        else:
            def wrapper(*args, _monarch_config, **kwargs):
                with configured(**_monarch_config):
                    return fn(*args, **kwargs)
        functools.update_wrapper(wrapper, fn)
        signature = inspect.signature(fn)
        extra = inspect.Parameter("_monarch_config", inspect.Parameter.KEYWORD_ONLY)
        wrapper.__signature__ = signature.replace(
            parameters=[*signature.parameters.values(), extra])
        ids = [",".join(f"{k}={v}" for k, v in c.items()) for c in combos]
        return pytest.mark.parametrize("_monarch_config", combos, ids=ids)(wrapper)

    return decorate


def parametrize_config(**options):
    """Runs a pytest test under every combination of the values given for each key:
    @parametrize_config(enable_log_forwarding={True, False})."""
    import itertools

    if not options:
        raise ValueError("parametrize_config requires at least one config option")
    keys = list(options)
    return _parametrized([dict(zip(keys, values))
                          for values in itertools.product(*(list(options[k]) for k in keys))])


def parametrize_config_pointwise(**options):
    """Like parametrize_config, with the values of every key taken in step (zip)."""
    if not options:
        raise ValueError("parametrize_config_pointwise requires at least one config option")
    lengths = {len(v) for v in options.values()}
    if len(lengths) != 1:
        raise ValueError("parametrize_config_pointwise: every key needs as many values")
    keys = list(options)
    return _parametrized([dict(zip(keys, values))
                          for values in zip(*(options[k] for k in keys))])


__all__ = ["clear_runtime_config", "configure", "configured", "Encoding", "get_global_config",
           "get_runtime_config", "parametrize_config", "parametrize_config_pointwise"]
