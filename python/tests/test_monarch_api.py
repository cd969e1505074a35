"""More of Monarch's actor API over baton: as_endpoint, flatten and rename, value meshes as
per-rank input, once channels, workers started by run_worker_loop_forever and attached with
attach_to_workers, hosts_from_config, logging_option, and what attach says when the secrets
of a controller and its agents differ."""

import os
import subprocess
import sys
import textwrap

import pytest

import baton
from baton.monarch import actor as mactor

AGENT = os.environ.get("BATON_HOST_PROGRAM", "")


class Plain(baton.Actor):
    def __init__(self):
        self.seen = []

    def add(self, x):  # not an endpoint
        return x + mactor.context().actor_instance.rank.rank

    @baton.endpoint
    def take(self, value, scale=1):
        self.seen.append(value)
        return value * scale

    @baton.endpoint
    def echo(self, value):
        return value

    @baton.endpoint
    def taken(self):
        return self.seen

    @baton.endpoint
    def where(self):
        """The message's point, in the mesh or view called."""
        return dict(mactor.current_rank())

    @baton.endpoint
    def own(self):
        """The actor's own point, in the mesh it was spawned as."""
        return dict(mactor.context().actor_instance.rank)


def test_split_gives_monarchs_dimensions_over_the_same_members():
    procs = mactor.this_host().spawn_procs(per_host={"gpus": 4})
    plain = procs.spawn("split", Plain)
    grid = plain.split(gpus=("dp", "tp"), tp=2)
    assert grid.extent == baton.Extent(["dp", "tp"], [2, 2])
    got = grid.own.call().get(timeout=60)
    points = [dict(p) for p, _ in got.items()]
    assert points == [
        {"dp": 0, "tp": 0}, {"dp": 0, "tp": 1}, {"dp": 1, "tp": 0}, {"dp": 1, "tp": 1}]
    assert got.values() == [{"gpus": g} for g in range(4)]  # the same members, row-major
    assert grid.where.call().get(timeout=60).values() == points  # each called at its point
    assert grid.slice(dp=1).own.call().get(timeout=60).values() == [{"gpus": 2}, {"gpus": 3}]
    assert procs.split(gpus=("dp", "tp"), dp=2).extent == baton.Extent(["dp", "tp"], [2, 2])
    assert got.split(dp=("x", "y"), y=1).extent == baton.Extent(["x", "y", "tp"], [2, 1, 2])
    assert got.get(3) == {"gpus": 3}
    assert isinstance(procs.host_mesh, mactor.HostMesh)
    assert dict(mactor.Point(3, baton.Extent(["dp", "tp"], [2, 2]))) == {"dp": 1, "tp": 1}
    with pytest.raises(baton.UsageError, match="size all but one of"):
        plain.split(gpus=("a", "b"))
    with pytest.raises(baton.UsageError, match="do not divide it"):
        plain.split(gpus=("a", "b"), b=3)
    procs.stop().get(timeout=60)


def test_as_endpoint_calls_a_method_that_is_not_one():
    mesh = baton.this_host().spawn_procs(per_host={"gpus": 3}).spawn("plain", Plain)
    assert mactor.as_endpoint(mesh.add).call(10).get(timeout=30).values() == [10, 11, 12]
    assert mactor.as_endpoint(mesh.slice(gpus=2).add).call_one(1).get(timeout=30) == 3
    with pytest.raises(AttributeError, match="Plain.add is not an endpoint.*as_endpoint"):
        mesh.add.call(1)
    with pytest.raises(baton.UsageError, match="as_endpoint takes a mesh's method"):
        mactor.as_endpoint(mesh.take)


def test_meshes_and_value_meshes_flatten_and_rename():
    procs = baton.this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    mesh = procs.spawn("names", Plain)
    flat = mesh.flatten("rank")
    assert flat.extent == baton.Extent(["rank"], [4])
    assert flat.slice(rank=3).own.call_one().get(timeout=30) == {"hosts": 1, "gpus": 1}
    renamed = procs.rename(hosts="dp", gpus="tp")
    assert renamed.extent == baton.Extent(["dp", "tp"], [2, 2])
    assert renamed.spawn("renamed", Plain).where.call().get(timeout=30).values() == [
        {"dp": 0, "tp": 0}, {"dp": 0, "tp": 1}, {"dp": 1, "tp": 0}, {"dp": 1, "tp": 1}]
    with pytest.raises(ValueError, match="no dimension .nodes. in shape"):
        procs.rename(nodes="dp")
    values = mesh.where.call().get(timeout=30)
    assert values.flatten("r").extent == baton.Extent(["r"], [4])
    assert values.flatten("r").item(r=2) == {"hosts": 1, "gpus": 0}
    assert values.rename(gpus="tp").item(hosts=0, tp=1) == {"hosts": 0, "gpus": 1}
    procs.stop().get(timeout=60)


