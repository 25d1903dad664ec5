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

Spec keys (every one optional; null counts as absent; this is their one description, and the
simulator's csrc/simulator/spec.cpp their one checker: an unknown key is an error too):

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
    "compute" | "graphics" | "mps"}`` (pids are reported as given, as host pids, like NVML's: a caller
    outside the initial pid namespace never takes one for a process of its own, docs/design.md §9.1).
    As on a driver, the device's used memory is at least its processes' (1 MiB each at least), and an
    ``mps`` process needs a ``compute`` one on the device (its MPS server);
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
    but refuses it), ``fabric``, ``persistence_mode``, ``topology`` (the common ancestor),
    ``nvlink`` (link state and the link count field), ``nvlink_remote_pci``,
    ``nvlink_remote_type`` (a VM that cannot see the far end) and ``p2p_status`` (a pair query
    refused on either GPU is refused);
  * ``persistence_mode``: ``enabled`` (default) or ``disabled``, what
    ``nvmlDeviceGetPersistenceMode`` answers; disabled, the GPU's first handle in a process costs
    ``latency_ms.first_handle_without_persistence`` (the driver initialises the GPU);
  * ``mig``: the GPU's Multi-Instance GPU layout, an object with ``mode`` (``enabled`` or
    ``disabled``, default disabled), ``pending`` (the mode after a reset; default the current
    one), ``max_devices`` (slots, 0..64, default 7) and ``instances``: a list of ``{"slot": N
    (required, below max_devices, each once), "uuid", "memory_total" (default the GPU's memory
    over max_devices), "gi", "ci"}`` plus the state keys above (``memory_used``, ``processes``,
    ...) answered on that MIG device's handle. Instances need mode ``enabled``.
  * ``pcie``: where the GPU sits on PCIe, an object with ``board`` (a name: GPUs of one board, such
    as a K80's two, are ``INTERNAL`` to each other; absent: a board of its own), ``switches`` (the
    names of the PCIe switches above the GPU, outermost first; default none), ``host_bridge`` (a
    name; default one shared by every GPU) and ``numa_node`` (0..4095, default 0).
    ``nvmlDeviceGetTopologyCommonAncestor`` answers from them: same board ``INTERNAL``; the same
    innermost switch ``SINGLE`` (PIX); a switch shared further up ``MULTIPLE`` (PXB); the same host
    bridge ``HOSTBRIDGE`` (PHB); the same NUMA node ``NODE``; else ``SYSTEM`` (SYS). The GPUs must
    make one tree: a switch has the same path above it wherever it is named, the GPUs of a board
    share their switches, a host bridge is in one NUMA node. Without ``pcie`` a GPU sits on a
    switch of its own under the shared host bridge (PHB between any two such GPUs);
  * ``nvlinks``: the GPU's NVLinks, a list of ``{"active": true | false (default true), "to":
    {"gpu": index} | {"switch": "PCI bus id"}}`` (at most 36). ``to`` is the far end: another GPU
    of the spec (a bridge: that GPU lists as many links back) or an NVSwitch by its bus id (every
    GPU with an active link to the same switch is reachable); absent, it is unknown (a board without
    its bridge: remote device type UNKNOWN, remote PCI info NOT_SUPPORTED). The field
    ``NVML_FI_DEV_NVLINK_LINK_COUNT`` answers the list's length (0 without ``nvlinks``);
    ``nvmlDeviceGetNvLinkState``, ``nvmlDeviceGetNvLinkRemotePciInfo_v2`` and
    ``nvmlDeviceGetNvLinkRemoteDeviceType`` answer per link (INVALID_ARGUMENT for a link beyond
    the list, NOT_SUPPORTED on a GPU without NVLink); ``nvmlDeviceGetP2PStatus`` answers the
    NVLINK capability OK where an active link joins the pair (a bridge active at both ends or a
    switch both reach) and NOT_SUPPORTED otherwise, and the PCIe capabilities OK over NVLink or
    below one CPU, ``IOH_TOPOLOGY_NOT_SUPPORTED`` across NUMA nodes (SYS). A MIG device's handle
    has none of these (NOT_SUPPORTED); a pair query of a GPU with itself is INVALID_ARGUMENT.

* ``unprivileged``: true for a caller without root: a GPU in MIG mode answers its own memory
  queries NO_PERMISSION (its MIG devices still answer theirs).

The driver model (a simulator that behaves like a driver, not one that answers in a microsecond):

