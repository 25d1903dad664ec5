"""CUDA device ordinals of GPUs in this process (flink_gpu.binding.cuda_ordinals), from real NVML devices.

Every host here is the bundled simulator opened in this process: each spec gets its own copy of
the simulated libnvidia-ml (NVML initialises once per library path), initialised with that spec,
so the devices are the ones ``Library.devices()`` really returns.
"""

import json
import logging
import shutil

import pytest

from flink_gpu import GPUInfo, NvmlError, nvml, simulator
from flink_gpu.binding import cuda_ordinals as cuda_devices
from flink_gpu.binding.cuda_ordinals import CudaDeviceError, cuda_ordinals

_HOSTS = {}


@pytest.fixture
def host(tmp_path_factory, monkeypatch):
    """``host(spec)``: (the simulated library's path, its devices) for a host described by ``spec``."""

    def open_host(spec):
        key = json.dumps(spec, sort_keys=True)
        if key not in _HOSTS:
            folder = tmp_path_factory.mktemp("nvml")
            library = str(folder / "libnvidia-ml.so.1")
            shutil.copy(simulator.library_path(), library)
            with monkeypatch.context() as env:  # the simulator reads its spec when NVML initialises
                env.setenv("FLINK_GPU_SIM_SPEC", simulator.environment(spec=spec)["FLINK_GPU_SIM_SPEC"])
                env.delenv("FLINK_GPU_SIM_DEVICES", raising=False)
                env.delenv("FLINK_GPU_SIM_INIT_ERROR", raising=False)
                _HOSTS[key] = library, nvml.open_library(library).devices().devices
        return _HOSTS[key]

    return open_host


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch):
    """Each test sees the fastest-first WARN as a fresh process would (it comes once per process)."""
    monkeypatch.setattr(cuda_devices, "_warned_order", False)


def uuid(i):
    return f"GPU-{i:x}{i:x}{i:x}{i:x}0000-0000-4000-8000-00000000000{i}"


# NVML index order is not PCI order here: CUDA's PCI_BUS_ID order is NVML 1, 3, 0, 2 (bus 0a, 0B,
# 81 in domain 0, then domain 1); compared as text the ids would sort 3, 0, 2, 1
SCRAMBLED = {
    "devices": [
        {"uuid": uuid(0), "pci_bus_id": "00000000:81:00.0"},
        {"uuid": uuid(1), "pci_bus_id": "0000:0a:00.0"},
        {"uuid": uuid(2), "pci_bus_id": "00000001:01:00.0"},
        {"uuid": uuid(3), "pci_bus_id": "00000000:0B:00.0"},
    ]
}
PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

# GPU 0 whole (bus 01), GPU 1 in MIG mode with units 1:1 and 1:3 (bus 02), GPU 2 whole (bus 03)
MIG_HOST = {
    "devices": [
        {"uuid": uuid(0), "pci_bus_id": "00000000:01:00.0"},
        {
            "uuid": "GPU-migparent",
            "pci_bus_id": "00000000:02:00.0",
            "mig": {
                "mode": "enabled",
                "instances": [
                    {"slot": 1, "uuid": "MIG-aaaa", "gi": 1, "ci": 0},
                    {"slot": 3, "uuid": "MIG-bbbb", "gi": 3, "ci": 0},
                ],
            },
        },
        {"uuid": uuid(2), "pci_bus_id": "00000000:03:00.0"},
    ]
}


def infos_of(devices, *indices, with_uuid=True):
    """GPUInfos of ``indices`` as the NVML backend gives them (or, ``with_uuid=False``, as Flink's
    Java GPUInfo does: the index only)."""
    by_index = {d.gpu_index: d for d in devices}
    return [GPUInfo(i, {"uuid": by_index[i].uuid} if with_uuid else None) for i in indices]


def ordinals(devices, *indices, **environ):
    return cuda_ordinals(infos_of(devices, *indices), devices, environ)


def error(devices, *indices, **environ):
    with pytest.raises(CudaDeviceError) as caught:
        ordinals(devices, *indices, **environ)
    return str(caught.value)


# --- the order -----------------------------------------------------------------------------------


