"""monarch.job: Monarch's job classes are not mapped onto baton's jobs yet; each name is
importable and says what to use instead."""

from ._unsupported import Unsupported


def _job(name):
    return Unsupported(
        f"monarch.job.{name}",
        "Monarch's job classes are not supported by baton yet: use baton.SshJob, "
        "baton.SlurmJob or baton.KubernetesJob (job.hosts() gives a HostMesh)",
    )


DEFAULT_JOB_PATH = _job("DEFAULT_JOB_PATH")
exec_command = _job("exec_command")
JobTrait = _job("JobTrait")
job_load = _job("job_load")
job_loads = _job("job_loads")
JobState = _job("JobState")
load_current_job = _job("load_current_job")
LocalJob = _job("LocalJob")
MeshAdminConfig = _job("MeshAdminConfig")
PortForwarder = _job("PortForwarder")
ProcessJob = _job("ProcessJob")
set_current_job = _job("set_current_job")
shell = _job("shell")
SlurmJob = _job("SlurmJob")
TelemetryConfig = _job("TelemetryConfig")
KubernetesJob = _job("KubernetesJob")
SSHJob = _job("SSHJob")

__all__ = [
    "DEFAULT_JOB_PATH", "exec_command", "JobTrait", "job_load", "job_loads", "JobState",
    "load_current_job", "LocalJob", "MeshAdminConfig", "PortForwarder", "ProcessJob",
    "set_current_job", "shell", "SlurmJob", "TelemetryConfig", "KubernetesJob", "SSHJob",
]
