"""The bundled NVML simulator: a ``libnvidia-ml.so.1`` of our own, built against NVIDIA's ``nvml.h``.

It lets tests, demos and CI run the real native path on a host without a GPU. Point a process at
it through its environment (NVML is initialised once per process, so choose before the first use)::

    env = {**os.environ, **simulator.environment(devices=4)}
    subprocess.run(["flink-gpu-discovery", "2"], env=env)

    simulator.run(["python", "my_job.py"], spec={"devices": [{"name": "NVIDIA H100"}, {"fault": "GPU_IS_LOST"}]})

The simulator reads ``FLINK_GPU_SIM_DEVICES`` (a count, default 4), ``FLINK_GPU_SIM_SPEC`` (a JSON
file, below) or ``FLINK_GPU_SIM_PROFILE`` (the name of a machine profile shipped with it, a spec file
from real machines' captures: :func:`profiles`; not together with ``FLINK_GPU_SIM_SPEC``, and either
one takes precedence over ``FLINK_GPU_SIM_DEVICES``), and ``FLINK_GPU_SIM_INIT_ERROR`` (an NVML
return code for ``nvmlInit``)::

    simulator.run(["flink-gpu-discovery", "2"], profile="h100-hgx-8")

Spec keys (every one optional; null counts as absent):

* ``init_error``: the NVML return code of ``nvmlInit``; ``driver_version``: its version string.
* ``process_struct``: ``"v2"`` (default: a current driver, with the versioned
  ``nvmlDeviceGetRunningProcessDetailList``, four-field ``*_v3`` process queries and
  ``nvmlDeviceGetTemperatureV``) or ``"r535"`` (a driver of the R535 era: no detail list,
  ``*_v3`` filling five-field entries, only the original ``nvmlDeviceGetTemperature``). Each is its own
  build of the library (:func:`library_path`); :func:`environment` picks the one the spec names.
* ``devices``: a list of objects, one per GPU, with

  * ``uuid``, ``name``, ``pci_bus_id`` (text), ``memory_total`` (bytes), ``minor_number``;
  * ``fault``: ``NO_PERMISSION`` (the handle is refused) or ``GPU_IS_LOST`` (every query, the
    live readings too);
  * ``memory_used`` (bytes, at most ``memory_total``; free is the rest) and ``memory_reserved``
    (bytes the driver keeps: ``nvmlDeviceGetMemoryInfo_v2`` answers them as reserved, the v1
    query counts them as used, as drivers since R510 do; default 0);
  * ``cpu_affinity``: the GPU's local CPUs as a Linux cpulist such as ``"0-15,32-47"`` (CPUs
    below 4096; absent: the query answers NOT_SUPPORTED);
  * ``compute_mode``: ``default``, ``exclusive_thread``, ``prohibited`` or ``exclusive_process``;
  * ``health``: an object with ``inforom_corrupted``, ``row_remap_failure``,
    ``row_remap_pending``, ``retired_pages_pending``, ``ecc_enabled`` (default true; booleans),
    ``ecc_uncorrected`` (the volatile uncorrectable ECC error count), ``recovery_action``
    (``none``, ``gpu_reset``, ``node_reboot``, ``drain_p2p``, ``drain_and_reset``,
    ``recover_imex_domain``, ``bus_reset``, ``system_reboot``, or a whole number: a value a newer
    driver may have), ``state_error`` (``GPU_IS_LOST`` or ``RESET_REQUIRED``: what every state
    query and live reading answers while the GPU's identity still reads), only while the file
    ``state_error_when_exists`` names exists when it is given (a test creates it: a GPU falling
    off the bus mid-run), and ``lost_handle_when_exists`` (a path: while that file exists
    ``nvmlDeviceGetHandleByIndex`` answers ``GPU_IS_LOST``: a GPU gone from the bus);
  * ``fabric``: the GPU's NVLink fabric registration (an NVSwitch system), an object with
    ``state`` (``not_supported``, ``not_started``, ``in_progress``, ``completed``: the default),
    ``status`` (the NVML return code of a completed registration, default 0), ``health_summary``
    (``not_supported``: the default, ``healthy``, ``unhealthy``, ``limited_capacity``) and
    ``struct`` (``v3``: the default, ``v2``: a driver refusing v3, ``v1``: one with only
    ``nvmlDeviceGetGpuFabricInfo``); without it every fabric query answers NOT_SUPPORTED (PCIe);
  * ``processes``: a list of ``{"pid": N, "used_memory": bytes (absent: not available), "kind":
    "compute" | "graphics" | "mps"}`` (pids are reported as given, like the host pids NVML gives);
  * ``utilization`` (%, 0..100), ``temperature`` (°C, 0..200) and ``power`` (W, to the milliwatt,
    e.g. 250.5): the GPU's live readings pinned. Absent, they change over time: each follows the
    GPU's load, a triangle wave of period 60 s on the host's monotonic clock (the same in every
    process; GPU i runs 7·i s ahead), giving utilization 0..100 %, temperature 30..80 °C and power
    50..700 W. A MIG device answers none of the three (NOT_SUPPORTED, as NVML does on a MIG
    handle), and a GPU in MIG mode no utilization;
  * ``not_supported`` and ``no_permission``: lists of query names that answer NOT_SUPPORTED or
    NO_PERMISSION: ``inforom``, ``remapped_rows``, ``ecc_mode``, ``ecc_errors``,
    ``field_values``, ``retired_pages``, ``memory``, ``memory_v2``, ``compute_mode``,
    ``cpu_affinity``, ``compute_processes``, ``graphics_processes``, ``mps_processes``,
    ``process_detail_list``, ``processes`` (the three kinds), ``utilization``, ``temperature``,
    ``power``, ``temperature_v`` (``nvmlDeviceGetTemperatureV`` alone: a driver that exports it
    but refuses it), ``fabric`` and ``persistence_mode``;
  * ``persistence_mode``: ``enabled`` (default) or ``disabled``, what
    ``nvmlDeviceGetPersistenceMode`` answers; disabled, the GPU's first handle in a process costs
    ``latency_ms.first_handle_without_persistence`` (the driver initialises the GPU);
  * ``mig``: the GPU's Multi-Instance GPU layout, an object with ``mode`` (``enabled`` or
    ``disabled``, default disabled), ``pending`` (the mode after a reset; default the current
    one), ``max_devices`` (slots, 0..64, default 7) and ``instances``: a list of ``{"slot": N
    (required, below max_devices, each once), "uuid", "memory_total" (default the GPU's memory
    over max_devices), "gi", "ci"}`` plus the state keys above (``memory_used``, ``processes``,
    ...) answered on that MIG device's handle. Instances need mode ``enabled``.

* ``unprivileged``: true for a caller without root: a GPU in MIG mode answers its own memory
  queries NO_PERMISSION (its MIG devices still answer theirs).

The driver model (a simulator that behaves like a driver, not one that answers in a microsecond):

* ``latency_ms``: ``{family: milliseconds}`` (fractional, 0..3600000; default 0), the time each
  call of a query family spends in the driver. The families (:data:`QUERY_FAMILIES`): ``init``
  (``nvmlInit*``, ``nvmlShutdown``), ``static`` (count, uuid, name, PCI, minor number, index,
  versions), ``handle`` (``nvmlDeviceGetHandleByIndex*``), ``processes`` (every process list),
  ``power``, ``memory``, ``utilization``, ``temperature``, ``inforom``, ``remapped_rows``,
  ``ecc``, ``field_values``, ``fabric``, ``retired_pages``, ``compute_mode``, ``cpu_affinity``,
  ``mig``, ``persistence_mode``; and ``first_handle`` (a GPU's first handle in a process; default
  ``handle``) and ``first_handle_without_persistence`` (the same on a GPU whose persistence mode is
  disabled; default ``first_handle``).
* ``driver_lock``: true (default): every call holds one process-wide lock for its whole duration,
  latency included, so that concurrent callers in a process wait for each other as on a real driver;
  false: they do not.
* ``hang``: a list of ``{"query": family, "device": GPU index (one of ``devices``; absent: any call of the family),
  "while_exists": path}``: such a call blocks while the file exists (polled every millisecond,
  holding the driver lock, as a call stuck in the driver does), then answers normally; another
  process (the test) releases it by removing the file: :class:`hanging` creates and removes it.

:func:`counters` tells what the simulator loaded in this process counted (calls per NVML function
per device, the time the driver lock was held, the wall time since the first ``nvmlInit``);
``environment(counters_file=path)`` makes another process's simulator write the same at
``nvmlShutdown`` and at exit (``FLINK_GPU_SIM_COUNTERS_FILE``), read back with ``counters(path)``.
"""

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:  # both are imported where they are used: a simulated environment needs neither
    import ctypes
    import subprocess