def test_pci_bus_id_order_numbers_gpus_by_bus_id_compared_as_numbers(host):
    _, devices = host(SCRAMBLED)
    assert [d.gpu_index for d in devices] == ["0", "1", "2", "3"]
    assert ordinals(devices, "0", "1", "2", "3", **PCI) == (2, 0, 3, 1)


def test_the_result_follows_the_gpu_index_order_not_the_order_given(host):
    _, devices = host({"devices": [{} for _ in range(12)]})
    assert cuda_ordinals(infos_of(devices, "10", "2"), devices, PCI) == (2, 10)  # 2 before 10


def test_unknown_bus_ids_fall_back_to_nvml_index_order(host):
    _, devices = host(
        {
            "devices": [
                {"pci_bus_id": "00000000:81:00.0"},
                {"pci_bus_id": "00000000:02:00.0"},
                {"pci_bus_id": "not a bus id"},
            ]
        }
    )
    assert ordinals(devices, "0", "1", "2", **PCI) == (0, 1, 2)


# --- CUDA_VISIBLE_DEVICES ------------------------------------------------------------------------


def test_unset_makes_every_gpu_visible(host):
    _, devices = host(SCRAMBLED)
    assert ordinals(devices, "3", **PCI) == (1,)


def test_empty_hides_every_gpu(host):
    _, devices = host(SCRAMBLED)
    message = error(devices, "1", CUDA_VISIBLE_DEVICES="", **PCI)
    assert "CUDA_VISIBLE_DEVICES is ''" in message and "empty CUDA_VISIBLE_DEVICES hides every GPU" in message


def test_numbers_name_gpus_in_cuda_order_and_the_ordinal_is_the_position_in_the_list(host):
    _, devices = host(SCRAMBLED)
    # "2" is the third GPU by bus id: NVML's 0; "0" the first: NVML's 1
    assert ordinals(devices, "0", "1", CUDA_VISIBLE_DEVICES="2,0", **PCI) == (0, 1)


def test_uuids_and_unique_uuid_prefixes_name_gpus(host):
    _, devices = host(SCRAMBLED)
    value = f"{uuid(3)},{uuid(1)[:8]}"
    assert ordinals(devices, "1", "3", CUDA_VISIBLE_DEVICES=value) == (1, 0)


@pytest.mark.parametrize(
    "value, visible",
    [
        ("1x,0", (1, 0)),  # numbers are read like strtoul: what follows the digits is ignored
        ("+1, 0", (1, 0)),  # a sign and blanks before the digits are skipped
        ("-0,1", (0, 1)),  # strtoul's -0 is 0
    ],
)
def test_numbers_are_read_as_cuda_reads_them(host, value, visible):
    _, devices = host(SCRAMBLED)
    assert ordinals(devices, "1", "3", CUDA_VISIBLE_DEVICES=value, **PCI) == visible


def test_uuids_are_taken_as_written(host):
    _, devices = host(SCRAMBLED)
    assert ordinals(devices, "0", "1", CUDA_VISIBLE_DEVICES=f"{uuid(1)},{uuid(0)}") == (1, 0)
    message = error(devices, "0", CUDA_VISIBLE_DEVICES=f"{uuid(1)}, {uuid(0)}")
    assert f"CUDA stops at entry 2 (' {uuid(0)}': a list that starts with a GPU- uuid ends" in message


