"""monarch.job and monarch.spmd over baton, for real: agents started as processes of this
machine and reused by a later run through the cached job file, torchrun's environment set in
every proc, scripts run by run_spmd, and an actor failed by a BaseException."""

import os
import subprocess
import sys
import textwrap

import pytest

import baton
from baton.monarch import job as mjob
from baton.monarch import spmd

HERE = os.path.dirname(os.path.abspath(__file__))


def run_monarch(script, *args, cwd=None):
    """(exit status, stdout, stderr) of `python -m baton.monarch script args...`."""
    env = dict(os.environ)
    env.pop("BATON_MONARCH", None)
    env.pop("BATON_CREDENTIALS", None)
    p = subprocess.run([sys.executable, "-m", "baton.monarch", str(script), *args],
                       capture_output=True, text=True, env=env, cwd=cwd, timeout=180)
    return p.returncode, p.stdout, p.stderr


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


PROCESS_JOB = """
    import os, sys
    from monarch.actor import Actor, current_rank, endpoint
    from monarch.job import ProcessJob, job_load

    class Where(Actor):
        @endpoint
        def agent(self):
            return os.getppid()  # the host agent that started this proc

    if __name__ == "__main__":
        cache = sys.argv[1]
        if sys.argv[2] == "kill":
            job_load(cache).kill()
            sys.exit(0)
        job = ProcessJob({"trainers": 2, "loaders": 1})
        state = job.state(cached_path=cache)
        procs = state.trainers.spawn_procs(per_host={"gpus": 2})
        agents = procs.spawn("where", Where).agent.call().get(timeout=60).values()
        loaders = state.loaders.spawn_procs(per_host={"gpus": 1})
        loader = loaders.spawn("where", Where).agent.call().get(timeout=60).values()
        print("extent", dict(procs.extent), "agents", sorted(set(agents)), "loader", loader,
              "id", job.apply_id)
"""


def test_a_process_job_runs_meshes_of_agent_hosts_and_a_later_run_reuses_them(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROCESS_JOB))
    cache = tmp_path / ".monarch" / "job_state.pkl"
    try:
        code, first, err = run_monarch(script, str(cache), "run", cwd=tmp_path)
        assert code == 0, err
        assert "extent {'hosts': 2, 'gpus': 2}" in first
        agents = eval(first.split("agents ", 1)[1].split(" loader")[0])
        loader = eval(first.split("loader ", 1)[1].split(" id")[0])
        assert len(agents) == 2 and len(loader) == 1 and loader[0] not in agents
        assert all(alive(pid) for pid in agents + loader)  # they outlive the program
        # A second run finds the job in its cache and uses the same agents (and allocation id).
        code, second, err = run_monarch(script, str(cache), "run", cwd=tmp_path)
        assert code == 0, err
        assert second.split("agents ", 1)[1] == first.split("agents ", 1)[1]
    finally:
        code, _, err = run_monarch(script, str(cache), "kill", cwd=tmp_path)
    assert code == 0, err
    for pid in agents + loader:
        assert not alive(pid)


def test_a_cached_job_that_cannot_run_the_spec_is_replaced(tmp_path):
    cache = tmp_path / "state.pkl"
    first = mjob.ProcessJob({"a": 1})
    first.state(cached_path=str(cache))
    try:
        pids = list(first._pids)
        other = mjob.ProcessJob({"a": 1, "b": 1})  # another spec: the cached job is ended
        state = other.state(cached_path=str(cache))
        assert state.b is not None and not any(alive(p) for p in pids)
        assert mjob.job_load(str(cache))._meshes == {"a": 1, "b": 1}
    finally:
        first.kill()
        mjob.job_load(str(cache)).kill()


def test_a_local_job_is_this_host_under_each_name_and_says_which_names_it_has(tmp_path):
    job = mjob.LocalJob(hosts=("trainers", "dataloaders"))
    state = job.state(cached_path=None)
    procs = state.trainers.spawn_procs(per_host={"gpus": 2})
    assert procs.extent == baton.Extent(["gpus"], [2])
    with pytest.raises(AttributeError, match="no host mesh 'evaluators'.*dataloaders, trainers"):
        state.evaluators
    assert job.active and job.apply_id
    procs.stop().get(timeout=60)
    with pytest.raises(baton.UsageError, match="mesh name: number of hosts"):
        mjob.ProcessJob(["trainers"])


class Env(baton.Actor):
    @baton.endpoint
    def env(self):
        keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "MASTER_ADDR", "MASTER_PORT")
        return {k: os.environ.get(k) for k in keys}


