"""Which CUDA device ordinal a GPU has in this process (docs/design.md §9.3).

``torch.device(f"cuda:{n}")`` and ``cudaSetDevice(n)`` take CUDA's ordinal, not NVML's index: CUDA
numbers the devices this process may see, in its own order, from 0. :func:`cuda_ordinals` works
that number out from NVML (never from CUDA, which would initialise CUDA in the caller) the way
NVIDIA documents CUDA's two environment variables:

* ``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` numbers the GPUs by PCI bus id, ascending (compared as
  numbers: domain, bus, device, function). Unset, or any other value, is CUDA's default
  ``FASTEST_FIRST``: a speed heuristic NVML cannot reproduce. The ordinals then assume PCI bus order,
  which is right when the GPUs are the same model, and a WARN (once per process, logger
  ``flink_gpu.binding.cuda_ordinals``) says to set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a GPU's ``uuid``
  property stays the unambiguous handle. The WARN comes only where the order decides the answer:
  more than one GPU on the host, and ``CUDA_VISIBLE_DEVICES`` unset or naming GPUs by number.
* ``CUDA_VISIBLE_DEVICES`` (docs/design.md §9.3 cites CUDA's documentation and says where PyTorch's
  ``_parse_visible_devices`` fills its gaps): unset, every GPU; empty, none; else a comma-separated
  list of one kind, set by its first entry: GPU numbers (in the order above), ``GPU-<uuid>`` (or a
  prefix of it that names one GPU only) or ``MIG-<uuid>`` (or ``MIG-GPU-<uuid>/<gi>/<ci>``). A number
  is read like C's ``strtoul`` (leading blanks and a ``+`` skipped, anything after the digits
  ignored: ``1x`` is 1); uuids are taken as written. The list ends at the first entry that names no
  device, a negative number, or an entry of another kind (the ones before it stay visible); a device
  named twice before that makes CUDA see none at all. A GPU's ordinal is its position in the list.

MIG: CUDA reaches a MIG instance only through its ``MIG-`` entry in ``CUDA_VISIBLE_DEVICES`` and
enumerates one MIG device per process, the first the list gives (a GPU in MIG mode that the list
names by number or GPU uuid, or that an unset variable exposes, counts as that one device, with an
instance CUDA picks); later MIG entries are passed over. A unit is therefore visible only as the
first MIG device of an explicit list: a process-mode worker started with
``CUDA_VISIBLE_DEVICES`` = its binding's ``cuda_visible_devices``.

A GPU that NVML skipped (no permission, lost) is taken to be invisible to CUDA as well.
"""

from __future__ import annotations

import logging
import os
import re

from flink_gpu.errors import CudaDeviceError, NvmlError

TYPE_CHECKING = False  # annotations only
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from flink_gpu.flink.resource_info import ExternalResourceInfo
    from flink_gpu.nvml import Device, SkippedDevice