@pytest.mark.parametrize(
    "value", ["1,1", "2,1,2", "0,9,0", f"{uuid(0)},{uuid(0)}", f"{uuid(0)},{uuid(0)[:8]}", "MIG-x,MIG-x"]
)
def test_a_device_named_twice_makes_cuda_see_none(host, value):
    """CUDA's documentation is silent; PyTorch's reading, which this follows, is that the set is empty."""
    _, devices = host(SCRAMBLED)
    for index in ("0", "1", "3"):
        message = error(devices, index, CUDA_VISIBLE_DEVICES=value, **PCI)
        assert "names the device entry 1 names, and a device named twice makes CUDA see no device at all" in message


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("-1", "a negative number ends the list"),
        ("4", "NVML lists 4 usable GPUs on this host, which CUDA numbers from 0"),
        ("x1", "it is not a number, and a list that starts with a number takes numbers only"),
        (uuid(0), "it is not a number, and a list that starts with a number takes numbers only"),
    ],
)
def test_a_list_of_numbers_ends_at_the_first_entry_that_names_no_device(host, bad, reason):
    _, devices = host(SCRAMBLED)
    value = f"1,{bad},0"  # "1" is NVML's 3 in PCI order
    assert ordinals(devices, "3", CUDA_VISIBLE_DEVICES=value, **PCI) == (0,)
    message = error(devices, "1", CUDA_VISIBLE_DEVICES=value, **PCI)
    assert f"CUDA_VISIBLE_DEVICES does not name it; CUDA stops at entry 2 ({bad!r}: {reason}" in message
    assert ") and ignores it and every entry after it." in message


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("GPU-ffff", "no GPU's uuid starts with it"),
        ("GPU-", f"it is the start of several GPUs' uuids ({uuid(1)}, {uuid(3)}, "),  # CUDA's order
        ("gpu-1111", "a list that starts with a GPU- uuid ends at the first entry that is not one"),
        ("1", "a list that starts with a GPU- uuid ends at the first entry that is not one"),
        ("MIG-aaaa", "a list that starts with a GPU- uuid ends at the first entry that is not one"),
    ],
)
def test_a_list_of_uuids_ends_at_the_first_entry_that_names_no_device(host, bad, reason):
    _, devices = host(SCRAMBLED)
    value = f"{uuid(3)},{bad},{uuid(0)}"
    assert ordinals(devices, "3", CUDA_VISIBLE_DEVICES=value) == (0,)
    message = error(devices, "0", CUDA_VISIBLE_DEVICES=value)
    assert f"CUDA_VISIBLE_DEVICES does not name it; CUDA stops at entry 2 ({bad!r}: {reason}" in message


def test_the_error_names_the_gpu_the_variable_its_value_and_what_to_do(host):
    _, devices = host(SCRAMBLED)
    message = error(devices, "2", CUDA_VISIBLE_DEVICES="0,1", **PCI)
    assert message.startswith(
        f"GPU 2 ({uuid(2)}) is not visible to CUDA in this process "
        "(CUDA_VISIBLE_DEVICES is '0,1'): CUDA_VISIBLE_DEVICES does not name it."
    )
    assert "start the process with CUDA_VISIBLE_DEVICES naming it" in message
    assert "cuda_visible_devices" in message


def test_environ_defaults_to_the_process_environment(host, monkeypatch):
    _, devices = host(SCRAMBLED)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", uuid(2))
    assert cuda_ordinals(infos_of(devices, "2"), devices) == (0,)


# --- matching infos to devices -------------------------------------------------------------------


def test_an_info_with_only_an_index_is_matched_by_its_index(host):
    _, devices = host(SCRAMBLED)
    infos = infos_of(devices, "0", with_uuid=False)
    assert cuda_ordinals(infos, devices, {"CUDA_VISIBLE_DEVICES": f"{uuid(1)},{uuid(0)}"}) == (1,)


def test_an_info_with_a_uuid_is_matched_by_its_uuid(host):
    _, devices = host(SCRAMBLED)
    info = GPUInfo("0", {"uuid": uuid(2)})  # e.g. indices numbered elsewhere: the uuid is the handle
    assert cuda_ordinals([info], devices, {"CUDA_VISIBLE_DEVICES": f"{uuid(1)},{uuid(2)}"}) == (1,)


def test_a_gpu_nvml_does_not_list_raises_naming_it(host):
    _, devices = host(SCRAMBLED)
    with pytest.raises(CudaDeviceError, match=r"GPU 7 is not a GPU NVML lists on this host \(it lists: 0 \("):
        cuda_ordinals([GPUInfo("7")], devices, PCI)


