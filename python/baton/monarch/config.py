"""monarch.config over baton: configure()/configured() take Monarch's keys. Those that mean
something in baton act on it:

    enable_log_forwarding=False       workers' output is not printed at the controller
    stop_actor_timeout, mesh_terminate_timeout ("30s", or seconds)
                                      how long a proc mesh's stop() waits for each step
    process_exit_timeout              how long a lost link waits to see its process exit
    default_transport                 accepted: baton picks unix sockets on a host, TLS over
                                      TCP between hosts

The timeouts are the runtime's, fixed as it starts (at the program's first mesh): set them
before. Every other key of Monarch's is kept, so that get_global_config() shows it, and
reported once, on standard error, as ignored by baton. A key Monarch does not have raises
ValueError (naming the nearest one), and a value of the wrong kind TypeError, as in Monarch."""

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

# Monarch's configuration keys, each with the kind of value it takes and its default (baton's
# own where baton acts on the key). A key not here is refused (ValueError), a value of the wrong
# kind too (TypeError), as Monarch does.
_DURATION, _BOOL, _INT, _FLOAT, _TEXT, _ANY = "duration", "bool", "int", "float", "str", "any"
_KEYS = {
    "codec_max_frame_length": (_INT, 10 * 1024**3),
    "default_transport": (_ANY, "unix"),
    "message_delivery_timeout": (_DURATION, "30s"),
    "host_spawn_ready_timeout": (_DURATION, "30s"),
    "mesh_proc_spawn_max_idle": (_DURATION, "30s"),
    "process_exit_timeout": (_DURATION, "2s"),
    "stop_actor_timeout": (_DURATION, "5s"),
    "cleanup_timeout": (_DURATION, "3s"),
    "actor_spawn_max_idle": (_DURATION, "30s"),
    "get_actor_state_max_idle": (_DURATION, "1m"),
    "supervision_watchdog_timeout": (_DURATION, "2m"),
    "proc_stop_max_idle": (_DURATION, "30s"),
    "get_proc_state_max_idle": (_DURATION, "1m"),
    "mesh_terminate_timeout": (_DURATION, "5s"),
    "mesh_orphan_timeout": (_DURATION, None),
    "mesh_attach_config_timeout": (_DURATION, "10s"),
    "message_ack_time_interval": (_DURATION, "500ms"),
    "split_max_buffer_age": (_DURATION, "50ms"),
    "channel_net_rx_buffer_full_check_interval": (_DURATION, "5s"),
    "enable_log_forwarding": (_BOOL, True),
    "enable_file_capture": (_BOOL, False),
    "force_file_log": (_BOOL, False),
    "prefix_with_rank": (_BOOL, True),
    "enable_dest_actor_reordering_buffer": (_BOOL, True),
    "mesh_bootstrap_enable_pdeathsig": (_BOOL, True),
    "remote_alloc_bind_to_inaddr_any": (_BOOL, False),
    "rdma_allow_tcp_fallback": (_BOOL, True),
    "rdma_disable_ibverbs": (_BOOL, False),
    "tail_log_lines": (_INT, 0),
    "read_log_buffer": (_INT, 100),
    "message_ack_every_n_messages": (_INT, 1000),
    "message_ttl_default": (_INT, 64),
    "split_max_buffer_size": (_INT, 5),
    "mesh_terminate_concurrency": (_INT, 16),
    "small_write_threshold": (_INT, 256),
    "max_cast_dimension_size": (_INT, 16),
    "rdma_max_chunk_size_mb": (_INT, None),
    "message_latency_sampling_rate": (_FLOAT, 0.01),
    "default_encoding": (_ANY, "multipart"),
    "mesh_admin_addr": (_TEXT, "[::]:1729"),
    "remote_alloc_bootstrap_addr": (_TEXT, None),
    "remote_alloc_allowed_port_range": (_ANY, None),
    "rdma_ibverbs_target": (_TEXT, None),
    "rdma_peer_device_affinity": (_TEXT, None),
}


def _check_key(key, value):
    """Refuses a key Monarch does not have (ValueError, naming the nearest) and a value of the
    wrong kind (TypeError)."""
    if key not in _KEYS:
        import difflib

        near = difflib.get_close_matches(key, _KEYS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else " (see monarch.config's keys)"
        raise ValueError(f"unknown config key {key!r}{hint}")
    kind = _KEYS[key][0]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {
        _DURATION: isinstance(value, str) or number,
        _BOOL: isinstance(value, bool),
        _INT: isinstance(value, int) and not isinstance(value, bool),
        _FLOAT: number,
        _TEXT: isinstance(value, str),
        _ANY: True,
    }[kind]
    if not ok:
        want = {_DURATION: "a duration such as '30s'", _BOOL: "True or False",
                _INT: "an int", _FLOAT: "a number", _TEXT: "a str"}[kind]
        raise TypeError(f"config key {key!r} takes {want}, not {type(value).__name__} "
                        f"{value!r}")


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
        _check_key(k, keys[k])
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
    """Every key: its default, overridden by what was set."""
    merged = {k: default for k, (_, default) in _KEYS.items() if default is not None}
    merged.update(_settings)
    return merged


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