__all__ = [
    "MAX_DEVICES",
    "QUERY_FAMILIES",
    "library_path",
    "environment",
    "read_spec",
    "run",
    "popen",
    "counters",
    "reset_counters",
    "hanging",
    "profiles",
    "profile_path",
]

_FAULTS = ("NO_PERMISSION", "GPU_IS_LOST")
_PROCESS_STRUCTS = ("v2", "r535")
_DEVICE_KEYS = {
    "uuid",
    "name",
    "memory_total",
    "pci_bus_id",
    "minor_number",
    "fault",
    "memory_used",
    "cpu_affinity",
    "compute_mode",
    "health",
    "processes",
    "not_supported",
    "no_permission",
    "mig",
    "utilization",
    "temperature",
    "power",
    "fabric",
    "persistence_mode",
    "memory_reserved",
}
_TOP_KEYS = (
    "init_error",
    "driver_version",
    "devices",
    "process_struct",
    "unprivileged",
    "driver_lock",
    "latency_ms",
    "hang",
)
#: The query families of ``latency_ms`` and ``hang`` (csrc/simulator: each NVML export belongs to one).
QUERY_FAMILIES = (
    "init",
    "static",
    "handle",
    "processes",
    "power",
    "memory",
    "utilization",
    "temperature",
    "inforom",
    "remapped_rows",
    "ecc",
    "field_values",
    "fabric",
    "retired_pages",
    "compute_mode",
    "cpu_affinity",
    "mig",
    "persistence_mode",
)
# latencies of the handle family's first call per GPU in a process, with and without persistence mode
_LATENCY_KEYS = QUERY_FAMILIES + ("first_handle", "first_handle_without_persistence")
_MAX_LATENCY_MS = 3600000
_HANG_KEYS = {"query", "device", "while_exists"}
_PERSISTENCE_MODES = ("disabled", "enabled")
_MIG_KEYS = {"mode", "pending", "max_devices", "instances"}
_MIG_MODES = ("disabled", "enabled")
_INSTANCE_KEYS = {
    "slot",
    "uuid",
    "memory_total",
    "gi",
    "ci",
    "memory_used",
    "memory_reserved",
    "cpu_affinity",
    "compute_mode",
    "health",
    "processes",
    "not_supported",
    "no_permission",
    "fabric",
}
# the value rules the simulator itself applies (csrc/simulator/spec.cpp): text, or a
# whole number in [0, limit)
_STRING_KEYS = ("uuid", "name", "pci_bus_id")
_NUMBER_LIMITS = {
    "memory_total": 2**64,
    "minor_number": 2**32,
    "memory_used": 2**64,
    "utilization": 101,
    "temperature": 201,
}
# power: watts to the milliwatt, which NVML answers in an unsigned int
_MAX_POWER_WATTS = (2**32 - 1) / 1000
_COMPUTE_MODES = ("default", "exclusive_thread", "prohibited", "exclusive_process")
_HEALTH_FLAGS = ("inforom_corrupted", "row_remap_failure", "row_remap_pending", "retired_pages_pending", "ecc_enabled")
_RECOVERY_ACTIONS = (
    "none",
    "gpu_reset",
    "node_reboot",
    "drain_p2p",
    "drain_and_reset",
    "recover_imex_domain",
    "bus_reset",
    "system_reboot",
)
_FABRIC_KEYS = {"state", "status", "health_summary", "struct"}
_FABRIC_STATES = ("not_supported", "not_started", "in_progress", "completed")
_FABRIC_SUMMARIES = ("not_supported", "healthy", "unhealthy", "limited_capacity")
_FABRIC_STRUCTS = ("v1", "v2", "v3")
_STATE_ERRORS = ("GPU_IS_LOST", "RESET_REQUIRED")
_PROCESS_KINDS = ("compute", "graphics", "mps")
_QUERIES = (
    "inforom",
    "remapped_rows",
    "ecc_mode",
    "ecc_errors",
    "field_values",
    "retired_pages",
    "memory",
    "memory_v2",
    "compute_mode",
    "cpu_affinity",
    "compute_processes",
    "graphics_processes",
    "mps_processes",
    "process_detail_list",
    "processes",
    "utilization",
    "temperature",
    "power",
    "temperature_v",
    "fabric",
    "persistence_mode",
)
_CPULIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
#: The most GPUs ``devices`` may ask for: the limit csrc/simulator/spec.cpp puts on
#: FLINK_GPU_SIM_DEVICES.
MAX_DEVICES = 4096
_SPEC_WHAT = "simulator spec file"

