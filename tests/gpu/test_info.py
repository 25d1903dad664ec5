"""GPUInfo (docs/design.md §3.4) and cuda_visible_devices."""

import pickle

import pytest

import flink_gpu
from flink_gpu import GPUInfo, cuda_visible_devices
from flink_gpu.flink.framework import ExternalResourceInfo


def test_str_is_flinks():
    assert str(GPUInfo("0")) == "GPU Device(0)"
    assert str(GPUInfo("GPU-abc")) == "GPU Device(GPU-abc)"


def test_is_an_external_resource_info_and_exported():
    info = GPUInfo("3")
    assert isinstance(info, ExternalResourceInfo)
    assert flink_gpu.GPUInfo is flink_gpu.gpu.GPUInfo is GPUInfo


def test_equality_and_hash_use_the_index_only():
    plain = GPUInfo("1")
    rich = GPUInfo("1", {"uuid": "GPU-1", "name": "NVIDIA H100"})
    assert plain == rich and hash(plain) == hash(rich)
    assert GPUInfo("1") != GPUInfo("2")
    assert GPUInfo("1") != GPUInfo(" 1")  # no trimming here: the parser trims
    assert GPUInfo("1") != "1" and "1" != GPUInfo("1")
    assert len({GPUInfo("0"), GPUInfo("0", {"uuid": "x"}), GPUInfo("1")}) == 2
    assert GPUInfo("0") in frozenset([GPUInfo("0", {"uuid": "GPU-0"})])


def test_get_property_and_keys():
    info = GPUInfo("2", {"uuid": "GPU-2", "memory.total": "85899345920"})
    assert info.get_property("index") == "2"
    assert info.get_property("uuid") == "GPU-2"
    assert info.get_property("memory.total") == "85899345920"
    assert info.get_property("name") is None
    assert info.get_keys() == ("index", "uuid", "memory.total")
    assert info.index == "2"

    plain = GPUInfo("0")
    assert plain.get_keys() == ("index",)
    assert plain.get_property("uuid") is None
    assert GPUInfo("0", {}).get_keys() == ("index",)


@pytest.mark.parametrize("blank", ["", " ", "\t\n", "\x1c", "\u2003", " \u3000 ", "\u2028"])
def test_blank_index_is_rejected(blank):
    with pytest.raises(ValueError, match="blank"):
        GPUInfo(blank)


@pytest.mark.parametrize("index", ["\u00a0", "\u2007", "\u202f", "\x85"])
def test_java_non_whitespace_is_a_valid_index(index):
    # Java's Character.isWhitespace is false for no-break spaces and NEL, which Python's
    # str.isspace() calls spaces: Flink keeps such an index, so must we.
    assert GPUInfo(index).get_property("index") == index


def test_bad_types_and_reserved_key():
    with pytest.raises(TypeError, match="str"):
        GPUInfo(0)
    with pytest.raises(TypeError):
        GPUInfo("0", {"memory.total": 80})
    with pytest.raises(ValueError, match="index"):
        GPUInfo("0", {"index": "1"})


def test_immutable_and_slotted():
    info = GPUInfo("0", {"uuid": "GPU-0"})
    with pytest.raises(AttributeError):
        info._index = "1"
    with pytest.raises(AttributeError):
        info.extra = 1
    with pytest.raises(AttributeError):
        del info._index
    assert not hasattr(info, "__dict__")
    assert info.index == "0"


def test_properties_are_copied():
    properties = {"uuid": "GPU-0"}
    info = GPUInfo("0", properties)
    properties["uuid"] = "changed"
    assert info.get_property("uuid") == "GPU-0"


def test_repr_shows_everything():
    assert repr(GPUInfo("0")) == "GPUInfo('0')"
    assert repr(GPUInfo("1", {"uuid": "GPU-1"})) == "GPUInfo('1', {'uuid': 'GPU-1'})"


def test_pickle_round_trip_keeps_properties():
    info = GPUInfo("5", {"uuid": "GPU-5", "name": "NVIDIA A100"})
    copy = pickle.loads(pickle.dumps(info))
    assert copy == info
    assert copy.get_keys() == info.get_keys()
    assert copy.get_property("name") == "NVIDIA A100"


