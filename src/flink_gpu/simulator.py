"""The bundled NVML simulator: a ``libnvidia-ml.so.1`` of our own, built against NVIDIA's ``nvml.h``.

It lets tests, demos and CI run the real native path on a host without a GPU. Point a process at
it through its environment (NVML is initialised once per process, so choose before the first use)::

    env = {**os.environ, **simulator.environment(devices=4)}
    subprocess.run(["flink-gpu-discovery", "2"], env=env)

    simulator.run(["python", "my_job.py"], spec={"devices": [{"name": "NVIDIA H100"}, {"fault": "GPU_IS_LOST"}]})

The simulator reads ``FLINK_GPU_SIM_DEVICES`` (a count, default 4) or ``FLINK_GPU_SIM_SPEC`` (a JSON
file: ``init_error``, ``driver_version`` and ``devices`` with ``uuid``, ``name``, ``memory_total``,
``pci_bus_id``, ``minor_number`` and ``fault``: ``NO_PERMISSION`` or ``GPU_IS_LOST``), and
``FLINK_GPU_SIM_INIT_ERROR`` (an NVML return code for ``nvmlInit``).
"""

import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

__all__ = ["MAX_DEVICES", "library_path", "environment", "read_spec", "run", "popen"]

_FAULTS = ("NO_PERMISSION", "GPU_IS_LOST")
_DEVICE_KEYS = {"uuid", "name", "memory_total", "pci_bus_id", "minor_number", "fault"}
# the value rules the simulator itself applies (csrc/simulator/nvml_simulator.cpp): text, or a
# whole number in [0, limit)
_STRING_KEYS = ("uuid", "name", "pci_bus_id")
_NUMBER_LIMITS = {"memory_total": 2**64, "minor_number": 2**32}
#: The most GPUs ``devices`` may ask for: the limit csrc/simulator/nvml_simulator.cpp puts on
#: FLINK_GPU_SIM_DEVICES.
MAX_DEVICES = 4096
_SPEC_WHAT = "simulator spec file"

SpecLike = Union[Mapping[str, Any], str, "os.PathLike[str]"]


def library_path() -> str:
    """Absolute path of the simulated ``libnvidia-ml.so.1`` inside the installed package."""
    path = Path(__file__).resolve().parent / "_simulator" / "libnvidia-ml.so.1"
    if not path.is_file():
        raise FileNotFoundError(
            f"The NVML simulator is missing from this installation ({path}). Reinstall flink-gpu "
            "(pip install --force-reinstall flink-gpu) or, in a source checkout, build it with "
            "tools/dev_build.sh."
        )
    return str(path)


def _check_whole_number(value: Any, limit: int, what: str) -> None:
    """``TypeError`` for a value that is no number, ``ValueError`` for one outside [0, limit)
    or not whole (JSON has one number type: 2.0 is the whole number 2 to the simulator too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Simulator spec {what} (0..{limit - 1}), got {value!r}.")
    if not (0 <= value < limit and float(value).is_integer()):
        raise ValueError(f"Simulator spec {what} (0..{limit - 1}), got {value!r}.")


def _check_string(value: Any, what: str) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Simulator spec {what} must be a string, got {value!r}.")


def _validate_spec(spec: Mapping[str, Any]) -> None:
    """The simulator's own rules: ``TypeError`` for a value of the wrong type, ``ValueError`` for
    an unknown key or a value out of range, each naming the key."""
    unknown = set(spec) - {"init_error", "driver_version", "devices"}
    if unknown:
        raise ValueError(f"Unknown simulator spec keys {sorted(unknown)}; use init_error, driver_version, devices.")
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
            raise ValueError(f"Simulator spec devices[{i}] has unknown keys {sorted(bad)}; known: {sorted(_DEVICE_KEYS)}.")
        for key in _STRING_KEYS:
            _check_string(device.get(key), f"devices[{i}].{key}")
        for key, limit in _NUMBER_LIMITS.items():
            if device.get(key) is not None:
                _check_whole_number(device[key], limit, f"devices[{i}].{key} must be a whole number")
        fault = device.get("fault")
        if fault is not None and fault not in _FAULTS:
            raise ValueError(f"Simulator spec devices[{i}] fault {fault!r} is not one of {_FAULTS}.")


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


def environment(devices: Optional[int] = None, spec: Optional[SpecLike] = None,
                init_error: Optional[int] = None) -> Dict[str, str]:
    """Environment variables that make a new process use the simulator.

    ``devices``: that many identical GPUs (default 4; ``ValueError`` unless a whole number from 0
    to :data:`MAX_DEVICES`). ``spec``: a dict (written to a temporary
    JSON file that lives as long as this process) or the path of a JSON file (which must be a
    regular file; its content is checked by the simulator when NVML starts, or before with
    :func:`read_spec`). ``init_error``: the NVML error code ``nvmlInit`` returns (e.g. 9,
    NVML_ERROR_DRIVER_NOT_LOADED). A dict spec is checked first: ``TypeError`` for a value of the
    wrong type, ``ValueError`` for an unknown key or a value out of range, both naming the key.
    """
    if devices is not None and spec is not None:
        raise ValueError("Give either devices or spec, not both.")
    lib = library_path()
    env = {
        "FLINK_GPU_NVML_LIBRARY": lib,
        # For code that opens libnvidia-ml.so.1 by name (pynvml, nvidia-smi-free tools).
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in (os.path.dirname(lib), os.environ.get("LD_LIBRARY_PATH")) if p),
    }
    if spec is not None:
        if isinstance(spec, Mapping):
            env["FLINK_GPU_SIM_SPEC"] = _spec_file(spec)
        else:
            from flink_gpu.regular_files import check_regular_file

            check_regular_file(spec, _SPEC_WHAT)
            env["FLINK_GPU_SIM_SPEC"] = os.fspath(spec)
    else:
        count = 4 if devices is None else devices
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_DEVICES:
            raise ValueError(f"devices must be a whole number from 0 to {MAX_DEVICES} (the simulated "
                             f"host's GPU count), got {devices!r}.")
        env["FLINK_GPU_SIM_DEVICES"] = str(count)
    if init_error is not None:
        env["FLINK_GPU_SIM_INIT_ERROR"] = str(int(init_error))
    return env


def _child_env(kwargs: Dict[str, Any], devices, spec, init_error) -> Dict[str, str]:
    base = kwargs.pop("env", None)
    env = dict(os.environ if base is None else base)
    for key in ("FLINK_GPU_SIM_DEVICES", "FLINK_GPU_SIM_SPEC", "FLINK_GPU_SIM_INIT_ERROR"):
        env.pop(key, None)
    env.update(environment(devices, spec, init_error))
    return env


def run(args: Sequence[str], *, devices: Optional[int] = None, spec: Optional[SpecLike] = None,
        init_error: Optional[int] = None, **kwargs: Any):
    """``subprocess.run(args, **kwargs)`` with the process pointed at the simulator."""
    import subprocess

    return subprocess.run(args, env=_child_env(kwargs, devices, spec, init_error), **kwargs)


def popen(args: Sequence[str], *, devices: Optional[int] = None, spec: Optional[SpecLike] = None,
          init_error: Optional[int] = None, **kwargs: Any):
    """``subprocess.Popen(args, **kwargs)`` with the process pointed at the simulator."""
    import subprocess

    return subprocess.Popen(args, env=_child_env(kwargs, devices, spec, init_error), **kwargs)