SpecLike = Union[Mapping[str, Any], str, "os.PathLike[str]"]


def library_path(process_struct: str = "v2") -> str:
    """Absolute path of the simulated ``libnvidia-ml.so.1`` inside the installed package; with
    ``process_struct="r535"`` the build that models a driver of the R535 era."""
    if process_struct not in _PROCESS_STRUCTS:
        raise ValueError(f"process_struct must be one of {_PROCESS_STRUCTS}, got {process_struct!r}.")
    folder = Path(__file__).resolve().parent / "_simulator"
    path = (folder / "r535" if process_struct == "r535" else folder) / "libnvidia-ml.so.1"
    if not path.is_file():
        raise FileNotFoundError(
            f"The NVML simulator is missing from this installation ({path}). Reinstall flink-gpu "
            "(pip install --force-reinstall flink-gpu) or, in a source checkout, build it with "
            "tools/dev_build.sh."
        )
    return str(path)


def _profiles_directory() -> Path:
    # where CMake installs csrc/simulator/profiles, and where the simulator looks for them (beside itself)
    return Path(__file__).resolve().parent / "_simulator" / "profiles"


def profiles() -> "list[str]":
    """The names of the machine profiles shipped with the simulator (``FLINK_GPU_SIM_PROFILE``),
    e.g. ``h100-hgx-8``, ``b200-8``, ``a100-mig``; the README beside them says where each fact
    and figure comes from."""
    return sorted(path.stem for path in _profiles_directory().glob("*.json"))