def test_a_value_mesh_of_the_meshes_extent_gives_each_member_its_own_value():
    procs = baton.this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    mesh = procs.spawn("per-rank", Plain)
    ranks = mactor.as_endpoint(mesh.add).call(0).get(timeout=30)  # 0..3, of this extent
    doubled = mesh.take.call(ranks, scale=2).get(timeout=30)
    assert doubled.extent == mesh.extent and doubled.values() == [0, 2, 4, 6]
    assert mesh.take.call(value=ranks).get(timeout=30).item(hosts=1, gpus=0) == 2
    mesh.take.broadcast(ranks)  # each member its own, without replies
    for point, seen in mesh.taken.call().get(timeout=30).items():
        assert seen == [point.rank] * 3
    streamed = sorted((p.rank, v) for p, v in mesh.take.stream(ranks, scale=10))
    assert streamed == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert mesh.slice(hosts=1, gpus=1).take.call_one(ranks.slice(hosts=1, gpus=1)).get(
        timeout=30) == 3  # a mesh of one, and the value mesh of its (empty) extent
    other = mesh.slice(hosts=0).where.call().get(timeout=30)  # another extent: passed whole
    assert mesh.echo.call(other).get(timeout=30).values()[0].extent == other.extent
    procs.stop().get(timeout=60)


def test_a_once_channel_takes_one_value():
    port, receiver = mactor.Channel.open()
    with pytest.raises(baton.TimeoutError):
        receiver.recv(timeout=0.05).get()  # the receive's own timeout
    port, receiver = mactor.Channel.open(once=True)
    port.send("only")
    assert receiver.recv().get(timeout=10) == "only"
    with pytest.raises(baton.UsageError, match="once=True"):
        receiver.recv()


def set_up_proc():
    os.environ["SET_UP_BY"] = "bootstrap"


async def set_up_proc_async():
    import asyncio

    await asyncio.sleep(0)
    os.environ["SET_UP_BY"] = "async bootstrap"


def refuse_to_set_up():
    raise RuntimeError("no scratch disk here")


class Env(baton.Actor):
    @baton.endpoint
    def get(self, key):
        return os.environ.get(key), os.getpid()


def test_spawn_procs_takes_monarchs_bootstrap_and_name_and_meshes_say_they_are_initialized():
    host = mactor.this_host()
    one = host.spawn_procs()  # no shape: one proc on this host
    assert len(one) == 1 and one.extent == baton.Extent(["procs"], [1])
    assert one.initialized.get(timeout=10) is True and host.initialized.get() is True
    procs = host.spawn_procs(per_host={"gpus": 2}, bootstrap=set_up_proc, name="trainers")
    assert procs.extent == baton.Extent(["gpus"], [2]) and procs.name == "trainers"
    envs = procs.spawn("env", Env)
    assert envs.initialized.get(timeout=10) is True
    got = envs.get.call("SET_UP_BY").get(timeout=30).values()
    assert [v for v, _ in got] == ["bootstrap", "bootstrap"]
    assert len({pid for _, pid in got}) == 2 and os.environ.get("SET_UP_BY") is None
    later = host.spawn_procs({"gpus": 1}, set_up_proc_async).spawn("env", Env)
    assert later.get.call_one("SET_UP_BY").get(timeout=30)[0] == "async bootstrap"
    with pytest.raises(baton.ActorError, match="no scratch disk here"):
        host.spawn_procs(per_host={"gpus": 2}, bootstrap=refuse_to_set_up)
    with pytest.raises(baton.UsageError, match="bootstrap is a function run in every proc"):
        host.spawn_procs(per_host={"gpus": 2}, bootstrap="setup.sh")
    with pytest.raises(baton.UsageError, match="'a b' is not a mesh name"):
        host.spawn_procs(per_host={"gpus": 2}, name="a b")