def test_cuda_visible_devices_prefers_uuids_in_index_order():
    infos = [GPUInfo("10", {"uuid": "GPU-c"}), GPUInfo("2", {"uuid": "GPU-b"}), GPUInfo("1", {"uuid": "GPU-a"})]
    assert cuda_visible_devices(infos) == "GPU-a,GPU-b,GPU-c"
    assert cuda_visible_devices(frozenset(infos)) == "GPU-a,GPU-b,GPU-c"


def test_cuda_visible_devices_falls_back_to_indices_when_a_uuid_is_unknown():
    infos = {GPUInfo("10", {"uuid": "GPU-c"}), GPUInfo("2"), GPUInfo("1", {"uuid": "GPU-a"})}
    assert cuda_visible_devices(infos) == "1,2,10"


def test_cuda_visible_devices_edge_cases():
    assert cuda_visible_devices([]) == ""  # no GPU: CUDA sees none
    assert cuda_visible_devices(iter([GPUInfo("1"), GPUInfo("0")])) == "0,1"
    # non-numeric indices (a custom script) sort after numeric ones, as text
    assert cuda_visible_devices([GPUInfo("b"), GPUInfo("3"), GPUInfo("a")]) == "3,a,b"


def test_cuda_visible_devices_gives_one_mig_unit_its_mig_uuid():
    unit = GPUInfo("0:2", {"uuid": "MIG-b", "parent.index": "0", "parent.uuid": "GPU-a"})
    assert cuda_visible_devices([unit]) == "MIG-b"
    assert cuda_visible_devices([unit, GPUInfo("1", {"uuid": "GPU-c"})]) == "MIG-b,GPU-c"


def test_cuda_visible_devices_refuses_more_than_one_mig_unit_pointing_to_per_slot_binding():
    units = [GPUInfo(f"0:{slot}", {"uuid": f"MIG-{slot}", "parent.index": "0"}) for slot in (2, 10)]
    with pytest.raises(ValueError, match=r"only one MIG instance.*\(0:2, 0:10\).*one GPU per slot"):
        cuda_visible_devices(units)


class _OtherResourceInfo(ExternalResourceInfo):
    """Another resource's info, as a user's own driver gives it: properties, but no ``index``."""

    def __init__(self, properties):
        self.properties = properties

    def get_property(self, key):
        return self.properties.get(key)

    def get_keys(self):
        return tuple(self.properties)

    def __repr__(self):
        return f"_OtherResourceInfo({self.properties!r})"


def test_cuda_visible_devices_refuses_an_info_without_index_naming_it():
    """An info of another resource (no ``index``) cannot be named to CUDA: a ValueError saying which
    info and to pass a GPU resource's infos, not a TypeError from inside str.join."""
    fpga = _OtherResourceInfo({"serial": "F-1"})
    with pytest.raises(
        ValueError,
        match=r"_OtherResourceInfo\(\{'serial': 'F-1'\}\) has no 'index' property.*"
        r"infos of a GPU resource",
    ):
        cuda_visible_devices([GPUInfo("0"), fpga])
    unit = _OtherResourceInfo({"parent.index": "0"})  # a MIG unit's property, but no index
    with pytest.raises(ValueError, match=r"has no 'index' property"):
        cuda_visible_devices([GPUInfo("0:1", {"uuid": "MIG-a"}), unit])
    with pytest.raises(ValueError, match=r"has no 'index' property"):
        cuda_visible_devices([unit])


def test_mig_units_known_by_their_index_alone_are_refused_saying_the_uuid_is_needed():
    """A Java GPUInfo or flink-gpu-discovery's "0:1" has no uuid: "0:1" would name GPU 0 to CUDA, which then
    picks an instance of its own, perhaps another slot's; two such units would pass as two GPUs."""
    with pytest.raises(ValueError, match=r"only one MIG instance.*\(0:0, 0:2\)"):
        cuda_visible_devices([GPUInfo("0:0"), GPUInfo("0:2")])
    with pytest.raises(ValueError, match=r"MIG instance 0:1 has no uuid.*MIG- uuid.*whole GPU 0"):
        cuda_visible_devices([GPUInfo("0:1")])
    assert cuda_visible_devices([GPUInfo("0:1", {"uuid": "MIG-a"})]) == "MIG-a"
