"""Jobs from Python, for real: an OpenSSH server on loopback that SshJob reaches with the test's
own key, and a one-node Slurm cluster (munged, slurmctld, slurmd) that SlurmJob allocates from.
Needs root, openssh-server, slurm-wlm and munge (make deps)."""

import contextlib
import gc
import itertools
import os
import re
import signal
import socket
import subprocess

import pytest

import baton
from actors import Counter

AGENT = os.environ.get("BATON_HOST_PROGRAM", "")
CLUSTER = os.environ.get("BATON_SLURM_CLUSTER", "")
HOSTS = itertools.count()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ip(*args):
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"


def remove_namespaces_of_dead_tests():
    """Namespaces (and their veth pairs) that a killed run of these tests left: their subnet
    could be one of ours."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (line.split()[0] for line in listed.splitlines() if line.strip()):
        m = re.fullmatch(r"btpy(\d+)n\d+", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture
def host():
    """Another host for this test: a network namespace joined to this one by a veth pair, its
    address on that link (agents refuse loopback, which other hosts could not reach)."""
    with namespace_host() as made:
        yield made


@contextlib.contextmanager
def namespace_host():
    """A network namespace joined to this one by a veth pair, and its address on that link:
    (name, address); removed after."""
    # Names and a subnet new for each (a namespace's interfaces may outlive it for a moment).
    remove_namespaces_of_dead_tests()
    n = next(HOSTS)
    tag = f"btpy{os.getpid()}n{n}"
    subnet = f"10.201.{os.getpid() % 250}."
    inside, outside = f"{subnet}{4 * n + 2}", f"{subnet}{4 * n + 1}"
    ip("netns", "add", tag)
    try:
        ip("link", "add", tag + "o", "type", "veth", "peer", "name", tag + "i")
        ip("link", "set", tag + "i", "netns", tag)
        ip("addr", "add", outside + "/30", "dev", tag + "o")
        ip("link", "set", tag + "o", "up")
        ip("netns", "exec", tag, "ip", "addr", "add", inside + "/30", "dev", tag + "i")
        ip("netns", "exec", tag, "ip", "link", "set", tag + "i", "up")
        ip("netns", "exec", tag, "ip", "link", "set", "lo", "up")
        yield tag, inside
    finally:
        subprocess.run(["ip", "netns", "del", tag], capture_output=True)  # and its veth pair


@pytest.fixture
def sshd(host, tmp_path):
    """An OpenSSH server on that host, accepting a key made here for this user:
    (address, key)."""
    ns, address = host
    assert os.access("/usr/sbin/sshd", os.X_OK), "no sshd (make deps installs openssh-server)"
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / key)],
                       check=True)
    (tmp_path / "authorized_keys").write_text((tmp_path / "user_key.pub").read_text())
    (tmp_path / "sshd_config").write_text(
        f"ListenAddress {address}\nPort 22\nHostKey {tmp_path / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {tmp_path / 'sshd.pid'}\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege separation directory
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f",
         str(tmp_path / "sshd_config")],
        stderr=subprocess.PIPE,
        text=True,
    )
    said = ""
    for line in server.stderr:  # ready once it says it listens
        said += line
        if "Server listening" in line:
            break
    assert "Server listening" in said, f"sshd did not start: {said}"
    yield address, str(tmp_path / "user_key")
    server.terminate()
    server.wait(timeout=30)


def ssh_options(key, remote_dir, port=0):
    return dict(
        port=port,
        identity_file=key,
        ssh_args=["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
                  "-o", "LogLevel=ERROR"],
        agent=AGENT,
        remote_dir=str(remote_dir),
        agent_port=free_port(),
    )


def test_an_ssh_job_runs_python_actors_on_its_host_and_ends_with_its_block(sshd, tmp_path):
    address, key = sshd
    # A job directory that a controller killed too hard left: the agent removes it as it starts,
    # and says so before the line with its address.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"/tmp/baton-{dead.pid}-pytest"
    os.makedirs(stale, mode=0o700, exist_ok=True)
    options = ssh_options(key, tmp_path / "remote")
    with baton.SshJob([address], **options) as job:
        hosts = job.hosts()
        assert len(hosts) == 1
        procs = hosts.spawn_procs(gpus=2)
        assert procs.shape == {"hosts": 1, "gpus": 2}
        counters = procs.spawn("counters", Counter, 10)
        got = counters.incr.call().get(timeout=60)
        assert got.values() == [11, 11]
        assert [dict(p) for p in got.points()] == [{"hosts": 0, "gpus": 0}, {"hosts": 0, "gpus": 1}]
        pids = set(counters.pid.call().get(timeout=60).values())
        assert len(pids) == 2 and os.getpid() not in pids
        assert not os.path.exists(stale)
        # Where the job's hosts are can be kept for a later run of the program.
        baton.save(hosts, tmp_path / "job.hosts")
        saved = (tmp_path / "job.hosts").read_text().split()
        assert saved == [f"tcp://{address}:{options['agent_port']}"]
    # Leaving the block stopped the procs and ended the agent: the workers are gone.
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(baton.UsageError, match="closed"):
        job.hosts()
    # The agent was copied in once, private to the user, and the credentials were not left.
    left = os.listdir(tmp_path / "remote")
    assert [n for n in left if n.startswith("baton-host-")], left
    assert not [n for n in left if n.startswith("credentials-")], left


def test_a_job_nothing_refers_to_keeps_its_hosts_until_the_jobs_are_ended(sshd, tmp_path):
    address, key = sshd
    hosts = baton.SshJob([address], **ssh_options(key, tmp_path / "remote")).hosts()
    gc.collect()  # the job object is not the user's any more: its hosts must still be there
    procs = hosts.spawn_procs(gpus=1)
    assert procs.spawn("kept", Counter, 1).incr.call_one().get(timeout=60) == 2
    pid = procs.spawn("pids", Counter, 0).pid.call_one().get(timeout=60)
    baton._job.close_all()  # what the program's end does
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_host_ssh_cannot_reach_is_a_job_error_in_sshs_words(sshd, tmp_path):
    address, key = sshd
    options = ssh_options(key, tmp_path / "remote", port=free_port())  # nothing listens there
    with pytest.raises(baton.JobError, match=f"{address}.*[Cc]onnection refused"):
        baton.SshJob([address], **options).hosts()


def test_saving_this_host_or_attaching_a_file_that_is_not_there_says_what_to_do(tmp_path):
    with pytest.raises(baton.UsageError, match="save the hosts of a job"):
        baton.save(baton.this_host(), tmp_path / "job.hosts")
    with pytest.raises(baton.UsageError, match="cannot read .*nothing.hosts.*written by save"):
        baton.attach(tmp_path / "nothing.hosts")
    (tmp_path / "empty.hosts").write_text("# no host\n")
    with pytest.raises(baton.UsageError, match="names no host"):
        baton.attach(str(tmp_path / "empty.hosts"))


def test_job_options_are_checked_by_name_and_kind():
    with pytest.raises(baton.UsageError, match="no option 'nodez'.*nodes"):
        baton.SlurmJob(nodez=2)
    with pytest.raises(baton.UsageError, match="'nodes' takes a int, not str"):
        baton.SlurmJob(nodes="two")
    with pytest.raises(baton.UsageError, match="list of hosts"):
        baton.SshJob("node1")
    with pytest.raises(baton.UsageError, match="no hosts given"):
        baton.SshJob([])
    with pytest.raises(baton.UsageError, match=r"'ssh_args' takes a list.*ssh_args=\['-v'\]"):
        baton.SshJob(["node1"], ssh_args="-v")


def test_kubernetes_manifests_and_pods_that_never_answer():
    job = baton.KubernetesJob(image="registry.example/trainer:1", name="absent", namespace="ml",
                              pods=2, wait=2)
    text = job.manifests()
    assert "kind: StatefulSet" in text and "registry.example/trainer:1" in text
    assert "kind: Secret" in text
    assert job.addresses() == [f"absent-{i}.absent.ml.svc.cluster.local:7070" for i in range(2)]
    with pytest.raises(baton.JobError, match="absent-0.absent.ml.svc.cluster.local"):
        job.hosts()
    with pytest.raises(baton.UsageError, match="no image"):
        baton.KubernetesJob(name="absent").manifests()


@pytest.fixture(scope="module")
def slurm():
    """A one-node Slurm cluster on loopback (slurm_cluster holds it up until its standard input
    ends), with SLURM_CONF naming it while the tests run."""
    assert CLUSTER, "BATON_SLURM_CLUSTER names the slurm_cluster program (CTest sets it)"
    cluster = subprocess.Popen([CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    said = cluster.stdout.readline()
    assert said.startswith("SLURM_CONF="), "no Slurm cluster (the error is above)"
    os.environ["SLURM_CONF"] = said.strip().split("=", 1)[1]
    yield
    del os.environ["SLURM_CONF"]
    cluster.stdin.close()
    cluster.wait(timeout=60)


def queue():
    """squeue's lines for all jobs ("id state"), empty when none is queued or running."""
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True,
                          check=True).stdout.strip()


