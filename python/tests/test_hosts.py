"""Python on the hosts of a job: two real host agents (baton-host) on this machine, a Python
controller that attaches to them with the job's credentials and runs Python actors on both."""

import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.environ.get("BATON_HOST_PROGRAM", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def agents(tmp_path):
    assert AGENT, "BATON_HOST_PROGRAM names baton-host (CTest sets it)"
    creds = tmp_path / "credentials"
    subprocess.run([AGENT, "--make-credentials", str(creds)], check=True, capture_output=True)
    started = []
    addresses = []
    for i in range(2):
        port = free_port()
        p = subprocess.Popen(
            [AGENT, "--credentials", str(creds), "--advertise", "127.0.0.1", "--port", str(port),
             "--cache", str(tmp_path / f"cache{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # Ready once it says it serves (its admin API's line may come before it listens).
        said = ""
        while "serving at" not in said:
            line = p.stdout.readline()
            assert line, f"the agent ended before it served: {said}"
            said += line
        started.append(p)
        addresses.append(f"127.0.0.1:{port}")
    yield creds, addresses
    for p in started:
        p.kill()
        p.wait(timeout=30)


@pytest.mark.parametrize("keep", [False, True], ids=["stopped", "left_to_the_end"])
def test_a_python_controller_runs_python_actors_on_every_host_of_a_job(agents, keep):
    # Left to the end, the host and proc meshes are module globals the interpreter drops after
    # the runtime closed: they are inert, and the program ends (it hung there before).
    creds, addresses = agents
    env = dict(os.environ, BATON_CREDENTIALS=str(creds))
    env["PYTHONPATH"] = os.pathsep.join([HERE] + env.get("PYTHONPATH", "").split(os.pathsep))
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "hosts_script.py"), *(["--keep"] if keep else []),
         *addresses],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = dict(x.split(" ", 1) for x in out.stdout.splitlines() if " " in x)
    assert lines["shape"] == "{'hosts': 2, 'gpus': 2}"
    assert lines["values"] == "[2, 2, 2, 2]"
    assert lines["points"].count("'hosts': 1") == 2
    assert len(eval(lines["pids"])) == 4  # four worker processes
    assert "done" in out.stdout


def test_attaching_to_an_address_where_no_agent_listens_is_a_job_error_naming_it():
    import baton

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(baton.JobError, match=f"tcp://{address}.*refused"):
        baton.attach([address])
