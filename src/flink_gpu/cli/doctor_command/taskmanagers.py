"""How the TaskManagers use a host's GPUs: how many share a host, how many slots share one."""

from __future__ import annotations

import io
import os

from flink_gpu.base.regular_files import read_regular_file
from flink_gpu.cli.doctor_command.findings import Checkup, Finding
from flink_gpu.errors import FileTooLargeError, IllegalConfigurationException, NotARegularFileError
from flink_gpu.flink.configuration import ConfigOption


def taskmanagers_per_host(checkup: Checkup) -> "tuple[int | None, str | None, str | None]":
    """(number, where it comes from, the busiest host) or (None, None, None) when unknown.

    The conf directory's ``workers`` (or legacy ``slaves``) file is read as every user-named file
    is (:func:`~flink_gpu.base.regular_files.read_regular_file`): one that is a FIFO, a directory or too
    large is a warning naming it, and the number is unknown.
    """
    if checkup.args.taskmanagers_per_host is not None:
        return checkup.args.taskmanagers_per_host, "--taskmanagers-per-host", None
    for file_name in ("workers", "slaves"):
        path = os.path.join(checkup.conf_dir, file_name)
        if not os.path.lexists(path):
            continue
        try:
            content = read_regular_file(path, "workers file")
        except OSError as error:
            # ours say what the file is ("is a FIFO (named pipe), ..."); the open's do not
            reason = (
                str(error)
                if isinstance(error, (NotARegularFileError, FileTooLargeError))
                else f"Cannot read the workers file {path}: {error.strerror or error}."
            )
            finding = Finding(
                None,
                "taskmanagers",
                "warning",
                f"{reason} So doctor cannot tell how many TaskManagers share a host.",
                f"Make {path} a regular file with one TaskManager host per line, or pass --taskmanagers-per-host N.",
            )
            if finding not in checkup.findings:  # asked once per GPU resource
                checkup.findings.append(finding)
            return None, None, None
        hosts: "dict[str, int]" = {}
        # lines as a text-mode read splits them (universal newlines)
        for line in io.StringIO(content.decode("utf-8", errors="replace"), newline=None):
            host = line.split("#", 1)[0].strip()
            if host:
                hosts[host] = hosts.get(host, 0) + 1
        if hosts:
            host, most = max(hosts.items(), key=lambda item: item[1])
            return most, path, host
    return None, None, None


def check_slots(checkup: Checkup) -> None:
    try:
        slots = checkup.config.get(ConfigOption("taskmanager.numberOfTaskSlots", int))
    except IllegalConfigurationException as error:
        checkup.add("error", "task-slots", str(error), "Set taskmanager.numberOfTaskSlots to a whole number.")
        return
    if slots is not None and slots > 1:
        checkup.add(
            "note",
            "task-slots",
            f"taskmanager.numberOfTaskSlots is {slots}: the slots "
            "of a TaskManager share its GPUs (every slot sees the same GPU infos), and "
            "picking one by subtask index collides (subtask indices are job-wide).",
            'Give each slot its own GPU with flink_gpu.pyflink.bind_gpus(ctx, "gpu") in '
            "open() (subtasks_per_gpu=k lets k slots share one): docs/flink-cluster.md.",
        )
