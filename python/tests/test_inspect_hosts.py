"""Looking inside a job whose procs run on other hosts: two network namespaces, each with its
own address and a host agent (baton-host), three procs on them, a Python actor of one blocked in
time.sleep. `baton ls` shows the procs by host, and `baton stack` shows the sleeping line on the
thread that runs the actor, read from its own host through the job's links. Needs root and
iproute2 (make deps)."""

import json
import os
import subprocess
import sys
import time
from typing import Any, List

from test_jobs import AGENT, free_port, namespace_host

HERE = os.path.dirname(os.path.abspath(__file__))

CONTROLLER = """
import sys
import baton
from actors import Sleeper

flag, first, second = sys.argv[1:]
both = baton.attach([first, second])
procs = both.spawn_procs({"gpus": 1})  # a proc on each host
more = baton.attach([first]).spawn_procs({"gpus": 1})  # and a second on the first host
sleepers = procs.spawn("sleeper", Sleeper)
napping = sleepers.slice(hosts=1).nap_until.call_one(flag)
print("ready", flush=True)
print("napped in", napping.get(timeout=300), flush=True)
more.stop().get(timeout=60)
procs.stop().get(timeout=60)
"""


def start_agent(ns: str, address: str, creds: str, cache: str) -> "tuple[subprocess.Popen, str]":
    port = free_port()
    agent = subprocess.Popen(
        ["ip", "netns", "exec", ns, AGENT, "--credentials", creds, "--advertise", address,
         "--port", str(port), "--cache", cache],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert agent.stdout is not None
    # Ready once it says it serves (its admin API's line may come before it listens).
    said = ""
    while "serving at" not in said:
        line = agent.stdout.readline()
        assert line, f"the agent ended before it served: {said}"
        said += line
    assert f":{port}" in said, said
    return agent, f"{address}:{port}"


def cli(job: subprocess.Popen, *args: str) -> Any:
    exe = os.environ.get("BATON_CLI", "baton")
    run = subprocess.run(
        [exe, "--job", str(job.pid), *args], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_three_procs_on_two_hosts_show_by_host_with_a_python_actors_sleeping_line(tmp_path):
    assert AGENT, "BATON_HOST_PROGRAM names baton-host (CTest sets it)"
    creds = str(tmp_path / "credentials")
    subprocess.run([AGENT, "--make-credentials", creds], check=True, capture_output=True)
    flag = tmp_path / "wake"
    agents: List[subprocess.Popen] = []
    job = None
    with namespace_host() as (ns0, addr0), namespace_host() as (ns1, addr1):
        try:
            a0, at0 = start_agent(ns0, addr0, creds, str(tmp_path / "cache0"))
            agents.append(a0)
            a1, at1 = start_agent(ns1, addr1, creds, str(tmp_path / "cache1"))
            agents.append(a1)
            env = dict(os.environ, BATON_CREDENTIALS=creds)
            paths = env.get("PYTHONPATH", "").split(os.pathsep)
            env["PYTHONPATH"] = os.pathsep.join([HERE] + paths)
            job = subprocess.Popen(
                [sys.executable, "-c", CONTROLLER, str(flag), at0, at1],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            assert job.stdout is not None
            assert job.stdout.readline().strip() == "ready"

            def sleepers_running(listed: Any) -> bool:
                sleepers = [a for a in listed["actors"] if a["id"].endswith("/sleeper[0]")]
                return len(sleepers) == 2 and all(a["status"] == "running" for a in sleepers)

            deadline = time.monotonic() + 60
            listed = cli(job, "ls", "--json")
            while not sleepers_running(listed) and time.monotonic() < deadline:
                listed = cli(job, "ls", "--json")  # their workers start on their hosts
            workers = [p for p in listed["procs"] if not p["controller"]]
            assert len(workers) == 3, workers
            assert all(p["state"] == "running" for p in workers), workers
            by_host: dict = {}
            for p in workers:
                by_host.setdefault(p["host"], []).append(p["name"])
            assert len(by_host) == 2, by_host  # each proc names the agent of its host
            assert sorted(len(v) for v in by_host.values()) == [1, 2], by_host
            assert all(addr0 in h or addr1 in h for h in by_host), by_host
            sleepers = [a for a in listed["actors"] if a["id"].endswith("/sleeper[0]")]
            assert len(sleepers) == 2 and all(a["type"] == "Sleeper" for a in sleepers), [
                (a["id"], a["type"], a["status"]) for a in listed["actors"]
            ]

            # The sleeping actor's thread, from its own host: its Python line, marked with it.
            deadline = time.monotonic() + 60
            thread: dict = {}
            proc = ""
            while not thread and time.monotonic() < deadline:
                for p in cli(job, "stack", "--json"):
                    for t in p["threads"]:
                        if any("in nap_until" in f for f in t["python"]):
                            thread, proc = t, p["proc"]
            assert thread, "no thread of the job showed Sleeper.nap_until"
            line = next(f for f in thread["python"] if "in nap_until" in f)
            assert "time.sleep(0.05)  # the line its stack shows" in line
            assert any(a.startswith(proc + "/sleeper[0]: endpoint Sleeper.nap_until for")
                       for a in thread["actors"]), thread
            assert thread["native"], "its native stack too"
            host_of = {p["name"]: p["host"] for p in workers}
            assert addr1 in host_of[proc], (proc, host_of)  # on the second host, as called

            flag.write_text("wake up")
            assert job.stdout.readline().startswith("napped in ")
            assert job.wait(timeout=120) == 0
        finally:
            if job is not None and job.poll() is None:
                job.kill()
                job.wait()
            for a in agents:
                a.kill()
                a.wait(timeout=30)