def test_torch_elastic_env_is_set_in_every_proc_from_its_place():
    procs = baton.this_host().spawn_procs(per_host={"hosts": 2, "gpus": 3})
    spmd.setup_torch_elastic_env(procs)
    got = procs.spawn("env", Env).env.call().get(timeout=60).values()
    masters = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in got}
    assert len(masters) == 1 and int(next(iter(masters))[1]) > 0
    for r, e in enumerate(got):
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"],
                e["GROUP_RANK"]) == (str(r), str(r % 3), "6", "3", str(r // 3))
    with pytest.raises(baton.UsageError, match="both master_addr and master_port"):
        spmd.setup_torch_elastic_env(procs, master_addr="h")
    procs.stop().get(timeout=60)


def test_an_spmd_actor_runs_a_script_as_main_in_each_proc(tmp_path):
    out = tmp_path / "ranks"
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        if __name__ == "__main__":
            with open(os.path.join({str(out)!r}, os.environ["RANK"]), "w") as f:
                f.write(" ".join([os.environ["WORLD_SIZE"], *sys.argv[1:]]))
    """))
    procs = baton.this_host().spawn_procs(per_host={"gpus": 2})
    actors = procs.spawn("spmd", spmd.SPMDActor)
    addr, port = actors.slice(gpus=0).get_host_port.call_one(None).get(timeout=60)
    assert actors.main.call(addr, port, [str(script), "--lr", "0.1"]).get(
        timeout=60).values() == [True, True]
    assert sorted(os.listdir(out)) == ["0", "1"]
    assert (out / "1").read_text() == "2 --lr 0.1"
    procs.stop().get(timeout=60)


def test_run_spmd_runs_a_program_on_every_proc_and_gives_each_exit_status():
    procs = baton.this_host().spawn_procs(per_host={"gpus": 3})
    code = "import os, sys; sys.exit(int(os.environ['RANK']) * int(os.environ['EXTRA']))"
    assert baton.run_spmd(procs, [sys.executable, "-c", code], env={"EXTRA": "0"}).get(
        timeout=60) == [0, 0, 0]
    with pytest.raises(baton.UsageError, match="as a list"):
        baton.run_spmd(procs, "python3 train.py")
    procs.stop().get(timeout=60)


BASE_EXCEPTION = """
    import sys
    import monarch.actor as ma
    from monarch.actor import Actor, endpoint, this_host

    class Quitter(Actor):
        @endpoint
        def quit(self):
            sys.exit(3)

        @endpoint
        async def quit_async(self):
            raise KeyboardInterrupt()

        @endpoint
        def ok(self):
            return "ok"

        def __cleanup__(self, exc):
            why = None if exc is None else str(exc).splitlines()[0]
            sys.stdout.write(f"cleanup {why}\\n")  # one write: two actors' lines never mix
            sys.stdout.flush()

    seen = []
    ma.unhandled_fault_hook = lambda failure: seen.append(failure.report())

    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        for name, ep in (("q1", "quit"), ("q2", "quit_async")):
            mesh = procs.spawn(name, Quitter)
            try:
                getattr(mesh.slice(gpus=0), ep).call_one().get(timeout=60)
            except Exception as e:
                print("caller:", type(e).__name__, str(e).splitlines()[0])
            try:
                mesh.slice(gpus=0).ok.call_one().get(timeout=60)
            except Exception as e:
                print("after:", type(e).__name__)
            print("other:", mesh.slice(gpus=1).ok.call_one().get(timeout=60))
        procs.stop().get(timeout=60)
        print("faults:", len(seen), "SystemExit" in seen[0], "KeyboardInterrupt" in seen[1])
"""


def test_an_endpoint_raising_a_base_exception_fails_its_actor_as_in_monarch(tmp_path):
    script = tmp_path / "quit.py"
    script.write_text(textwrap.dedent(BASE_EXCEPTION))
    code, out, err = run_monarch(script)
    assert code == 0, err
    lines = out.splitlines()
    callers = [x for x in lines if x.startswith("caller:")]
    assert len(callers) == 2 and all("SupervisionError" in x for x in callers), out
    assert "failed its actor" in callers[0] and "SystemExit" in callers[0]
    assert "KeyboardInterrupt" in callers[1]
    assert lines.count("after: SupervisionError") + lines.count("after: UndeliverableError") == 2
    assert lines.count("other: ok") == 2  # the mesh's other member runs on
    assert "faults: 2 True True" in out
    # __cleanup__ ran in each: with the failure where the actor failed, None where it stopped.
    assert out.count("cleanup quit failed its actor: SystemExit: 3") == 1, out
    assert out.count("cleanup quit_async failed its actor: KeyboardInterrupt") == 1
    assert out.count("cleanup None") == 2