__all__ = ["CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "CudaDeviceError", "PCI_BUS_ID", "cuda_ordinals"]

_log = logging.getLogger("flink_gpu.binding.cuda_ordinals")

#: The environment variables CUDA reads when it starts in a process.
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
CUDA_DEVICE_ORDER = "CUDA_DEVICE_ORDER"
#: The ``CUDA_DEVICE_ORDER`` value whose order NVML can reproduce.
PCI_BUS_ID = "PCI_BUS_ID"

# NVML's "00000000:17:00.0" (also the legacy 4-digit domain): domain, bus, device, function in hex
_PCI_BUS_ID = re.compile(r"([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", re.IGNORECASE)
# the MIG naming of CUDA 11 / R450 drivers: MIG-GPU-<GPU uuid>/<GPU instance>/<compute instance>
_LEGACY_MIG = re.compile(r"MIG-(GPU-[^/]+)/([0-9]+)/([0-9]+)")
_DIGITS = re.compile(r"[0-9]+")
# a number entry as C's strtoul reads it: C's blanks, an optional sign, digits (anything after is ignored)
_STRTOUL = re.compile(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)")

_warned_order = False  # the fastest-first WARN comes once per process


class _Gpu:
    """One physical GPU as CUDA enumerates it: a whole GPU, or a GPU in MIG mode with its units."""

    __slots__ = ("index", "uuid", "pci", "whole", "units")

    def __init__(self, index: int, devices: "list[Device]") -> None:
        self.index = index
        self.whole = next((d for d in devices if d.mig_slot is None), None)
        self.units = [d for d in devices if d.mig_slot is not None]
        self.uuid = self.whole.uuid if self.whole is not None else self.units[0].parent_uuid
        self.pci = _pci_key(devices[0].pci_bus_id)

    def name(self) -> str:
        return f"GPU {self.index}" + (f" ({self.uuid})" if self.uuid else "")


def _pci_key(bus_id: "str | None") -> "tuple[int, int, int, int] | None":
    """(domain, bus, device, function) of a PCI bus id, hex in any case; None for anything else."""
    match = _PCI_BUS_ID.fullmatch(bus_id.strip()) if bus_id else None
    if match is None:
        return None
    domain, bus, device, function = (int(part, 16) for part in match.groups())
    return domain, bus, device, function


def _host_gpus(devices: "Sequence[Device]") -> "list[_Gpu]":
    """The host's GPUs in CUDA's PCI bus order; in NVML's index order (NVML enumerates by bus id
    too) when a GPU's bus id is unknown."""
    by_index: "dict[int, list[Device]]" = {}
    for device in devices:
        by_index.setdefault(device.index, []).append(device)
    gpus = [_Gpu(index, by_index[index]) for index in sorted(by_index)]
    if all(gpu.pci is not None for gpu in gpus):
        gpus.sort(key=lambda gpu: gpu.pci or ())  # (every pci is known here)
    return gpus


class _Enumeration:
    """CUDA's devices in this process in ordinal order: (GPU, unit) pairs, the unit None for a whole
    GPU or for the instance CUDA picks on a GPU in MIG mode named as a GPU."""

    def __init__(self) -> None:
        self.devices: "list[tuple[_Gpu, Device | None]]" = []
        self.stop: "tuple[int, str, str] | None" = None  # (position, entry, why CUDA stops there)
        self.hidden: "str | None" = None  # why CUDA sees no device at all (a device named twice)
        self.passed_over: "dict[str, str]" = {}  # unit gpu_index -> why CUDA leaves it out
        self.order_used = False  # whether an ordinal depends on CUDA_DEVICE_ORDER
        self._mig: "str | None" = None  # the MIG device CUDA took, as named

    def add(self, gpu: _Gpu, unit: "Device | None", named: str) -> None:
        if gpu.units:
            if self._mig is not None:
                for each in [unit] if unit is not None else gpu.units:
                    self.passed_over.setdefault(
                        each.gpu_index, f"CUDA uses one MIG device per process and takes {self._mig} before it"
                    )
                return
            self._mig = named
        self.devices.append((gpu, unit))


class _Listed:
    """CUDA_VISIBLE_DEVICES read as CUDA reads it, before it is matched to the host's GPUs (the module
    docstring has the rules): ``kind`` (``"number"``, ``"GPU-"`` or ``"MIG-"``), ``entries``
    [(position, entry as written, the number or the uuid)], ``stop`` (position, entry, why the list
    ends there) and ``repeated`` (position, entry, the earlier position: CUDA then sees no device)."""

    __slots__ = ("kind", "entries", "stop", "repeated")

    def __init__(self, value: str) -> None:
        self.kind = "GPU-" if value.startswith("GPU-") else "MIG-" if value.startswith("MIG-") else "number"
        self.entries: "list[tuple[int, str, int | str]]" = []
        self.stop: "tuple[int, str, str] | None" = None
        self.repeated: "tuple[int, str, int] | None" = None
        seen: "dict[int | str, int]" = {}
        for position, raw in enumerate(value.split(","), 1):  # "": one entry naming nothing, so none
            key = self._key(raw)
            if isinstance(key, tuple):
                self.stop = (position, raw, key[0])
                return
            if key in seen:
                self.repeated = (position, raw, seen[key])
                return
            seen[key] = position
            self.entries.append((position, raw, key))

    def _key(self, raw: str) -> "int | str | tuple[str]":
        """What one entry names: a number, a uuid (as written), or (why the list ends at it,)."""
        if self.kind != "number":
            if raw.startswith(self.kind):
                return raw
            return (f"a list that starts with a {self.kind} uuid ends at the first entry that is not one",)
        match = _STRTOUL.match(raw)  # like C's strtoul: blanks, a sign, digits; what follows is ignored
        if match is None:
            return ("it is not a number, and a list that starts with a number takes numbers only",)
        number = int(match.group(2))
        if match.group(1) == "-" and number:
            return ("a negative number ends the list",)
        return number


def _resolve(key: "int | str", gpus: "list[_Gpu]") -> "tuple[_Gpu, Device | None] | str":
    """The device one entry of CUDA_VISIBLE_DEVICES names, or why it names none."""
    if isinstance(key, int):
        if key < len(gpus):
            return gpus[key], None
        return (
            f"NVML lists {len(gpus)} usable GPU{'' if len(gpus) == 1 else 's'} on this host, which CUDA numbers from 0"
        )
    # uuids as nvidia-smi -L prints them, case included: an entry CUDA might refuse is no match
    if key.startswith("GPU-"):
        matches = [gpu for gpu in gpus if gpu.uuid and gpu.uuid.startswith(key)]
        if len(matches) == 1:
            return matches[0], None
        if not matches:
            return "no GPU's uuid starts with it"
        return f"it is the start of several GPUs' uuids ({', '.join(str(gpu.uuid) for gpu in matches)})"
    legacy = _LEGACY_MIG.fullmatch(key)
    for gpu in gpus:
        for unit in gpu.units:
            if legacy is not None:
                if (
                    unit.parent_uuid == legacy.group(1)
                    and unit.mig_gi == int(legacy.group(2))
                    and unit.mig_ci == int(legacy.group(3))
                ):
                    return gpu, unit
            elif unit.uuid == key:
                return gpu, unit
    return "no MIG instance of this host has that uuid"


def _enumerate(gpus: "list[_Gpu]", value: "str | None") -> _Enumeration:
    """What CUDA enumerates in a process whose CUDA_VISIBLE_DEVICES is ``value`` (None: unset)."""
    result = _Enumeration()
    if value is None:
        result.order_used = len(gpus) > 1
        for gpu in gpus:
            result.add(gpu, None, gpu.name())
        return result
    listed = _Listed(value)
    if listed.repeated is not None:
        result.hidden = _repeated(listed.repeated)
        return result
    result.order_used = listed.kind == "number" and len(gpus) > 1 and bool(listed.entries)
    named: "dict[int, int]" = {}  # id of the device -> the position naming it
    for position, raw, key in listed.entries:
        target = _resolve(key, gpus)
        if isinstance(target, str):
            result.stop = (position, raw, target)
            return result
        device = id(target[1] if target[1] is not None else target[0])
        if device in named:  # two spellings of one device (a uuid and a prefix of it)
            result.devices.clear()
            result.hidden = _repeated((position, raw, named[device]))
            return result
        named[device] = position
        result.add(*target, repr(raw))
    result.stop = listed.stop
    return result


def _repeated(repeated: "tuple[int, str, int]") -> str:
    position, raw, earlier = repeated
    return (
        f"entry {position} ({raw!r}) names the device entry {earlier} names, and a device named twice makes "
        "CUDA see no device at all"
    )


def _describe(info: "ExternalResourceInfo") -> str:
    uuid = info.get_property("uuid")
    return f"GPU {info.get_property('index')}" + (f" ({uuid})" if uuid else "")


def _not_visible(info: "ExternalResourceInfo", value: "str | None", why: str, mig: bool) -> CudaDeviceError:
    """The error for a GPU CUDA does not see: which, why (naming the variable), and what to do."""
    setting = "unset" if value is None else f"{value!r}"
    if mig:
        todo = (
            "CUDA reaches a MIG instance only through its MIG- uuid in CUDA_VISIBLE_DEVICES, one per process: "
            "in process mode start the worker with CUDA_VISIBLE_DEVICES set to the binding's "
            "cuda_visible_devices (flink_gpu.cuda_visible_devices([info])) before CUDA initialises; a "
            "thread-mode TaskManager can use only the one unit its own CUDA_VISIBLE_DEVICES names"
        )
    else:
        todo = (
            "start the process with CUDA_VISIBLE_DEVICES naming it (its uuid, as the binding's "
            "cuda_visible_devices gives it) or unset, before CUDA initialises"
        )
    return CudaDeviceError(
        f"{_describe(info)} is not visible to CUDA in this process "
        f"(CUDA_VISIBLE_DEVICES is {setting}): {why}. To use it, {todo}."
    )


def _why_absent(
    value: "str | None", stop: "tuple[int, str, str] | None", name: str = "it", hidden: "str | None" = None
) -> str:
    """Why an explicit CUDA_VISIBLE_DEVICES leaves a device out; ``name``: how the list would name it;
    ``hidden``: why it shows no device at all."""
    if value is not None and not value:
        return "an empty CUDA_VISIBLE_DEVICES hides every GPU"
    if hidden is not None:
        return hidden
    why = f"CUDA_VISIBLE_DEVICES does not name {name}"
    if stop is not None:
        position, entry, reason = stop
        why += f"; CUDA stops at entry {position} ({entry!r}: {reason}) and ignores it and every entry after it"
    return why


def _warn_order(order: "str | None") -> None:
    global _warned_order
    if _warned_order:
        return
    _warned_order = True
    now = "is unset" if order is None else f"is {order!r}, not {PCI_BUS_ID}"
    _log.warning(
        "CUDA_DEVICE_ORDER %s, so CUDA numbers this process's GPUs fastest first, by a heuristic NVML cannot "
        "reproduce: the CUDA ordinals given assume PCI bus order, which is CUDA's when the GPUs are the same "
        "model. Set CUDA_DEVICE_ORDER=PCI_BUS_ID in the environment of the process (for a TaskManager: where it "
        "is started) to make them exact; a GPU's 'uuid' property names it unambiguously.",
        now,
    )


def _ordinals(
    ordered: "list[ExternalResourceInfo]",
    devices: "Sequence[Device]",
    value: "str | None",
    order: "str | None",
    skipped: "Sequence[SkippedDevice]" = (),
) -> "tuple[int, ...]":
    by_index = {device.gpu_index: device for device in devices}
    by_uuid = {device.uuid: device for device in devices if device.uuid}
    gpus = _host_gpus(devices)
    cuda = _enumerate(gpus, value)
    ordinals = []
    for info in ordered:
        uuid = info.get_property("uuid")
        device = by_uuid.get(uuid) if uuid else by_index.get(info.get_property("index") or "")
        gone = next((s for s in skipped if s.gpu_index == info.get_property("index")), None)
        if device is None and gone is not None:
            raise CudaDeviceError(
                f"{_describe(info)} cannot be used now: {gone.reason} Repair it (nvidia-smi -q -i "
                f"{gone.gpu_index} says more) or bind another GPU."
            )
        if device is None:
            known = ", ".join(f"{d.gpu_index} ({d.uuid})" for d in devices) or "none"
            raise CudaDeviceError(
                f"{_describe(info)} is not a GPU NVML lists on this host (it lists: {known}), "
                "so its CUDA ordinal cannot be told: give the GPUs this host's discovery returned."
            )
        unit = device if device.mig_slot is not None else None
        for ordinal, (gpu, shown) in enumerate(cuda.devices):
            if (shown is device) if unit is not None else (gpu.whole is device):
                ordinals.append(ordinal)
                break
        else:
            if cuda.hidden is not None:
                why = cuda.hidden
            elif unit is None:
                why = _why_absent(value, cuda.stop)
            elif unit.gpu_index in cuda.passed_over:
                why = cuda.passed_over[unit.gpu_index]
            elif value is None:
                why = "CUDA sees a MIG instance only when CUDA_VISIBLE_DEVICES names it"
            else:
                why = _why_absent(value, cuda.stop, "its MIG- uuid")
            raise _not_visible(info, value, why, unit is not None)
    if cuda.order_used and order != PCI_BUS_ID:
        _warn_order(order)
    return tuple(ordinals)


def _ordinals_without_nvml(
    ordered: "list[ExternalResourceInfo]", value: "str | None", order: "str | None", error: NvmlError
) -> "tuple[int, ...]":
    """NVML's index order stands in for PCI bus order (NVML enumerates by bus id); uuids cannot be
    matched, nor the host's GPU count checked."""
    nvml = f"NVML is unavailable ({error})"
    for info in ordered:
        index = info.get_property("index") or ""
        if not _DIGITS.fullmatch(index):
            raise CudaDeviceError(
                f"{_describe(info)} cannot be given a CUDA ordinal: {nvml}, and without it only a "
                "whole GPU's number maps to CUDA's (a MIG instance needs its MIG- uuid, which "
                "NVML gives). Make libnvidia-ml loadable (nvml.library-path or "
                "FLINK_GPU_NVML_LIBRARY)."
            )
    if value is None:
        whole = tuple(int(info.get_property("index") or "") for info in ordered)  # all digits (checked above)
        if max(whole) > 0 and order != PCI_BUS_ID:  # a GPU 1 means a host of several
            _warn_order(order)
        return whole
    listed = _Listed(value)
    numbers = (
        [key for _, _, key in listed.entries if isinstance(key, int)]  # a "number" list's keys are
        if listed.kind == "number" and listed.repeated is None
        else []
    )
    hidden = None if listed.repeated is None else _repeated(listed.repeated)
    ordinals = []
    for info in ordered:
        number = int(info.get_property("index") or "")
        if number in numbers:
            ordinals.append(numbers.index(number))
        elif listed.kind != "number" and hidden is None:
            raise CudaDeviceError(
                f"{_describe(info)} cannot be given a CUDA ordinal: CUDA_VISIBLE_DEVICES is "
                f"{value!r} and names GPUs by uuid, which only NVML can match, but "
                f"{nvml}. Make libnvidia-ml loadable (nvml.library-path or FLINK_GPU_NVML_LIBRARY) "
                "or name the GPUs by number."
            )
        else:
            raise _not_visible(info, value, _why_absent(value, listed.stop, hidden=hidden), False)
    if numbers and max(numbers) > 0 and order != PCI_BUS_ID:
        _warn_order(order)
    return tuple(ordinals)


def cuda_ordinals(
    infos: "Iterable[ExternalResourceInfo]",
    devices: "Sequence[Device] | None" = None,
    environ: "Mapping[str, str] | None" = None,
    *,
    skipped: "Sequence[SkippedDevice] | None" = None,
) -> "tuple[int, ...]":
    """The CUDA device ordinals, in this process, of the GPUs ``infos``, in GPU index order.

    ``devices``: every NVML device of the host (:class:`flink_gpu.nvml.Device`, as
    ``Library.devices().devices`` lists them, MIG units included) and ``skipped`` those it left out
    (``Library.devices().skipped``: a GPU lost since discovery is named as such); None opens the library
    (:func:`flink_gpu.nvml.open_library`). ``environ``: the environment CUDA starts with in this
    process (default ``os.environ``): ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``, read as
    the module docstring says. An info is matched to its device by ``uuid`` when it has one, else
    by ``index`` (Flink's Java ``GPUInfo`` carries only that).

    When NVML cannot be opened, NVML's index order stands in for CUDA's: that works while
    ``CUDA_VISIBLE_DEVICES`` is unset or lists GPU numbers, and a uuid entry raises.

    Raises :class:`CudaDeviceError` for a GPU that CUDA does not see in this process, naming it,
    ``CUDA_VISIBLE_DEVICES`` and its value, and what to do.
    """
    from flink_gpu.base.gpu_index import index_sort_order

    ordered = index_sort_order(infos, lambda info: info.get_property("index") or "")
    if not ordered:
        return ()
    env = os.environ if environ is None else environ
    value = env.get(CUDA_VISIBLE_DEVICES)
    order = env.get(CUDA_DEVICE_ORDER)
    if devices is None:
        from flink_gpu.nvml import open_library

        try:
            enumeration = open_library().devices()
            devices, skipped = enumeration.devices, enumeration.skipped
        except NvmlError as error:
            return _ordinals_without_nvml(ordered, value, order, error)
    return _ordinals(ordered, tuple(devices), value, order, tuple(skipped or ()))
