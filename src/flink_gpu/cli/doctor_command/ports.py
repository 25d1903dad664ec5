"""Whether the ports a cluster of this configuration binds on this host are free.

A cluster that was never stopped (a script killed before its ``stop-cluster.sh``) keeps them, and
the next ``start-cluster.sh`` of the same configuration fails with a ``BindException`` that only
Flink's log shows. The listening sockets are read from ``/proc/net/tcp`` and ``tcp6`` (this
network namespace, any address), their holders from ``/proc/<pid>/fd``; nothing is bound. A port that the
running JobManager or TaskManager of the configuration being checked holds (its ``--configDir`` is that
directory) is as expected: doctor run beside its own cluster.
"""

from __future__ import annotations

import os

from flink_gpu.cli._output import process_cmdline, short_command
from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.errors import IllegalConfigurationException

#: (key, Flink's default, what binds it, a key that overrides it when set). A port of 0, a range or
#: a list is chosen free by Flink at start-up and is not checked.
PORT_KEYS = (
    ("jobmanager.rpc.port", 6123, "the JobManager's RPC", None),
    ("rest.port", 8081, "the REST API and web UI", "rest.bind-port"),
    ("blob.server.port", 0, "the JobManager's blob server", None),
    ("taskmanager.rpc.port", 0, "the TaskManager's RPC", None),
    ("taskmanager.data.port", 0, "the TaskManager's data exchange", None),
)

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column

# the main classes of Flink's processes, as their command lines name them
_ROLES = (
    ("org.apache.flink.runtime.taskexecutor.TaskManagerRunner", "a Flink TaskManager"),
    ("ClusterEntrypoint", "a Flink JobManager"),
    ("org.apache.flink.", "a Flink process"),
)


def listening_ports() -> "dict[int, set[int]]":
    """Per local TCP port that a socket listens on, the inodes of those sockets."""
    found: "dict[int, set[int]]" = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == _LISTEN:
                port = int(fields[1].rsplit(":", 1)[1], 16)
                found.setdefault(port, set()).add(int(fields[9]))
    return found


def socket_holders(inodes: "set[int]") -> "list[int]":
    """The pids that have one of the sockets ``inodes`` open (those this user may look into)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                    holders.append(int(entry))
                    break
            except OSError:
                continue
    return sorted(holders)


def flink_process(pid: int) -> "tuple[str, str | None] | None":
    """(its role, its configuration directory) of a Flink process, None for any other process.

    Flink's scripts start every JVM with ``--configDir <FLINK_CONF_DIR>`` after the main class (bin/jobmanager.sh,
    taskmanager.sh); a relative one is the JVM's working directory's. The directory is None when the
    command line names none or the working directory cannot be read (another user's process)."""
    argv = process_cmdline(pid)
    if argv is None:
        return None
    role = next((role for marker, role in _ROLES if any(marker in arg for arg in argv)), None)
    if role is None:
        return None
    conf_dir = None
    for i, arg in enumerate(argv):
        if arg == "--configDir" and i + 1 < len(argv):
            conf_dir = argv[i + 1]
        elif arg.startswith("--configDir="):
            conf_dir = arg.partition("=")[2]
    if conf_dir and not os.path.isabs(conf_dir):
        try:
            conf_dir = os.path.normpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), conf_dir))
        except OSError:
            conf_dir = None
    return role, conf_dir or None


def describe_holder(pid: int) -> str:
    """``pid N (a Flink JobManager of the configuration DIR)`` or ``pid N (its command)``."""
    flink = flink_process(pid)
    if flink is not None:
        role, conf_dir = flink
        return f"pid {pid} ({role}" + (f" of the configuration {conf_dir})" if conf_dir else ")")
    argv = process_cmdline(pid)
    return f"pid {pid}" if argv is None else f"pid {pid} ({short_command(argv, 60)})"


def _of_configuration(pid: int, conf_dir: str) -> bool:
    """Whether ``pid`` is a Flink process started with the configuration directory ``conf_dir``."""
    flink = flink_process(pid)
    if flink is None or flink[1] is None:
        return False
    try:
        return os.path.samefile(flink[1], conf_dir)
    except OSError:  # gone, or not a directory of this mount namespace
        return False


def _fixed_port(value: object) -> "int | None":
    """The one port a value names; None for 0 (any free one), a range, a list or junk."""
    text = str(value).strip()
    if not text.isdigit():
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def check_ports(checkup: Checkup) -> None:
    config = checkup.config
    listening = None
    for key, default, what, override in PORT_KEYS:
        if override is not None and config.contains(override):
            key = override
        try:
            value = config.get_string(key, str(default))
        except IllegalConfigurationException:
            continue  # a value too long to be one: other checks name it
        port = _fixed_port(value)
        if port is None:
            continue
        if listening is None:
            listening = listening_ports()
        if port not in listening:
            continue
        holders = socket_holders(listening[port])
        held_by = (
            ", ".join(describe_holder(pid) for pid in holders) if holders else "a process this user cannot look into"
        )
        if holders and all(_of_configuration(pid, checkup.conf_dir) for pid in holders):
            # doctor run beside the cluster it checks: its own JobManager or TaskManager holds the port
            checkup.add(
                "ok",
                "ports",
                f"Port {port} ({key}, {what}) is held by this configuration's running cluster: {held_by}; "
                "a second start-cluster.sh with it fails until bin/stop-cluster.sh stops that one.",
            )
            continue
        flink = [pid for pid in holders if flink_process(pid) is not None]
        checkup.add(
            "warning",
            "ports",
            f"Port {port} ({key}, {what}) is already in use on this host, by {held_by}: a cluster "
            f"started with this configuration here fails with a BindException (in its log only).",
            (
                "If that is this configuration's running cluster, nothing is wrong. Else stop that "
                "cluster (bin/stop-cluster.sh with its FLINK_CONF_DIR"
                + (f", or kill {' '.join(map(str, flink))}" if flink else "")
                + f"), or set {key} to a free port."
            ),
        )
