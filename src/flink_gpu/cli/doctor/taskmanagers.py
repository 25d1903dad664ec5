"""How the TaskManagers use a host's GPUs: how many share a host, how many slots share one."""

from __future__ import annotations

import os

from flink_gpu.cli.doctor.findings import Checkup
from flink_gpu.config import ConfigOption
from flink_gpu.errors import IllegalConfigurationException


def taskmanagers_per_host(checkup: Checkup):
    """(number, where it comes from, the busiest host) or (None, None, None) when unknown."""
    if checkup.args.taskmanagers_per_host is not None:
        return checkup.args.taskmanagers_per_host, "--taskmanagers-per-host", None
    for file_name in ("workers", "slaves"):
        path = os.path.join(checkup.conf_dir, file_name)
        if os.path.isfile(path):
            hosts: "dict[str, int]" = {}
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
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
        checkup.add("error", "task-slots", str(error), "Set taskmanager.numberOfTaskSlots to a "
                    "whole number.")
        return
    if slots is not None and slots > 1:
        checkup.add("note", "task-slots", f"taskmanager.numberOfTaskSlots is {slots}: the slots "
                    "of a TaskManager share its GPUs (every slot sees the same GPU infos); give "
                    "each slot its own GPU in your operator, e.g. by subtask index.")