def drained(seconds):
    """Whether the queue empties within `seconds` (Slurm ends a cancelled job in its time)."""
    import time

    deadline = time.monotonic() + seconds
    while queue():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_slurm_job_allocates_a_node_runs_python_actors_and_leaves_nothing_queued(slurm):
    with baton.SlurmJob(nodes=1, partition="debug", time="10:00", agent=AGENT,
                        agent_port=free_port()) as job:
        procs = job.hosts().spawn_procs(gpus=2)
        assert job.id and f"{job.id} RUNNING" in queue()
        assert procs.shape == {"hosts": 1, "gpus": 2}
        counters = procs.spawn("counters", Counter, 1)
        assert counters.incr.call().get(timeout=60).values() == [2, 2]
        assert counters.slice(gpus=1).incr.call_one().get(timeout=60) == 3
        pids = set(counters.pid.call().get(timeout=60).values())
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert drained(30), queue()


def test_a_partition_slurm_does_not_have_is_a_job_error_in_slurms_words(slurm):
    job = baton.SlurmJob(nodes=1, partition="nosuch", time="10:00", agent=AGENT,
                         agent_port=free_port())
    with pytest.raises(baton.JobError, match="(?is)invalid partition.*partition option"):
        job.hosts()
    job.close()
    assert drained(30), queue()


def test_ctrl_c_at_a_controller_with_a_slurm_job_leaves_no_job_and_no_worker(slurm):
    from test_process import finish, gone_within, read_pids, start

    proc = start("slurm", str(free_port()))
    pids = read_pids(proc)
    assert len(pids) == 2 and queue(), "the job runs, with its two workers"
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, 60)
    assert proc.returncode == -signal.SIGINT, err
    assert err.count("KeyboardInterrupt") == 1 and err.count("Traceback") == 1, err
    assert gone_within(pids, 30), "a worker outlived its interrupted controller"
    assert drained(60), queue()