class Registry(baton.Actor):
    def __init__(self, tag):
        self.tag = tag
        self.items = []

    @baton.endpoint
    def register(self, item):
        self.items.append(item)
        return self.tag, os.getpid(), len(self.items)


class RegistryUser(baton.Actor):
    @baton.endpoint
    def register(self, name):
        registry = mactor.get_or_spawn_controller(name, Registry, "made in a worker")
        return registry.get(timeout=60).register.call_one(mactor.current_rank().rank).get(
            timeout=60)


@pytest.mark.parametrize("where", ["this_host", "hosts_of_agents"])
def test_get_or_spawn_controller_gives_one_actor_to_the_whole_job(where):
    # Workers on this host, started by this process, and on hosts of agents (baton-host), which
    # start them with the environment it gives them.
    hosts = mactor.this_host() if where == "this_host" else mactor.hosts_from_config("registry")
    users = hosts.spawn_procs(per_host={"gpus": 2}).spawn("users", RegistryUser)
    name = f"job-registry-{where}"
    # Workers ask first: the controller is made once, for them and for the controller after.
    first = users.register.call(name).get(timeout=120).values()
    tag, pid, _ = mactor.get_or_spawn_controller(name, Registry, "here").get(
        timeout=60).register.call_one("ctl").get(timeout=60)
    n = len(first)  # 2 here, 4 on the two hosts
    assert tag == "made in a worker" and {p for _, p, _ in first} == {pid}
    assert sorted(k for _, _, k in first) == list(range(1, n + 1))
    again = users.register.call(name).get(timeout=120).values()
    assert {p for _, p, _ in again} == {pid}
    assert sorted(k for _, _, k in again) == list(range(n + 2, 2 * n + 2))
    assert pid != os.getpid()  # in a proc of its own