* ``latency_ms``: ``{family: milliseconds}`` (fractional, 0..3600000; default 0), the time each
  call of a query family spends in the driver. The families (:data:`QUERY_FAMILIES`): ``init``
  (``nvmlInit*``, ``nvmlShutdown``), ``static`` (count, uuid, name, PCI, minor number, index,
  versions), ``handle`` (``nvmlDeviceGetHandleByIndex*``), ``processes`` (every process list),
  ``power``, ``memory``, ``utilization``, ``temperature``, ``inforom``, ``remapped_rows``,
  ``ecc``, ``field_values``, ``fabric``, ``retired_pages``, ``compute_mode``, ``cpu_affinity``,
  ``mig``, ``persistence_mode``, ``topology`` (``nvmlDeviceGetTopologyCommonAncestor``,
  ``nvmlDeviceGetP2PStatus``), ``nvlink`` (``nvmlDeviceGetNvLinkState`` and the NVLink remote
  queries); and ``first_handle`` (a GPU's first handle in a process; default
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

_PROCESS_STRUCTS = ("v2", "r535")
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
    "topology",
    "nvlink",
)
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


def _check_spec(text: bytes, source: str) -> None:
    """``ValueError`` with the simulator's own message (naming ``source``, the key and what it
    accepts) unless the simulator accepts the spec ``text``: the one checker is the simulator's
    (csrc/simulator/spec.cpp), loaded here by ctypes from its checker build, whose soname is its own,
    so that this process's ``libnvidia-ml.so.1`` stays whatever it would be (a real driver's)."""
    import ctypes

    checker = Path(library_path()).with_name("libflinkgpu-simulator-check.so")
    library = ctypes.CDLL(str(checker))
    check = library.flinkgpuSimCheckSpec
    check.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint)
    check.restype = ctypes.c_uint
    name = source.encode()
    needed = check(text, name, None, 0)
    if needed == 0:
        return
    buffer = ctypes.create_string_buffer(needed)
    check(text, name, buffer, needed)
    raise ValueError(buffer.value.decode(errors="replace"))


def read_spec(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The simulator spec in the JSON file ``path``, checked as the simulator checks it.

    Raises ``FileNotFoundError``, ``OSError`` for a path that is not a regular file or is too large
    (:func:`flink_gpu.base.regular_files.read_regular_file`), or ``ValueError`` naming the file and,
    for a bad value, the key.
    """
    import json

    from flink_gpu.base.regular_files import read_regular_file

    path = os.fspath(path)
    content = read_regular_file(path, _SPEC_WHAT)
    try:
        spec = json.loads(content)
    except ValueError as error:  # also bytes that are not UTF-8
        raise ValueError(f"cannot read the {_SPEC_WHAT} {path} as JSON: {error}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"The {_SPEC_WHAT} {path} must hold a JSON object, not {type(spec).__name__}.")
    _check_spec(content, path)
    return spec


def _process_struct_of_file(path: Union[str, "os.PathLike[str]"]) -> str:
    """The build a spec file asks for; "v2" when it cannot be read (the simulator then says why)."""
    try:
        spec = read_spec(path)
    except (OSError, ValueError):
        return "v2"
    return _process_struct_of(spec)


def _process_struct_of(spec: Mapping[str, Any]) -> str:
    """The build a checked spec asks for."""
    asked = spec.get("process_struct")
    return asked if isinstance(asked, str) else "v2"


def _checked_text(spec: Mapping[str, Any]) -> str:
    """A dict spec as the JSON text the simulator reads, checked by it."""
    import json

    text = json.dumps(spec, allow_nan=False)  # TypeError / ValueError for a value JSON cannot hold
    _check_spec(text.encode(), "Simulator spec")
    return text


def _spec_file(text: str) -> str:
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="flink-gpu-sim-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
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
    ``counters(path)``). A dict spec is checked first, by the simulator's own checker: ``ValueError``
    naming the key, the value and what is accepted (``TypeError`` for a value JSON cannot hold).
    """
    if sum(given is not None for given in (devices, spec, profile)) > 1:
        raise ValueError("Give one of devices, spec and profile.")
    process_struct = "v2"
    if profile is not None:
        process_struct = _process_struct_of_file(profile_path(profile))
    elif isinstance(spec, Mapping):
        checked = _checked_text(spec)
        process_struct = _process_struct_of(spec)
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
            env["FLINK_GPU_SIM_SPEC"] = _spec_file(checked)
        else:
            from flink_gpu.base.regular_files import check_regular_file

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