def profile_path(name: str) -> str:
    """The spec file of the machine profile ``name`` (a copy of it, changed, makes a spec of one's
    own); ``ValueError`` naming the profiles for a name that is none."""
    names = profiles()
    if name not in names:
        raise ValueError(
            f"Simulator profile {name!r} does not exist; use one of {', '.join(names) or 'none'} "
            f"(in {_profiles_directory()})."
        )
    return str(_profiles_directory() / f"{name}.json")


def _check_whole_number(value: Any, limit: int, what: str) -> None:
    """``TypeError`` for a value that is no number, ``ValueError`` for one outside [0, limit)
    or not whole (JSON has one number type: 2.0 is the whole number 2 to the simulator too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Simulator spec {what} (0..{limit - 1}), got {value!r}.")
    if not (0 <= value < limit and float(value).is_integer()):
        raise ValueError(f"Simulator spec {what} (0..{limit - 1}), got {value!r}.")


def _check_power(value: Any, what: str) -> None:
    """A number of watts the simulator answers to the milliwatt (rounded to nearest)."""
    if value is None:
        return
    message = f"Simulator spec {what} must be a number of watts (0..{_MAX_POWER_WATTS}), got {value!r}."
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(message)
    if not (0 <= value and value * 1000 + 0.5 < 2**32):
        raise ValueError(message)


def _check_string(value: Any, what: str) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Simulator spec {what} must be a string, got {value!r}.")


def _check_choice(value: Any, allowed: "tuple[str, ...]", what: str) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"Simulator spec {what} must be one of {', '.join(allowed)}, got {value!r}.")


def _check_object(value: Any, known: "set[str]", what: str) -> None:
    """An object of the spec: ``TypeError`` for another value, ``ValueError`` naming its unknown keys."""
    if not isinstance(value, Mapping):
        raise TypeError(f"Simulator spec {what} must be an object, got {value!r}.")
    bad = set(value) - known
    if bad:
        raise ValueError(f"Simulator spec {what} has unknown keys {sorted(bad)}; known: {sorted(known)}.")


def _check_bool(value: Any, what: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"Simulator spec {what} must be true or false, got {value!r}.")


def _is_cpulist(text: str) -> bool:
    if not _CPULIST.fullmatch(text):
        return False
    for part in text.split(","):
        first, _, last = part.partition("-")
        if int(last or first) < int(first) or int(last or first) >= 4096:
            return False
    return True


def _validate_state(device: Mapping[str, Any], where: str) -> None:
    """The state keys of one device (the module docstring lists them)."""
    used = device.get("memory_used")
    total = device.get("memory_total")
    total = 80 << 30 if total is None else total  # the simulator's default
    if isinstance(used, int) and not isinstance(used, bool) and isinstance(total, int) and used > total:
        raise ValueError(f"Simulator spec {where}.memory_used must not exceed memory_total ({total}), got {used!r}.")
    reserved = device.get("memory_reserved")
    if reserved is not None:
        _check_whole_number(reserved, 2**64, f"{where}.memory_reserved must be a whole number")
        used = 0 if used is None else used
        if isinstance(used, int) and not isinstance(used, bool) and isinstance(total, int) and used + reserved > total:
            raise ValueError(
                f"Simulator spec {where}.memory_used + memory_reserved must not exceed memory_total "
                f"({total}), got {used!r} + {reserved!r}."
            )
    cpus = device.get("cpu_affinity")
    _check_string(cpus, f"{where}.cpu_affinity")
    if cpus is not None and not _is_cpulist(cpus):
        raise ValueError(
            f"Simulator spec {where}.cpu_affinity must be a Linux cpulist of CPUs 0..4095 such as "
            f"'0-15,32-47', got {cpus!r}."
        )
    _check_choice(device.get("compute_mode"), _COMPUTE_MODES, f"{where}.compute_mode")
    health = device.get("health")
    if health is not None:
        if not isinstance(health, Mapping):
            raise TypeError(f"Simulator spec {where}.health must be an object, got {health!r}.")
        known = set(_HEALTH_FLAGS) | {
            "ecc_uncorrected",
            "recovery_action",
            "state_error",
            "state_error_when_exists",
            "lost_handle_when_exists",
        }
        bad = set(health) - known
        if bad:
            raise ValueError(f"Simulator spec {where}.health has unknown keys {sorted(bad)}; known: {sorted(known)}.")
        for key in _HEALTH_FLAGS:
            _check_bool(health.get(key), f"{where}.health.{key}")
        if health.get("ecc_uncorrected") is not None:
            _check_whole_number(
                health["ecc_uncorrected"], 2**64, f"{where}.health.ecc_uncorrected must be a whole number"
            )
        action = health.get("recovery_action")
        if isinstance(action, int) and not isinstance(action, bool):  # a value this build may not know
            _check_whole_number(action, 2**32, f"{where}.health.recovery_action must be a name or a whole number")
        else:
            _check_choice(action, _RECOVERY_ACTIONS, f"{where}.health.recovery_action")
        _check_choice(health.get("state_error"), _STATE_ERRORS, f"{where}.health.state_error")
        for key in ("state_error_when_exists", "lost_handle_when_exists"):
            _check_string(health.get(key), f"{where}.health.{key}")
    fabric = device.get("fabric")
    if fabric is not None:
        _check_object(fabric, _FABRIC_KEYS, f"{where}.fabric")
        _check_choice(fabric.get("state"), _FABRIC_STATES, f"{where}.fabric.state")
        if fabric.get("status") is not None:
            _check_whole_number(fabric["status"], 1000, f"{where}.fabric.status must be an NVML return code")
        _check_choice(fabric.get("health_summary"), _FABRIC_SUMMARIES, f"{where}.fabric.health_summary")
        _check_choice(fabric.get("struct"), _FABRIC_STRUCTS, f"{where}.fabric.struct")
    processes = device.get("processes")
    if processes is not None:
        if not isinstance(processes, (list, tuple)):
            raise TypeError(f"Simulator spec {where}.processes must be a list, got {processes!r}.")
        for j, process in enumerate(processes):
            what = f"{where}.processes[{j}]"
            if not isinstance(process, Mapping):
                raise TypeError(f"Simulator spec {what} must be an object, got {process!r}.")
            bad = set(process) - {"pid", "used_memory", "kind"}
            if bad:
                raise ValueError(
                    f"Simulator spec {what} has unknown keys {sorted(bad)}; known: kind, pid, used_memory."
                )
            if process.get("pid") is None:
                raise ValueError(f"Simulator spec {what}.pid is required.")
            _check_whole_number(process["pid"], 2**32, f"{what}.pid must be a whole number")
            if process.get("used_memory") is not None:
                _check_whole_number(process["used_memory"], 2**64 - 1, f"{what}.used_memory must be a whole number")
            _check_choice(process.get("kind"), _PROCESS_KINDS, f"{what}.kind")
    for key in ("not_supported", "no_permission"):
        names = device.get(key)
        if names is None:
            continue
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n in _QUERIES for n in names):
            raise ValueError(
                f"Simulator spec {where}.{key} must be a list of query names ({', '.join(_QUERIES)}), got {names!r}."
            )


def _validate_mig(device: Mapping[str, Any], where: str) -> None:
    """``devices[i].mig`` (the module docstring)."""
    mig = device.get("mig")
    if mig is None:
        return
    _check_object(mig, _MIG_KEYS, f"{where}.mig")
    _check_choice(mig.get("mode"), _MIG_MODES, f"{where}.mig.mode")
    _check_choice(mig.get("pending"), _MIG_MODES, f"{where}.mig.pending")
    slots = 7 if mig.get("max_devices") is None else mig["max_devices"]
    _check_whole_number(slots, 65, f"{where}.mig.max_devices must be a whole number")
    instances = mig.get("instances")
    if instances is None:
        return
    if not isinstance(instances, (list, tuple)):
        raise TypeError(f"Simulator spec {where}.mig.instances must be a list, got {instances!r}.")
    if instances and mig.get("mode") != "enabled":
        raise ValueError(f"Simulator spec {where}.mig.instances need {where}.mig.mode 'enabled'.")
    seen = set()
    for j, instance in enumerate(instances):
        what = f"{where}.mig.instances[{j}]"
        _check_object(instance, _INSTANCE_KEYS, what)
        if instance.get("slot") is None:
            raise ValueError(f"Simulator spec {what}.slot is required.")
        _check_whole_number(instance["slot"], slots, f"{what}.slot must be a whole number below max_devices")
        if instance["slot"] in seen:
            raise ValueError(f"Simulator spec {what}.slot {instance['slot']} is given twice.")
        seen.add(instance["slot"])
        _check_string(instance.get("uuid"), f"{what}.uuid")
        for key, limit in (("memory_total", 2**64), ("gi", 2**32), ("ci", 2**32)):
            if instance.get(key) is not None:
                _check_whole_number(instance[key], limit, f"{what}.{key} must be a whole number")
        total = instance.get("memory_total")
        if total is None:
            parent = device.get("memory_total")
            total = (80 << 30 if parent is None else parent) // max(slots, 1)
        _validate_state({**instance, "memory_total": total}, what)


def _validate_driver(spec: Mapping[str, Any]) -> None:
    """``driver_lock``, ``latency_ms`` and ``hang`` (the module docstring)."""
    _check_bool(spec.get("driver_lock"), "'driver_lock'")
    latency = spec.get("latency_ms")
    if latency is not None:
        if not isinstance(latency, Mapping):
            raise TypeError(
                f"Simulator spec latency_ms must be an object of query family: milliseconds, got {latency!r}."
            )
        for family, ms in latency.items():
            if family not in _LATENCY_KEYS:
                raise ValueError(
                    f"Simulator spec latency_ms.{family} is not a query family; use {', '.join(_LATENCY_KEYS)}."
                )
            message = (
                f"Simulator spec latency_ms.{family} must be a number of milliseconds (0..{_MAX_LATENCY_MS}), "
                f"got {ms!r}."
            )
            if isinstance(ms, bool) or not isinstance(ms, (int, float)):
                raise TypeError(message)
            if not 0 <= ms <= _MAX_LATENCY_MS:
                raise ValueError(message)
    hangs = spec.get("hang")
    if hangs is None:
        return
    if not isinstance(hangs, (list, tuple)):
        raise TypeError(f"Simulator spec hang must be a list of {{query, device, while_exists}}, got {hangs!r}.")
    devices = spec.get("devices") or []
    for i, hang in enumerate(hangs):
        what = f"hang[{i}]"
        _check_object(hang, _HANG_KEYS, what)
        if hang.get("query") not in QUERY_FAMILIES:
            raise ValueError(
                f"Simulator spec {what}.query must be one of {', '.join(QUERY_FAMILIES)}, got {hang.get('query')!r}."
            )
        if hang.get("device") is not None:
            _check_whole_number(hang["device"], MAX_DEVICES, f"{what}.device must be a GPU index")
            if isinstance(devices, (list, tuple)) and hang["device"] >= len(devices):  # it would never block
                raise ValueError(
                    f"Simulator spec {what}.device {hang['device']!r} is not a GPU of this spec "
                    f"(it has {len(devices)})."
                )
        path = hang.get("while_exists")
        _check_string(path, f"{what}.while_exists")
        if not path:
            raise ValueError(f"Simulator spec {what}.while_exists must name a file (the call blocks while it exists).")


def _validate_spec(spec: Mapping[str, Any]) -> None:
    """The simulator's own rules: ``TypeError`` for a value of the wrong type, ``ValueError`` for
    an unknown key or a value out of range, each naming the key."""
    unknown = set(spec) - set(_TOP_KEYS)
    if unknown:
        raise ValueError(f"Unknown simulator spec keys {sorted(unknown)}; use {', '.join(_TOP_KEYS)}.")
    _validate_driver(spec)
    _check_bool(spec.get("unprivileged"), "'unprivileged'")
    _check_choice(spec.get("process_struct"), _PROCESS_STRUCTS, "'process_struct'")
    if spec.get("init_error") is not None:
        _check_whole_number(spec["init_error"], 1000, "'init_error' must be an NVML error code")
    _check_string(spec.get("driver_version"), "'driver_version'")
    devices = spec.get("devices", [])
    if not isinstance(devices, (list, tuple)):
        raise ValueError("Simulator spec 'devices' must be a list of device objects.")
    for i, device in enumerate(devices):
        if not isinstance(device, Mapping):
            raise ValueError(f"Simulator spec devices[{i}] must be an object, got {device!r}.")
        bad = set(device) - _DEVICE_KEYS
        if bad:
            raise ValueError(
                f"Simulator spec devices[{i}] has unknown keys {sorted(bad)}; known: {sorted(_DEVICE_KEYS)}."
            )
        for key in _STRING_KEYS:
            _check_string(device.get(key), f"devices[{i}].{key}")
        for key, limit in _NUMBER_LIMITS.items():
            if device.get(key) is not None:
                _check_whole_number(device[key], limit, f"devices[{i}].{key} must be a whole number")
        _check_power(device.get("power"), f"devices[{i}].power")
        _check_choice(device.get("persistence_mode"), _PERSISTENCE_MODES, f"devices[{i}].persistence_mode")
        fault = device.get("fault")
        if fault is not None and fault not in _FAULTS:
            raise ValueError(f"Simulator spec devices[{i}] fault {fault!r} is not one of {_FAULTS}.")
        _validate_state(device, f"devices[{i}]")
        _validate_mig(device, f"devices[{i}]")


def read_spec(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The simulator spec in the JSON file ``path``, checked as the simulator checks it.

    Raises ``FileNotFoundError``, ``OSError`` for a path that is not a regular file or is too large
    (:func:`flink_gpu.regular_files.read_regular_file`), or ``ValueError`` naming the file and,
    for a bad value, the key.
    """
    import json

    from flink_gpu.regular_files import read_regular_file

    path = os.fspath(path)
    content = read_regular_file(path, _SPEC_WHAT)
    try:
        spec = json.loads(content)
    except ValueError as error:  # also bytes that are not UTF-8
        raise ValueError(f"cannot read the {_SPEC_WHAT} {path} as JSON: {error}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"The {_SPEC_WHAT} {path} must hold a JSON object, not {type(spec).__name__}.")
    try:
        _validate_spec(spec)
    except (TypeError, ValueError) as error:  # a value of the file: ValueError, naming the file
        raise ValueError(f"{path}: {error}") from None
    return spec


def _process_struct_of_file(path: Union[str, "os.PathLike[str]"]) -> str:
    """The build a spec file asks for; "v2" when it cannot be read (the simulator then says why)."""
    try:
        spec = read_spec(path)
    except (OSError, ValueError):
        return "v2"
    return spec.get("process_struct") or "v2"


def _spec_file(spec: Mapping[str, Any]) -> str:
    import atexit
    import json
    import tempfile

    _validate_spec(spec)
    fd, path = tempfile.mkstemp(prefix="flink-gpu-sim-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
    except BaseException:  # e.g. a value JSON cannot hold: leave no file behind
        _remove_quietly(path)
        raise
    atexit.register(_remove_quietly, path)
    return path


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def environment(
    devices: Optional[int] = None,
    spec: Optional[SpecLike] = None,
    init_error: Optional[int] = None,
    counters_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    profile: Optional[str] = None,
) -> Dict[str, str]:
    """Environment variables that make a new process use the simulator.

    ``devices``: that many identical GPUs (default 4; ``ValueError`` unless a whole number from 0
    to :data:`MAX_DEVICES`). ``spec``: a dict (written to a temporary
    JSON file that lives as long as this process) or the path of a JSON file (which must be a
    regular file; its content is checked by the simulator when NVML starts, or before with
    :func:`read_spec`). ``init_error``: the NVML error code ``nvmlInit`` returns (e.g. 9,
    NVML_ERROR_DRIVER_NOT_LOADED). ``profile``: a machine profile by name (:func:`profiles`;
    ``ValueError`` for another name, or together with ``devices`` or ``spec``). ``counters_file``: where
    the process's simulator writes its :func:`counters` at ``nvmlShutdown`` and at exit (read them with
    ``counters(path)``). A dict spec is checked first: ``TypeError`` for a value of the wrong type,
    ``ValueError`` for an unknown key or a value out of range, both naming the key.
    """
    if sum(given is not None for given in (devices, spec, profile)) > 1:
        raise ValueError("Give one of devices, spec and profile.")
    process_struct = "v2"
    if profile is not None:
        process_struct = _process_struct_of_file(profile_path(profile))
    elif isinstance(spec, Mapping):
        _validate_spec(spec)
        process_struct = spec.get("process_struct") or "v2"
    elif spec is not None:
        process_struct = _process_struct_of_file(spec)
    lib = library_path(process_struct)
    env = {
        "FLINK_GPU_NVML_LIBRARY": lib,
        # For code that opens libnvidia-ml.so.1 by name (pynvml, nvidia-smi-free tools).
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in (os.path.dirname(lib), os.environ.get("LD_LIBRARY_PATH")) if p),
    }
    if profile is not None:
        env["FLINK_GPU_SIM_PROFILE"] = profile  # the simulator finds it beside itself
    elif spec is not None:
        if isinstance(spec, Mapping):
            env["FLINK_GPU_SIM_SPEC"] = _spec_file(spec)
        else:
            from flink_gpu.regular_files import check_regular_file

            check_regular_file(spec, _SPEC_WHAT)
            env["FLINK_GPU_SIM_SPEC"] = os.fspath(spec)
    else:
        count = 4 if devices is None else devices
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_DEVICES:
            raise ValueError(
                f"devices must be a whole number from 0 to {MAX_DEVICES} (the simulated "
                f"host's GPU count), got {devices!r}."
            )
        env["FLINK_GPU_SIM_DEVICES"] = str(count)
    if init_error is not None:
        env["FLINK_GPU_SIM_INIT_ERROR"] = str(int(init_error))
    if counters_file is not None:
        env["FLINK_GPU_SIM_COUNTERS_FILE"] = os.fspath(counters_file)
    return env


def _child_env(
    kwargs: Dict[str, Any],
    devices: Optional[int],
    spec: Optional[SpecLike],
    init_error: Optional[int],
    counters_file: Optional[Union[str, "os.PathLike[str]"]],
    profile: Optional[str],
) -> Dict[str, str]:
    base = kwargs.pop("env", None)
    env = dict(os.environ if base is None else base)
    for key in (
        "FLINK_GPU_SIM_DEVICES",
        "FLINK_GPU_SIM_SPEC",
        "FLINK_GPU_SIM_PROFILE",
        "FLINK_GPU_SIM_INIT_ERROR",
        "FLINK_GPU_SIM_COUNTERS_FILE",
    ):
        env.pop(key, None)
    env.update(environment(devices, spec, init_error, counters_file, profile))
    return env


def run(
    args: Sequence[str],
    *,
    devices: Optional[int] = None,
    spec: Optional[SpecLike] = None,
    init_error: Optional[int] = None,
    counters_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    profile: Optional[str] = None,
    **kwargs: Any,
) -> "subprocess.CompletedProcess[Any]":  # str or bytes output, as kwargs say
    """``subprocess.run(args, **kwargs)`` with the process pointed at the simulator."""
    import subprocess

    return subprocess.run(args, env=_child_env(kwargs, devices, spec, init_error, counters_file, profile), **kwargs)


def popen(
    args: Sequence[str],
    *,
    devices: Optional[int] = None,
    spec: Optional[SpecLike] = None,
    init_error: Optional[int] = None,
    counters_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    profile: Optional[str] = None,
    **kwargs: Any,
) -> "subprocess.Popen[Any]":  # str or bytes streams, as kwargs say
    """``subprocess.Popen(args, **kwargs)`` with the process pointed at the simulator."""
    import subprocess

    return subprocess.Popen(args, env=_child_env(kwargs, devices, spec, init_error, counters_file, profile), **kwargs)


def _loaded_library() -> "ctypes.CDLL":
    """The simulator this process has loaded (either build), by ctypes: the same handle, so the
    same counters."""
    import ctypes

    for process_struct in _PROCESS_STRUCTS:
        try:
            path = library_path(process_struct)
        except FileNotFoundError:
            continue
        try:
            return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:  # this build is not loaded here
            continue
    raise RuntimeError(
        "The NVML simulator is not loaded in this process: point it at the simulator "
        "(flink_gpu.simulator.environment) and use NVML first, or read another process's "
        "counters from its counters_file."
    )


def counters(path: Optional[Union[str, "os.PathLike[str]"]] = None) -> Dict[str, Any]:
    """What the simulator counted since the first ``nvmlInit`` (or :func:`reset_counters`)::

        {"elapsed_ns": wall time, "driver_lock_held_ns": time the driver lock was held,
         "calls": {"nvmlDeviceGetPowerUsage": {"0": 3, "1": 3}, "nvmlInit_v2": {"host": 1}, ...}}

    ``calls`` counts each NVML function per device it was called on: a GPU index, ``"<gpu>:<slot>"``
    for a MIG device, ``"host"`` for a call about no device and ``"invalid"`` for a handle that is
    none. Without ``path``: the simulator loaded in this process (``RuntimeError`` when none is);
    with it: the file a process given ``counters_file`` wrote.
    """
    import ctypes

    if path is not None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return _counters_in(text, f"The counters file {os.fspath(path)!r}")
    library = _loaded_library()
    read = library.flinkgpuSimCounters
    read.argtypes = (ctypes.c_char_p, ctypes.c_uint)
    read.restype = ctypes.c_uint
    needed = read(None, 0)
    while True:
        if needed == 0:
            raise MemoryError("The NVML simulator could not build its counters.")
        buffer = ctypes.create_string_buffer(needed)
        got = read(buffer, needed)
        if got <= needed:
            return _counters_in(buffer.value.decode(), "The NVML simulator loaded in this process")
        needed = got  # more calls were counted in between


def _counters_in(text: str, source: str) -> Dict[str, Any]:
    """The counters ``text`` holds (a JSON object); ``ValueError`` naming ``source`` for anything else."""
    import json

    try:
        counted = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{source} holds no simulator counters: it is not JSON ({error}).") from None
    if not isinstance(counted, dict):
        raise ValueError(f"{source} holds no simulator counters: a JSON {type(counted).__name__}, not an object.")
    return counted


def reset_counters() -> None:
    """Sets the counters of the simulator loaded in this process to zero and their clock to now."""
    _loaded_library().flinkgpuSimResetCounters()


class hanging:
    """``with simulator.hanging(path):`` creates ``path`` and removes it on exit, so that the
    queries a spec's ``hang`` rule names with ``"while_exists": path`` block inside the simulated
    driver (holding its lock) for the duration of the block, in every process using that spec."""

    def __init__(self, path: Union[str, "os.PathLike[str]"]) -> None:
        self.path = os.fspath(path)

    def __enter__(self) -> str:
        with open(self.path, "x"):
            pass
        return self.path

    def release(self) -> None:
        """Lets the blocked queries answer (also at the end of the ``with`` block)."""
        _remove_quietly(self.path)

    def __exit__(self, *exc_info: object) -> None:
        self.release()