def run(args, env_extra=None, **kw):
    env = dict(os.environ)
    env.pop("BATON_MONARCH", None)
    env.pop("BATON_CREDENTIALS", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=120, **kw)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_workers_started_by_run_worker_loop_forever_are_attached_to(tmp_path):
    creds = tmp_path / "creds"
    subprocess.run([AGENT, "--make-credentials", str(creds)], check=True, capture_output=True)
    port = free_port()
    env = dict(os.environ, BATON_CREDENTIALS=str(creds), BATON_HOST_PROGRAM=AGENT)
    env.pop("BATON_MONARCH", None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "baton.monarch", "-c",
         f"from monarch.actor import run_worker_loop_forever; "
         f"run_worker_loop_forever(address='tcp://127.0.0.1:{port}', ca='trust_all_connections')"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        said = ""
        for line in worker.stdout:  # its log lines, then where it serves
            said += line
            if "serving at" in line:
                break
        assert "serving at tcp://127.0.0.1:" in said, said
        script = tmp_path / "client.py"
        script.write_text(textwrap.dedent(f"""
            import os
            from monarch.actor import Actor, attach_to_workers, endpoint

            class Pid(Actor):
                @endpoint
                def parent(self):
                    return os.getppid()

            hosts = attach_to_workers(name="w", ca="trust_all_connections",
                                      workers=["tcp://127.0.0.1:{port}"])
            procs = hosts.spawn_procs(per_host={{"gpus": 2}})
            print("parents", set(procs.spawn("pid", Pid).parent.call().get().values()))
        """))
        done = run(["-m", "baton.monarch", str(script)],
                   env_extra={"BATON_CREDENTIALS": str(creds)})
        assert done.returncode == 0, done.stderr
        assert f"parents {{{worker.pid}}}" in done.stdout
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    done = run(["-m", "baton.monarch", "-c",
                "from monarch.actor import run_worker_loop_forever; "
                "run_worker_loop_forever(address='tcp://127.0.0.1:1')"])
    assert done.returncode != 0 and "BATON_CREDENTIALS=DIR" in done.stderr


def test_hosts_from_config_gives_two_hosts_of_this_machine():
    hosts = mactor.hosts_from_config("trainers")
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    assert procs.extent == baton.Extent(["hosts", "gpus"], [2, 1])
    assert procs.spawn("hosted", Plain).where.call().get(timeout=60).values() == [
        {"hosts": 0, "gpus": 0}, {"hosts": 1, "gpus": 0}]
    procs.stop().get(timeout=60)


def test_attach_with_other_credentials_says_the_secrets_differ_and_where_each_came_from(
        tmp_path):
    creds = tmp_path / "creds"
    subprocess.run([AGENT, "--make-credentials", str(creds)], check=True, capture_output=True)
    port = free_port()
    agent = subprocess.Popen([AGENT, "--credentials", str(creds), "--advertise", "127.0.0.1",
                              "--port", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert "serving at" in agent.stdout.readline()
        code = textwrap.dedent(f"""
            import os, baton
            baton.this_proc()  # the runtime starts here, with a secret of its own
            os.environ["BATON_CREDENTIALS"] = {str(creds)!r}  # too late
            baton.attach(["127.0.0.1:{port}"])
        """)
        done = run(["-c", code])
        assert done.returncode != 0
        said = done.stderr
        assert "refused this controller: their secrets do not match" in said, said
        assert "made for this run (BATON_CREDENTIALS was not set when its runtime started)" in said
        assert f"BATON_CREDENTIALS is {creds} now, but was set after" in said
        # With the agent's credentials from the start, the same attach works.
        done = run(["-c", f"import baton; print(len(baton.attach(['127.0.0.1:{port}'])))"],
                   env_extra={"BATON_CREDENTIALS": str(creds)})
        assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    finally:
        agent.terminate()
        agent.wait(timeout=60)


LOGGING = """
    import sys, time
    from monarch.actor import Actor, endpoint, this_host
    from monarch.config import configure

    class Talker(Actor):
        @endpoint
        def say(self, text):
            print(text, flush=True)

        @endpoint
        def hang(self):
            time.sleep(3600)

    if __name__ == "__main__":
        if sys.argv[1] == "options":
            loud = this_host().spawn_procs(per_host={"gpus": 2})
            quiet = this_host().spawn_procs(per_host={"gpus": 2})
            import asyncio
            asyncio.run(quiet.logging_option(stream_to_client=False))  # Monarch's form
            loud.logging_option(stream_to_client=True, aggregate_window_sec=0)  # not awaited
            try:
                loud.activate()
            except Exception as e:
                print("activate:", type(e).__name__, "tensor engine" in str(e))
            loud.spawn("t", Talker).say.call("from-loud").get()
            quiet.spawn("t", Talker).say.call("from-quiet").get()
            loud.stop().get()
            quiet.stop().get()
        else:
            configure(enable_log_forwarding=False, stop_actor_timeout="1s")
            procs = this_host().spawn_procs(per_host={"gpus": 1})
            talker = procs.spawn("t", Talker)
            talker.say.call("unseen").get()
            talker.hang.broadcast()
            procs.stop().get()
            print("stopped")
"""


def test_logging_options_and_config_keys_act_on_workers_output_and_stopping(tmp_path):
    script = tmp_path / "talk.py"
    script.write_text(textwrap.dedent(LOGGING))
    done = run(["-m", "baton.monarch", str(script), "options"])
    assert done.returncode == 0, done.stderr
    assert "[procs0 0] from-loud" in done.stdout and "[procs0 1] from-loud" in done.stdout
    assert "from-quiet" not in done.stdout
    assert "activate: UsageError True" in done.stdout
    done = run(["-m", "baton.monarch", str(script), "config"])
    assert done.returncode == 0, done.stderr
    assert "unseen" not in done.stdout and "stopped" in done.stdout
    assert "within 1000 ms" in done.stderr  # the stop waited stop_actor_timeout, not 5 s
    assert "ignored" not in done.stderr
    with pytest.raises(ValueError, match="not a duration"):
        from baton.monarch import config

        config.configure(stop_actor_timeout="soon")
    with pytest.raises(ValueError, match="give a duration of 0 or more"):
        config.configure(process_exit_timeout=-5)
    with pytest.raises(TypeError, match="takes a duration such as '30s', not bool"):
        config.configure(process_exit_timeout=True)
    assert "process_exit_timeout" not in config.get_runtime_config()


class Tidy(baton.Actor):
    def __init__(self, path):
        self.path = path

    @baton.endpoint
    async def ping(self):
        return "pong"

    async def __cleanup__(self, exc):
        import asyncio

        await asyncio.sleep(0)  # an async cleanup runs on the actor's event loop
        with open(self.path, "a") as f:
            f.write(f"{mactor.current_rank().rank} {exc!r}\n")


def test_an_async_cleanup_runs_as_the_actor_stops(tmp_path):
    path = tmp_path / "cleaned"
    procs = baton.this_host().spawn_procs(per_host={"gpus": 2})
    tidy = procs.spawn("tidy", Tidy, str(path))
    assert tidy.ping.call().get(timeout=30).values() == ["pong", "pong"]
    assert not path.exists()
    procs.stop().get(timeout=60)
    assert sorted(path.read_text().splitlines()) == ["0 None", "1 None"]


def test_config_parametrized_tests_run_once_per_setting(tmp_path):
    (tmp_path / "test_cfg.py").write_text(textwrap.dedent("""
        from monarch.config import (get_global_config, get_runtime_config, parametrize_config,
                                    parametrize_config_pointwise)

        SEEN = []

        @parametrize_config(enable_log_forwarding={True, False}, tail_log_lines={10, 20})
        def test_product(tmp_path):
            c = get_global_config()
            SEEN.append((c["enable_log_forwarding"], c["tail_log_lines"]))
            assert tmp_path.exists()  # the test's own fixtures still come

        @parametrize_config_pointwise(stop_actor_timeout=["1s", "2s"], tail_log_lines=[1, 2])
        def test_pointwise():
            c = get_global_config()
            SEEN.append((c["stop_actor_timeout"], c["tail_log_lines"]))

        def test_all_seen_and_restored():
            assert sorted(SEEN[:4]) == [(False, 10), (False, 20), (True, 10), (True, 20)]
            assert SEEN[4:] == [("1s", 1), ("2s", 2)]
            assert get_runtime_config() == {}
    """))
    done = run(["-m", "baton.monarch", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                str(tmp_path / "test_cfg.py")], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout


HOOK_RACE = """
    import os
    import baton

    class Quits(baton.Actor):
        @baton.endpoint
        def quit(self):
            os._exit(0)

    seen = []
    baton.set_supervise(lambda failure: seen.append(failure) or True)
    runtime = baton._runtime.runtime()
    for i in range(10):
        procs = baton.this_host().spawn_procs(per_host={"gpus": 4})
        procs.spawn("q", Quits).quit.broadcast()  # their failures reach the hook meanwhile,
        while len(seen) < 4 * (i + 1):  # while this thread, holding the GIL, takes the
            runtime.show_output("none", True)  # runtime's lock again and again
    print("survived", len(seen), flush=True)
"""


def test_the_controllers_hook_runs_while_the_main_thread_spawns(tmp_path):
    # The runtime takes its hook under its lock; a Python hook copied there once waited for the
    # GIL that the main thread, waiting for that lock to spawn, held: both waited for ever.
    script = tmp_path / "race.py"
    script.write_text(textwrap.dedent(HOOK_RACE))
    done = run([str(script)])
    assert done.returncode == 0 and "survived 40" in done.stdout, done.stderr


def test_a_monarch_program_gets_monarchs_semantics_where_baton_differs(tmp_path):
    import ast

    # A Monarch program of the kinds a new user's trial found going wrong: async actors that
    # spawn and supervise, per-item stream failures, a ValueMesh argument, Future and RDMA
    # spellings.
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "monarch_semantics.py")
    done = run(["-m", "baton.monarch", script], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULTS "))
    got = ast.literal_eval(line[len("RESULTS "):])
    # Spawns inside async endpoints return their meshes; context().actor_instance.proc spawns
    # a sibling in the actor's own proc.
    assert got["spawn_in_async"] == (["pong", "pong"], "pong", True)
    # An async __supervise__ is awaited, and hears the mesh's name and the member's rank.
    assert got["supervise_seen"] == [("leaves", 1, True)]
    # A member's failure is its own item's: the others' replies still come.
    assert got["stream"] == ([0, 2], ["ActorError"])
    # A ValueMesh argument arrives whole; each member picks its own value.
    assert got["value_mesh_arg"] == [("ValueMesh", 0), ("ValueMesh", 1), ("ValueMesh", 2)]
    assert got["as_asyncio"] == 0 and got["bad_timeout"] == "BadTimeout"
    assert got["stop_reason"] is True
    # A destination larger than the buffer takes its bytes; Monarch's batch spelling works.
    assert got["rdma"] == (list(range(8)) + [0] * 8, list(range(8)), True)
    assert got["supervision_error"] == (True,)
