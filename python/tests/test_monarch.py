"""Monarch's API over baton: the runner (python -m baton.monarch), every name of monarch.actor,
Monarch's semantics baton took on (context and ranks, attributes an actor names freely, typed
handles, channels, accumulators, send, proc meshes kept by their actors), and the names baton
does not implement, each refused saying what to use instead."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest

import baton
import baton.monarch as monarch
from baton.monarch import actor as mactor
from baton.monarch._unsupported import MonarchUnsupported

HERE = os.path.dirname(os.path.abspath(__file__))


def run(args, cwd=None, extra_path=()):
    """(exit status, stdout, stderr) of `python args...` with this package importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, *env.get("PYTHONPATH", "").split(os.pathsep)])
    env.pop("BATON_MONARCH", None)
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_the_runner_runs_a_monarch_script_as_main_with_its_arguments_and_exit_status(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        from monarch.actor import Actor, current_rank, endpoint, this_host

        class Doubler(Actor):
            @endpoint
            def double(self, x: int) -> int:
                return 2 * x + current_rank().rank

        if __name__ == "__main__":
            procs = this_host().spawn_procs(per_host={"gpus": 3})
            mesh = procs.spawn("doublers", Doubler)
            print("got", mesh.double.call(int(sys.argv[1])).get().values(), sys.argv[2:])
            sys.exit(int(sys.argv[2]))
    """))
    code, out, err = run(["-m", "baton.monarch", str(script), "5", "7"])
    assert code == 7, err
    assert "got [10, 11, 12] ['7']" in out


def test_the_runner_runs_a_monarch_test_suite_through_pytest(tmp_path):
    (tmp_path / "test_mesh.py").write_text(textwrap.dedent("""
        import monarch.actor
        from monarch.actor import Actor, endpoint, this_host

        class Echo(Actor):
            @endpoint
            def echo(self, x):
                return (monarch.actor.current_actor_name(), x)

        def test_echo():
            mesh = this_host().spawn_procs(per_host={"procs": 2}).spawn("echo", Echo)
            names = [n for n, x in mesh.echo.call(1).get().values()]
            assert len(set(names)) == 2 and all("/echo[" in n for n in names)
    """))
    code, out, err = run(["-m", "baton.monarch", "-m", "pytest", "-q", "-p",
                          "no:cacheprovider", str(tmp_path)], cwd=tmp_path)
    assert code == 0, out + err
    assert "1 passed" in out


def test_the_runner_says_what_is_wrong_with_its_command_line(tmp_path):
    code, _, err = run(["-m", "baton.monarch", str(tmp_path / "nosuch.py")])
    assert code == 2 and "no such script" in err
    code, _, err = run(["-m", "baton.monarch"])
    assert code == 2 and "usage: python -m baton.monarch SCRIPT" in err
    code, _, err = run(["-m", "baton.monarch", "-m"])
    assert code == 2 and "name the module to run" in err


def test_without_its_extension_the_package_says_how_to_build_it():
    env = {k: v for k, v in os.environ.items() if k not in ("BATON_MONARCH", "PYTHONPATH")}
    env["PYTHONPATH"] = os.path.dirname(HERE)  # the sources alone, not the built extension
    for args in (["-c", "import baton"], ["-m", "baton.monarch", "-c", "pass"]):
        p = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                           cwd=HERE, timeout=120)
        assert p.returncode != 0
        assert "baton's extension module (baton._baton) was not found" in p.stderr, p.stderr
        assert "make python" in p.stderr and "circular import" not in p.stderr


def test_a_real_monarch_package_is_not_shadowed_without_the_runner(tmp_path):
    (tmp_path / "monarch").mkdir()
    (tmp_path / "monarch" / "__init__.py").write_text("WHICH = 'the real one'\n")
    code, out, err = run(["-c", "import monarch, baton.monarch; print(monarch.WHICH)"],
                         extra_path=[str(tmp_path)])
    assert (code, out.strip()) == (0, "the real one"), err
    script = tmp_path / "which.py"
    script.write_text("import monarch, monarch.actor\nprint(monarch.__name__, "
                      "monarch.actor.Actor.__module__)\n")
    code, out, err = run(["-m", "baton.monarch", str(script)], extra_path=[str(tmp_path)])
    assert (code, out.strip()) == (0, "baton.monarch baton._actor"), err


def test_every_name_of_monarch_actor_is_there():
    names = [
        "Accumulator", "Actor", "ActorError", "current_actor_name", "as_endpoint",
        "current_rank", "current_size", "concurrent_endpoint", "endpoint", "Future", "Point",
        "ProcMesh", "ProcId", "Channel", "send", "shutdown_context", "ValueMesh",
        "debug_controller", "get_or_spawn_controller", "this_host", "this_proc",
        "default_bootstrap_cmd", "HostMesh", "context", "hosts_from_config", "Port",
        "PortReceiver", "Endpoint", "Extent", "run_worker_loop_forever", "attach_to_workers",
        "attach", "enable_transport", "Context", "ChannelTransport", "unhandled_fault_hook",
        "MeshFailure", "config", "get_meter", "span", "traced", "Uid",
    ]
    assert sorted(mactor.__all__) == sorted(names)
    for name in names:
        assert getattr(mactor, name) is not None, name
    assert mactor.Actor is baton.Actor and mactor.context is baton.context


def test_what_baton_does_not_implement_imports_and_refuses_when_used_saying_why():
    with pytest.raises(MonarchUnsupported, match="fetch_shard is not supported by baton: "
                       "Monarch's tensor engine"):
        monarch.fetch_shard(None)
    with pytest.raises(MonarchUnsupported, match="tensor engine"):
        with monarch.no_mesh:
            pass
    from baton.monarch import job

    with pytest.raises(MonarchUnsupported, match="exec_command is not supported by baton: spawn "
                       "an actor"):
        job.exec_command(None, ["ls"])
    with pytest.raises(MonarchUnsupported, match="remote_mount is not supported"):
        job.LocalJob().remote_mount("src")
    assert isinstance(monarch.Tensor, monarch._unsupported.Unsupported)


def test_a_missing_monarch_module_imports_under_the_runner_and_refuses_when_used(tmp_path):
    script = tmp_path / "te.py"
    script.write_text(textwrap.dedent("""
        from monarch.tensor_engine import Whatever
        from monarch import remote
        try:
            Whatever()
        except Exception as e:
            print(type(e).__name__, e)
    """))
    code, out, err = run(["-m", "baton.monarch", str(script)])
    assert code == 0, err
    assert "MonarchUnsupported monarch.tensor_engine.Whatever is not supported by baton" in out
    # Two levels down, in a package baton does not have either, with that package's advice.
    script.write_text(textwrap.dedent("""
        from monarch.tools.config import Config
        import monarch.simulator.config
        try:
            Config(scheduler="slurm")
        except Exception as e:
            print(type(e).__name__, e)
    """))
    code, out, err = run(["-m", "baton.monarch", str(script)])
    assert code == 0, err
    assert "MonarchUnsupported monarch.tools.config.Config is not supported by baton: " \
        "Monarch's job tools" in out
    assert "baton.SshJob, SlurmJob, KubernetesJob" in out


class Placed(baton.Actor):
    def __init__(self):
        self.rank = ("mine", current := mactor.current_rank().rank)  # its own attribute
        self.at_init = (current, mactor.current_size(), mactor.current_actor_name())

    @baton.endpoint
    def where(self):
        c = mactor.context()
        return (self.rank, self.at_init, dict(c.message_rank), c.actor_instance.rank.rank,
                mactor.current_actor_name())

    @baton.endpoint
    async def where_async(self):
        return dict(mactor.current_rank()), mactor.current_size()

    @baton.endpoint
    def seen_at(self):
        """(the message's point, its rank, and this actor's own rank)."""
        c = mactor.context()
        return dict(c.message_rank), c.message_rank.rank, c.actor_instance.rank.rank

    @baton.endpoint
    def ask(self, mesh):
        """What `mesh` (a view handed to this actor) says when this actor calls it."""
        return mesh.seen_at.call().get(timeout=30).values()


def test_context_and_rank_helpers_inside_actors_and_at_the_client():
    procs = baton.this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    placed = procs.spawn("placed", Placed)
    got = placed.where.call().get(timeout=30).values()
    for r, (own, at_init, point, rank, name) in enumerate(got):
        assert own == ("mine", r)
        assert at_init[0] == r and at_init[1] == {"hosts": 2, "gpus": 2}
        assert point == {"hosts": r // 2, "gpus": r % 2} and rank == r
        assert "/placed[" in name and at_init[2] == name
    assert len({name for *_, name in got}) == 4
    # A call to a slice (or a renamed, flattened or split view) gives each member its place in
    # that view as message_rank and current_rank(), as in Monarch; actor_instance.rank stays
    # the actor's own. Async endpoints too, and a member sliced down to no dimensions is at {}.
    point, size = placed.slice(hosts=1, gpus=0).where_async.call_one().get(timeout=30)
    assert point == {} and size == {}
    assert placed.slice(hosts=1).seen_at.call().get(timeout=30).values() == [
        ({"gpus": 0}, 0, 2), ({"gpus": 1}, 1, 3)]
    assert placed.slice(gpus=slice(1, 2)).seen_at.call().get(timeout=30).values() == [
        ({"hosts": 0, "gpus": 0}, 0, 1), ({"hosts": 1, "gpus": 0}, 1, 3)]
    assert placed.slice(hosts=slice(1, 2)).rename(gpus="g").seen_at.call().get(
        timeout=30).values() == [({"hosts": 0, "g": 0}, 0, 2), ({"hosts": 0, "g": 1}, 1, 3)]
    assert placed.flatten("all").seen_at.call().get(timeout=30).values() == [
        ({"all": r}, r, r) for r in range(4)]
    assert placed.slice(gpus=1).split(hosts=("a", "b"), b=1).seen_at.call().get(
        timeout=30).values() == [({"a": a, "b": 0}, a, 2 * a + 1) for a in range(2)]
    assert placed.seen_at.call().get(timeout=30).values() == [
        ({"hosts": r // 2, "gpus": r % 2}, r, r) for r in range(4)]
    # A view handed to an actor is still a view when that actor calls it.
    asked = placed.slice(hosts=0, gpus=0).ask.call_one(placed.slice(gpus=1)).get(timeout=30)
    assert asked == [({"hosts": 0}, 0, 1), ({"hosts": 1}, 1, 3)]
    client = mactor.context()
    assert mactor.current_rank().rank == 0 and dict(mactor.current_rank()) == {}
    assert mactor.current_actor_name() == "client" and client.actor_instance.actor is None
    procs.stop().get(timeout=60)


def test_handle_types_are_generic_at_run_time():
    for t in (mactor.Future[int], mactor.ValueMesh[float], baton.ActorMesh[Placed],
              mactor.Port[int], mactor.PortReceiver[str], mactor.Channel[int],
              mactor.Accumulator[int]):
        assert t is not None


class Refused(ValueError):
    """An exception class of the program's own, raised in an actor."""


def _own_rank():
    """The running actor's own rank (current_rank() is its place in the slice called)."""
    return mactor.context().actor_instance.rank.rank


class Reporter(baton.Actor):
    @baton.endpoint
    def report(self, port, text):
        port.send((_own_rank(), text))
        return len(text)

    @baton.endpoint
    def value(self):
        return 10 + _own_rank()

    @baton.endpoint
    def refuse_on_zero(self):
        if _own_rank() == 0:
            raise ValueError("rank 0 refuses")
        return 10 + _own_rank()

    @baton.endpoint
    def refuse(self, why):
        raise Refused(why)

    @baton.endpoint
    def report_error(self, port):
        port.exception(KeyError(f"from rank {_own_rank()}"))


def test_send_to_a_port_delivers_the_live_replies_and_each_failure_in_its_place():
    mesh = baton.this_host().spawn_procs(per_host={"procs": 3}).spawn("refusers", Reporter)
    port, receiver = mactor.Channel.open()
    mactor.send(mesh.refuse_on_zero, (), {}, port=port)
    values, errors = [], []
    for _ in range(3):
        try:
            values.append(receiver.recv().get(timeout=30))
        except baton.ActorError as e:
            errors.append(str(e))
    assert sorted(values) == [11, 12]
    assert len(errors) == 1 and "rank 0 refuses" in errors[0], errors
    with pytest.raises(baton.TimeoutError):  # nothing more: one item per member
        receiver.recv().get(timeout=0.2)
    mactor.send(mesh.slice(procs=0).refuse_on_zero, (), {}, port=port, selection="choose")
    with pytest.raises(baton.ActorError, match="rank 0 refuses"):
        receiver.recv().get(timeout=30)
    mactor.send(mesh.slice(procs=2).refuse_on_zero, (), {}, port=port, selection="choose")
    assert receiver.recv().get(timeout=30) == 12
    # An actor reports a failure through a port it was given: the receiver raises it.
    mesh.slice(procs=1).report_error.call_one(port).get(timeout=30)
    with pytest.raises(KeyError, match="from rank 1"):
        receiver.recv().get(timeout=30)
    with pytest.raises(TypeError, match="takes an exception, not str"):
        port.exception("not an exception")


def test_channels_accumulators_and_send():
    mesh = baton.this_host().spawn_procs(per_host={"procs": 3}).spawn("reporters", Reporter)
    port, receiver = mactor.Channel.open()
    mesh.report.broadcast(port, "hi")
    assert sorted(receiver.recv().get(timeout=30) for _ in range(3)) == [
        (0, "hi"), (1, "hi"), (2, "hi")]
    with pytest.raises(baton.TimeoutError):
        receiver.recv().get(timeout=0.2)
    total = mactor.Accumulator(mesh.value, [], lambda acc, v: acc + [v]).accumulate()
    assert sorted(total.get(timeout=30)) == [10, 11, 12]
    mactor.send(mesh.value, (), {}, port=port)
    assert sorted(receiver.recv().get(timeout=30) for _ in range(3)) == [10, 11, 12]
    mactor.send(mesh.report, (port, "all"), {})
    assert sorted(receiver.recv().get(timeout=30) for _ in range(3)) == [
        (0, "all"), (1, "all"), (2, "all")]
    with pytest.raises(baton.UsageError, match="takes a mesh's endpoint"):
        mactor.Accumulator(Reporter.value, 0, max)


def test_an_actor_mesh_keeps_its_proc_mesh_alive():
    mesh = baton.this_host().spawn_procs(per_host={"procs": 2}).spawn("kept", Reporter)
    gc.collect()  # the proc mesh has no name left in this program
    assert mesh.value.call().get(timeout=30).values() == [10, 11]
    assert mesh.slice(procs=1).value.call_one().get(timeout=30) == 11


def test_extents_value_meshes_and_remote_exceptions():
    procs = baton.this_host().spawn_procs(per_host={"hosts": 2, "gpus": 3})
    assert procs.extent == mactor.Extent(["hosts", "gpus"], [2, 3])
    assert procs.extent.nelements == 6 and procs.size("gpus") == 3 and procs.size() == 6
    values = procs.spawn("vm", Reporter).value.call().get(timeout=30)
    assert values.item(hosts=1, gpus=2) == 15
    assert values.slice(hosts=1).values() == [13, 14, 15]
    assert values.slice(gpus=slice(1, 3)).extent == mactor.Extent(["hosts", "gpus"], [2, 2])
    point, _ = values.items()[4]
    assert point.extent == procs.extent and dict(point) == {"hosts": 1, "gpus": 1}
    e = baton.ActorError("a", "ep", None, "KeyError", "'k'", "")
    assert isinstance(e.exception, KeyError)
    assert str(baton.ActorError("a", "ep", None, "my.Own", "boom", "").exception) == (
        "my.Own: boom")
    # An exception class of the program's own comes back as itself, with its message.
    with pytest.raises(baton.ActorError) as refused:
        procs.spawn("refusers", Reporter).slice(hosts=1, gpus=2).refuse.call_one("no").get(
            timeout=30)
    assert refused.value.remote_type == f"{__name__}.Refused"
    assert type(refused.value.exception) is Refused and str(refused.value.exception) == "no"
    procs.stop().get(timeout=60)


def test_configuration_keys_are_kept_and_reported_ignored_once(capsys):
    monarch.configure(enable_log_forwarding=True)
    monarch.configure(enable_log_forwarding=False)
    with monarch.configured(codec_max_frame_length=10) as c:
        assert c["codec_max_frame_length"] == 10 and c["enable_log_forwarding"] is False
    assert monarch.get_global_config()["codec_max_frame_length"] == 10 * 1024**3  # its default
    assert "codec_max_frame_length" not in monarch.get_runtime_config()
    err = capsys.readouterr().err
    assert "'enable_log_forwarding'" not in err  # a key baton acts on
    assert err.count("'codec_max_frame_length' is ignored by baton") == 1
    with monarch.configured(codec_max_frame_length=20):
        pass
    assert "codec_max_frame_length" not in capsys.readouterr().err  # said once
    monarch.clear_runtime_config()
    assert monarch.get_runtime_config() == {}
    assert monarch.get_global_config()["enable_log_forwarding"] is True  # the default again


def test_a_configuration_key_monarch_lacks_or_a_value_of_the_wrong_kind_is_refused():
    with pytest.raises(ValueError, match="unknown config key 'enable_log_fowarding'; did you "
                                         "mean 'enable_log_forwarding'"):
        monarch.configure(enable_log_fowarding=False)
    with pytest.raises(TypeError, match="'message_delivery_timeout' takes a duration"):
        monarch.configure(message_delivery_timeout=["x"])
    with pytest.raises(TypeError, match="'enable_log_forwarding' takes True or False"):
        with monarch.configured(enable_log_forwarding="no"):
            pass
    assert monarch.get_runtime_config() == {}  # nothing was set


def test_telemetry_helpers_run_and_keep_what_they_are_given():
    counter = mactor.get_meter("trainer").create_counter("steps")
    counter.add(2)
    assert counter.values == [2]
    with mactor.span("step"):
        pass

    @mactor.traced
    def f(x):
        return x + 1

    assert f(1) == 2 and mactor.traced(name="g")(f)(2) == 3


def test_rdma_buffers_and_batched_actions_through_monarch_rdma():
    import torch

    from baton.monarch import rdma

    src = torch.arange(256, dtype=torch.int32)
    buf = rdma.RDMABuffer(src)
    assert buf.size() == 1024 and rdma.is_rdma_available()
    dst = torch.zeros(256, dtype=torch.int32)
    buf.read_into(dst).get(timeout=30)
    assert torch.equal(dst, src)
    other = rdma.RDMABuffer(torch.full((256,), 3, dtype=torch.int32))
    back = torch.full((256,), 7, dtype=torch.int32)
    threes = torch.zeros(256, dtype=torch.int32)
    rdma.RDMAAction().write_from(buf, back).read_into(other, threes).submit().get(timeout=30)
    assert torch.equal(src, back) and threes.tolist() == [3] * 256
    buf.drop().get(timeout=30)


class Counter(baton.Actor):
    def __init__(self, initial_value):
        self.value = initial_value

    @baton.endpoint
    def increment(self):
        self.value += 1

    @baton.endpoint
    def get_value(self):
        return self.value, os.getpid(), dict(mactor.current_size())

    @baton.endpoint
    def ask(self, other):
        return other.get_value.call_one().get(timeout=30)[0] * 10


def test_actors_on_this_proc_run_in_the_controllers_own_process():
    here = mactor.this_proc()
    assert len(here) == 1 and dict(here.extent) == {}
    counter = here.spawn("counter", Counter, initial_value=0)
    counter.increment.broadcast()
    value, pid, size = counter.get_value.call_one().get(timeout=30)
    assert (value, pid, size) == (1, os.getpid(), {})
    assert counter.get_value.call().get(timeout=30).values()[0][0] == 1
    asker = baton.this_host().spawn_procs(per_host={"procs": 1}).spawn("asker", Counter, 0)
    assert asker.ask.call_one(counter).get(timeout=30) == 10
    counter.stop().get(timeout=30)


class Engine(baton.Actor):
    """Replies to infer() later, through the port it was given, while it goes on meanwhile."""

    def __init__(self):
        self.waiting = []
        self.weights = 0

    @mactor.endpoint(explicit_response_port=True)
    def infer(self, port, prompt):
        if prompt == "refuse":
            raise ValueError("no prompt like that")
        self.waiting.append((port, prompt))

    @mactor.endpoint
    def update_weights(self, w):
        self.weights = w

    @mactor.endpoint
    def answer(self, fail=False):
        for port, prompt in self.waiting:
            if fail:
                port.exception(KeyError(prompt))
            else:
                port.send(f"{prompt} with weights {self.weights} at {mactor.current_rank().rank}")
        self.waiting = []
        return len(self.waiting)


def test_an_explicit_response_port_replies_later_while_the_actor_goes_on():
    engines = mactor.this_proc().spawn("engine", Engine)
    first = engines.infer.call_one("a")
    second = engines.infer.call_one("b")
    engines.update_weights.broadcast(1)  # handled before either reply is sent
    engines.answer.call_one().get(timeout=30)
    assert first.get(timeout=30) == "a with weights 1 at 0"
    assert second.get(timeout=30) == "b with weights 1 at 0"
    failing = engines.infer.call_one("c")
    engines.answer.call_one(True).get(timeout=30)
    with pytest.raises(baton.ActorError) as info:
        failing.get(timeout=30)
    assert info.value.remote_type == "KeyError"
    with pytest.raises(baton.ActorError, match="no prompt like that"):
        engines.infer.call_one("refuse").get(timeout=30)
    procs = baton.this_host().spawn_procs(per_host={"gpus": 3})
    mesh = procs.spawn("engines", Engine)
    everyone = mesh.slice(gpus=slice(1, 3)).infer.call("x")
    streamed = mesh.slice(gpus=0).infer.stream("y")
    mesh.answer.broadcast()
    assert everyone.get(timeout=30).values() == ["x with weights 0 at 1", "x with weights 0 at 2"]
    assert [v for _, v in streamed] == ["y with weights 0 at 0"]
    procs.stop().get(timeout=60)


class Selfish(baton.Actor):
    @baton.endpoint
    def keep(self, me):
        self.me = me

    @baton.endpoint
    def value(self):
        return 1

    @baton.endpoint
    def ask_myself(self):
        return self.me.value.call_one().get(timeout=30)

    @baton.endpoint
    async def await_myself(self):
        return await self.me.value.call_one()

    @baton.endpoint
    def send_myself(self):
        self.me.value.broadcast()  # not waited for: that is fine
        return "sent"


def test_an_actor_waiting_for_a_call_to_itself_fails_at_once_saying_why():
    procs = baton.this_host().spawn_procs(per_host={"procs": 1})
    selfish = procs.spawn("selfish", Selfish)
    selfish.keep.call_one(selfish).get(timeout=30)
    for endpoint in (selfish.ask_myself, selfish.await_myself):
        with pytest.raises(baton.ActorError) as info:
            endpoint.call_one().get(timeout=30)
        assert "waits for its own call of value" in info.value.remote_message
        assert "one message at a time" in info.value.remote_message
    assert selfish.send_myself.call_one().get(timeout=30) == "sent"
    assert selfish.value.call_one().get(timeout=30) == 1
    procs.stop().get(timeout=60)


def test_stream_items_are_futures_too_and_streams_iterate_in_asyncio():
    import asyncio

    mesh = baton.this_host().spawn_procs(per_host={"procs": 3}).spawn("streamed", Reporter)
    futures = list(mesh.value.stream(timeout=30))
    assert sorted(f.get() for f in futures) == [10, 11, 12]
    assert sorted(v for _, v in futures) == [10, 11, 12]

    async def gather():
        got = []
        async for item in mesh.value.stream(timeout=30):
            got.append(await item)
        return sorted(got)

    assert asyncio.run(gather()) == [10, 11, 12]


class Gate(baton.Actor):
    """Concurrent endpoints: a call that waits for a later one to open the gate."""

    def __init__(self):
        self.opened = None

    def _event(self):
        import asyncio

        if self.opened is None:
            self.opened = asyncio.Event()
        return self.opened

    @mactor.concurrent_endpoint
    async def wait_open(self):
        await self._event().wait()
        return f"through at {mactor.current_rank().rank}"

    @baton.concurrent_endpoint
    async def open(self):
        self._event().set()
        return "opened"

    @baton.concurrent_endpoint
    async def refuse(self):
        raise KeyError("no")


def test_concurrent_endpoints_interleave_their_calls():
    gates = baton.this_host().spawn_procs(per_host={"procs": 2}).spawn("gates", Gate)
    waiting = gates.wait_open.call()
    assert gates.open.call().get(timeout=30).values() == ["opened", "opened"]
    assert waiting.get(timeout=30).values() == ["through at 0", "through at 1"]
    with pytest.raises(baton.ActorError) as info:
        gates.slice(procs=0).refuse.call_one().get(timeout=30)
    assert info.value.remote_type == "KeyError"
    with pytest.raises(TypeError, match="marks an `async def` method"):

        @baton.concurrent_endpoint
        def plain(self):
            pass