def test_no_infos_give_no_ordinals_without_opening_nvml(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_GPU_NVML_LIBRARY", str(tmp_path / "absent" / "libnvidia-ml.so.1"))
    assert cuda_ordinals([], environ={}) == ()


# --- MIG -----------------------------------------------------------------------------------------


def test_a_mig_unit_is_visible_by_its_mig_uuid(host):
    _, devices = host(MIG_HOST)
    assert ordinals(devices, "1:3", CUDA_VISIBLE_DEVICES="MIG-bbbb") == (0,)
    assert "starts with a MIG- uuid ends" in error(devices, "0", CUDA_VISIBLE_DEVICES=f"MIG-aaaa,{uuid(0)}")


def test_a_mig_unit_is_visible_by_the_legacy_gpu_instance_form(host):
    _, devices = host(MIG_HOST)
    assert ordinals(devices, "1:3", CUDA_VISIBLE_DEVICES="MIG-GPU-migparent/3/0") == (0,)


def test_a_mig_unit_is_not_visible_without_its_mig_uuid(host):
    _, devices = host(MIG_HOST)
    message = error(devices, "1:1", **PCI)
    assert message.startswith(
        "GPU 1:1 (MIG-aaaa) is not visible to CUDA in this process (CUDA_VISIBLE_DEVICES "
        "is unset): CUDA sees a MIG instance only when CUDA_VISIBLE_DEVICES names it."
    )
    assert "one per process" in message
    assert "CUDA_VISIBLE_DEVICES set to the binding's cuda_visible_devices" in message
    listed = error(devices, "1:1", CUDA_VISIBLE_DEVICES="1", **PCI)
    assert "CUDA_VISIBLE_DEVICES does not name its MIG- uuid" in listed


def test_cuda_enumerates_one_mig_device_per_process(host):
    _, devices = host(MIG_HOST)
    value = "MIG-aaaa,MIG-bbbb"
    assert ordinals(devices, "1:1", CUDA_VISIBLE_DEVICES=value) == (0,)
    message = error(devices, "1:3", CUDA_VISIBLE_DEVICES=value)
    assert "CUDA uses one MIG device per process and takes 'MIG-aaaa' before it" in message


def test_a_gpu_in_mig_mode_takes_one_ordinal_when_unset(host):
    _, devices = host(MIG_HOST)
    assert ordinals(devices, "0", "2", **PCI) == (0, 2)


# --- the fastest-first WARN ----------------------------------------------------------------------


def order_warnings(caplog):
    return [r for r in caplog.records if r.name == "flink_gpu.binding.cuda_ordinals" and r.levelno == logging.WARNING]


def test_fastest_first_order_warns_once_per_process(host, caplog):
    _, devices = host(SCRAMBLED)
    with caplog.at_level(logging.WARNING, logger="flink_gpu.binding.cuda_ordinals"):
        assert ordinals(devices, "0", "1") == (2, 0)  # PCI order stands in
        ordinals(devices, "2")
    [record] = order_warnings(caplog)
    message = record.getMessage()
    assert message.startswith("CUDA_DEVICE_ORDER is unset, so CUDA numbers this process's GPUs fastest first")
    assert "Set CUDA_DEVICE_ORDER=PCI_BUS_ID" in message and "'uuid' property" in message


def test_an_order_value_other_than_pci_bus_id_is_fastest_first(host, caplog):
    _, devices = host(SCRAMBLED)
    with caplog.at_level(logging.WARNING, logger="flink_gpu.binding.cuda_ordinals"):
        assert ordinals(devices, "0", CUDA_DEVICE_ORDER="pci_bus_id") == (2,)
    [record] = order_warnings(caplog)
    assert "CUDA_DEVICE_ORDER is 'pci_bus_id', not PCI_BUS_ID" in record.getMessage()


@pytest.mark.parametrize(
    "spec, environ",
    [
        (SCRAMBLED, PCI),  # the order is known
        ({"devices": [{}]}, {}),  # one GPU: nothing to order
        (SCRAMBLED, {"CUDA_VISIBLE_DEVICES": f"{uuid(1)},{uuid(0)}"}),  # uuids: the order decides nothing
    ],
)
def test_no_warning_where_the_order_decides_nothing(host, caplog, spec, environ):
    _, devices = host(spec)
    with caplog.at_level(logging.WARNING, logger="flink_gpu.binding.cuda_ordinals"):
        ordinals(devices, "0", **environ)
    assert order_warnings(caplog) == []


def test_a_number_in_the_list_is_ordered_even_when_it_is_the_only_one(host, caplog):
    _, devices = host(SCRAMBLED)
    with caplog.at_level(logging.WARNING, logger="flink_gpu.binding.cuda_ordinals"):
        assert ordinals(devices, "3", CUDA_VISIBLE_DEVICES="1") == (0,)
    assert len(order_warnings(caplog)) == 1


# --- the library ---------------------------------------------------------------------------------


def test_devices_default_to_the_library_of_this_process(host, monkeypatch):
    library, devices = host(SCRAMBLED)
    monkeypatch.setenv("FLINK_GPU_NVML_LIBRARY", library)
    assert cuda_ordinals(infos_of(devices, "0", "3"), environ=PCI) == (2, 1)


@pytest.fixture
def no_nvml(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_GPU_NVML_LIBRARY", str(tmp_path / "absent" / "libnvidia-ml.so.1"))
    with pytest.raises(NvmlError):
        nvml.open_library()


def test_without_nvml_unset_gives_nvml_index_order(no_nvml):
    assert cuda_ordinals([GPUInfo("3"), GPUInfo("1")], environ=PCI) == (1, 3)


def test_without_nvml_numbers_give_positions_until_an_invalid_entry(no_nvml):
    assert cuda_ordinals([GPUInfo("1"), GPUInfo("3")], environ={"CUDA_VISIBLE_DEVICES": "3,1,-1,0", **PCI}) == (1, 0)
    with pytest.raises(CudaDeviceError, match=r"CUDA stops at entry 3 \('-1'"):
        cuda_ordinals([GPUInfo("0")], environ={"CUDA_VISIBLE_DEVICES": "3,1,-1,0", **PCI})


def test_without_nvml_a_uuid_list_raises_saying_why(no_nvml):
    with pytest.raises(
        CudaDeviceError,
        match=r"names GPUs by uuid, which only NVML can match, "
        r"but NVML is unavailable \(",
    ):
        cuda_ordinals([GPUInfo("1")], environ={"CUDA_VISIBLE_DEVICES": "GPU-1111,GPU-2222"})
    with pytest.raises(CudaDeviceError, match=r"CUDA stops at entry 2 \('GPU-1111': it is not a number"):
        cuda_ordinals([GPUInfo("1")], environ={"CUDA_VISIBLE_DEVICES": "0,GPU-1111"})
    assert cuda_ordinals([GPUInfo("0")], environ={"CUDA_VISIBLE_DEVICES": "0,GPU-1111"}) == (0,)


def test_without_nvml_numbers_are_read_as_cuda_reads_them(no_nvml):
    assert cuda_ordinals([GPUInfo("1"), GPUInfo("2")], environ={"CUDA_VISIBLE_DEVICES": "2x,+1", **PCI}) == (1, 0)
    with pytest.raises(CudaDeviceError, match="a device named twice makes CUDA see no device at all"):
        cuda_ordinals([GPUInfo("0")], environ={"CUDA_VISIBLE_DEVICES": "0,0", **PCI})


def test_without_nvml_a_mig_unit_raises_saying_why(no_nvml):
    with pytest.raises(CudaDeviceError, match=r"GPU 0:1 cannot be given a CUDA ordinal: NVML is unavailable"):
        cuda_ordinals([GPUInfo("0:1")], environ={"CUDA_VISIBLE_DEVICES": "MIG-aaaa"})


def test_without_nvml_fastest_first_still_warns(no_nvml, caplog):
    with caplog.at_level(logging.WARNING, logger="flink_gpu.binding.cuda_ordinals"):
        cuda_ordinals([GPUInfo("1")], environ={})
    assert len(order_warnings(caplog)) == 1


def test_a_number_beyond_the_usable_gpus_is_counted_as_nvml_lists_them_skipped_ones_apart(host):
    """`flink-gpu list` shows 4 GPUs, 1 skipped: the ordinals count the 3 usable ones, and the message says so."""
    _, devices = host({"devices": [{}, {"fault": "NO_PERMISSION"}, {}, {}]})
    message = error(devices, "0", CUDA_VISIBLE_DEVICES="3,0", **PCI)
    assert "('3': NVML lists 3 usable GPUs on this host, which CUDA numbers from 0)" in message
