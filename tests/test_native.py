"""The Cython binding over the C++ core, on the bundled NVML simulator (real native path)."""

import errno
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import run_python, simulated_env
from flink_gpu import NvmlError, _native, simulator
from support.faults import child_env, run_child
from support.simulated import NOT_HOST_PIDS, pids_are_hosts

LIST_DEVICES = """
import json
from flink_gpu import _native
nvml = _native.Nvml.open()
found = nvml.devices()
print(json.dumps({
    "path": nvml.library_path,
    "driver": nvml.driver_version,
    "devices": [[d.index, d.uuid, d.name, d.pci_bus_id, d.memory_total, d.minor_number] for d in found.devices],
    "skipped": [[s.index, s.code, s.reason] for s in found.skipped],
}))
"""


def list_devices(**sim):
    return json.loads(run_python(LIST_DEVICES, env=simulated_env(**sim)).stdout)


def test_four_devices_with_every_property():
    found = list_devices(devices=4)
    assert found["path"] == simulator.library_path()
    assert found["driver"] == "999.99.99"
    assert found["skipped"] == []
    assert found["devices"] == [
        [i, f"GPU-00000000-0000-4000-8000-{i:012x}", "NVIDIA Simulated GPU", f"00000000:{i + 1:02X}:00.0", 80 << 30, i]
        for i in range(4)
    ]


SOME_DEVICES = """
import json
from flink_gpu import nvml, simulator
library = nvml.open_library()
simulator.reset_counters()
devices = library.devices(gpus=[3, 1]).devices
opened = sorted({gpu for by_gpu in simulator.counters()["calls"].values() for gpu in by_gpu if gpu != "host"})
try:
    library.devices(gpus=[-1])
    refused = None
except ValueError as error:
    refused = str(error)
print(json.dumps({"indices": [d.gpu_index for d in devices], "opened": opened, "refused": refused}))
"""


def test_an_enumeration_of_some_gpus_takes_no_other_gpus_handle():
    got = json.loads(run_python(SOME_DEVICES, env=simulated_env(devices=4)).stdout)
    assert got == {
        "indices": ["1", "3"],
        "opened": ["1", "3"],
        "refused": "A GPU's NVML number is a whole number of at least 0, got -1.",
    }


def test_spec_file_devices_and_faults_are_skipped_with_reason():
    found = list_devices(
        spec={
            "devices": [
                {
                    "uuid": "GPU-a",
                    "name": "NVIDIA H100 80GB HBM3",
                    "memory_total": 85520809984,
                    "pci_bus_id": "00000000:17:00.0",
                    "minor_number": 7,
                },
                {"fault": "NO_PERMISSION"},
                {"fault": "GPU_IS_LOST"},
                {"uuid": "GPU-d"},
            ]
        }
    )
    assert [d[:6] for d in found["devices"]] == [
        [0, "GPU-a", "NVIDIA H100 80GB HBM3", "00000000:17:00.0", 85520809984, 7],
        [3, "GPU-d", "NVIDIA Simulated GPU", "00000000:04:00.0", 80 << 30, 3],
    ]
    (i1, code1, reason1), (i2, code2, reason2) = found["skipped"]
    assert (i1, code1) == (1, 4)  # NVML_ERROR_NO_PERMISSION
    assert (i2, code2) == (2, 15)  # NVML_ERROR_GPU_IS_LOST
    assert "GPU 1" in reason1 and "NVML_ERROR_NO_PERMISSION" in reason1
    assert "GPU 2" in reason2 and "NVML_ERROR_GPU_IS_LOST" in reason2


@pytest.mark.parametrize(
    "code, words",
    [
        (9, ["NVML_ERROR_DRIVER_NOT_LOADED", "kernel driver is not loaded"]),
        (18, ["NVML_ERROR_LIB_RM_VERSION_MISMATCH", "Reboot"]),
        (4, ["NVML_ERROR_NO_PERMISSION", "/dev/nvidia"]),
    ],
)
def test_init_failure_names_the_error_and_the_library(code, words):
    proc = run_python(
        """
        from flink_gpu import _native, NvmlError
        try:
            _native.Nvml.open()
        except NvmlError as e:
            print(e.code, e.function, e.library_path, sep="|")
            print(e)
        """,
        env=simulated_env(init_error=code),
    )
    first, message = proc.stdout.strip().split("\n", 1)
    assert first == f"{code}|nvmlInit_v2|{simulator.library_path()}"
    assert simulator.library_path() in message
    for word in words:
        assert word in message


def test_missing_library_is_a_clear_python_error(tmp_path):
    missing = str(tmp_path / "libnvidia-ml.so.1")
    with pytest.raises(NvmlError) as info:
        _native.Nvml.open(missing)
    assert info.value.code == 12  # NVML_ERROR_LIBRARY_NOT_FOUND
    assert info.value.library_path == missing
    assert missing in str(info.value) and "FLINK_GPU_NVML_LIBRARY" in str(info.value)


@pytest.mark.parametrize("timeout", [0, -1.5, float("nan"), float("inf")])
def test_an_nvml_timeout_is_the_cores_one_check_before_the_library_is_touched(tmp_path, timeout):
    """Positive and finite seconds (csrc/nvml/settings.hpp's check_nvml_timeout): bind's nvml_timeout and the
    driver's nvml-timeout are held to it too."""
    with pytest.raises(
        ValueError, match=r"^Invalid NVML timeout .*: it must be a positive, finite number of seconds\.$"
    ):
        _native.Nvml.open(str(tmp_path / "libnvidia-ml.so.1"), timeout)
    with pytest.raises(TypeError, match="timeout must be a number of seconds"):
        _native.Nvml.open(str(tmp_path / "libnvidia-ml.so.1"), "5 s")


def test_health_check_names_are_the_cores_one_check_never_the_options_grammar():
    assert _native.checked_health_checks(["ecc", "inforom"], "health_checks") == ("inforom", "ecc")
    assert _native.checked_health_checks([], "health_checks") == ()
    for wrong in ("all", "-inforom", "INFOROM", "fans"):
        with pytest.raises(ValueError, match=f"^Invalid health_checks: '{wrong}' is not a health check; use inforom, "):
            _native.checked_health_checks(["ecc", wrong], "health_checks")
    assert _native.health_checks_of("all,-inforom") == _native.HEALTH_CHECKS[1:]  # the option's grammar


def test_library_without_nvml_symbols_is_rejected():
    with pytest.raises(NvmlError, match="not a usable NVML library") as info:
        _native.Nvml.open("libc.so.6")
    assert info.value.code == 13  # NVML_ERROR_FUNCTION_NOT_FOUND


def test_environment_variable_selects_the_library():
    proc = run_python(
        """
        from flink_gpu import _native
        print(len(_native.Nvml.open().devices().devices), _native.Nvml.open() is _native.Nvml.open())
        """,
        env=simulated_env(devices=3),
    )
    assert proc.stdout.split() == ["3", "True"]


def test_nvml_is_initialised_once_and_again_after_fork():
    proc = run_python(
        """
        import os
        from flink_gpu import _native
        nvml = _native.Nvml.open()
        assert len(nvml.devices().devices) == 2
        pid = os.fork()
        if pid == 0:
            # the child re-initialises transparently and sees the same devices
            again = _native.Nvml.open().devices().devices
            os._exit(0 if [d.uuid for d in again] == [d.uuid for d in nvml.devices().devices] else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """,
        env=simulated_env(devices=2),
    )
    assert proc.stdout.strip() == "0"


def test_broken_spec_file_fails_init_with_a_message_naming_it(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"devices": [}')
    proc = run_python(
        """
        from flink_gpu import _native, NvmlError
        try:
            _native.Nvml.open()
        except NvmlError as e:
            print(e.code)
        """,
        env=simulated_env(spec=str(spec)),
    )
    assert proc.stdout.strip() == "999"  # NVML_ERROR_UNKNOWN
    assert str(spec) in proc.stderr and "byte" in proc.stderr


def test_simulator_environment_rejects_bad_input():
    with pytest.raises(ValueError, match="devices"):
        simulator.environment(devices=-1)
    with pytest.raises(ValueError, match="fault"):
        simulator.environment(spec={"devices": [{"fault": "ON_FIRE"}]})
    with pytest.raises(ValueError, match="unknown keys"):
        simulator.environment(spec={"devices": [{"uuid": "x", "colour": "green"}]})


def test_simulator_run_helper_starts_a_process_against_it(discovery_exe):
    proc = simulator.run([discovery_exe, "3"], devices=3, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, "0,1,2\n")
    proc = simulator.run([discovery_exe, "4"], devices=3, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (1, "Could not get enough GPU resources.\n")


# --- the discovery-output parser: Java semantics (docs/design.md §3.3) ---------------------------------

JAVA_WHITESPACE = set("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \u1680\u2028\u2029\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B) if c != 0x2007
}


def java_lines(text):
    """Reference: java.io.BufferedReader#lines()."""
    lines, current, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c in "\r\n":
            lines.append("".join(current))
            current = []
            i += 2 if c == "\r" and text[i + 1 : i + 2] == "\n" else 1
        else:
            current.append(c)
            i += 1
    if current:
        lines.append("".join(current))
    return lines


def java_indices(line):
    """Reference: GPUDriver's split(","), isNullOrWhitespaceOnly, trim(), then a set."""
    out = []
    for field in line.split(","):
        if all(c in JAVA_WHITESPACE for c in field):
            continue
        start, end = 0, len(field)
        while start < end and field[start] <= " ":
            start += 1
        while end > start and field[end - 1] <= " ":
            end -= 1
        if field[start:end] not in out:
            out.append(field[start:end])
    return out


@pytest.mark.parametrize(
    "line, expected",
    [
        (" 0 , 1,,  ,2 ", ["0", "1", "2"]),
        (",0,1,", ["0", "1"]),
        ("0\t1", ["0\t1"]),
        ("\u00a0", ["\u00a0"]),
        ("\x1c", []),
        ("\u2003,3", ["3"]),
        ("\u2003 0", ["\u2003 0"]),
        ("1,1,0", ["1", "0"]),
    ],
)
def test_parse_examples(line, expected):
    assert _native.parse_gpu_indices(line) == expected


def test_lines_split_only_on_cr_and_lf():
    assert _native.split_output_lines(",0,1,\r\n") == [",0,1,"]
    assert _native.split_output_lines("0\u20281\x852\x0b3") == ["0\u20281\x852\x0b3"]
    assert _native.split_output_lines("a\r\rb\n") == ["a", "", "b"]
    assert _native.split_output_lines("") == []


text_alphabet = st.sampled_from(
    list("01,; \t\r\n\x00\x01\x1c\x1f\x85\xa0")
    + ["\u1680", "\u2003", "\u2007", "\u2028", "\u202f", "\u3000", "\ud800", "é", "💥"]
)


@given(st.text(alphabet=text_alphabet, max_size=40) | st.text(max_size=40))
def test_parser_agrees_with_java_reference(text):
    assert _native.split_output_lines(text) == java_lines(text)
    assert _native.parse_gpu_indices(text) == java_indices(text)


# --- simulator.environment(spec=...) leaves no temporary file behind when the spec is not JSON ---


def test_simulator_spec_that_is_not_json_leaves_no_file(tmp_path, monkeypatch):
    import tempfile

    from flink_gpu import simulator

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(TypeError):
        simulator.environment(spec={"devices": [{"name": object()}]})
    assert list(tmp_path.iterdir()) == []


# --- NVML library paths: a NUL is refused, other bytes reach dlopen as they are ---------------

# Each case runs in a fresh interpreter: NVML initialises once per process.
OPEN_PATH = """
import os, sys
from flink_gpu import NvmlError, _native
path = os.fsdecode(bytes.fromhex(sys.argv[1] if len(sys.argv) > 1 else {hex!r}))
try:
    nvml = _native.Nvml.open(path)
except ValueError as error:
    print("ValueError", error)
except NvmlError as error:
    print("NvmlError", error.code)
else:
    print("opened", len(nvml.devices().devices), nvml.library_path == path)
"""


def open_path(path: bytes) -> str:
    return run_python(OPEN_PATH.format(hex=path.hex()), env=simulated_env(devices=3)).stdout.strip()


def simulator_path() -> bytes:
    from flink_gpu import simulator

    return os.fsencode(simulator.library_path())


def test_library_path_with_nul_is_refused_not_truncated():
    # dlopen sees a C string: everything after the NUL was dropped and the simulator was loaded
    # although the configured path names another file.
    assert open_path(simulator_path() + b"\0.disabled").startswith("ValueError")


def test_library_path_with_non_utf8_bytes_is_opened(tmp_path):
    # A path as os.fsdecode gives it (surrogateescape) must reach dlopen as the original bytes.
    directory = os.path.join(os.fsencode(str(tmp_path)), b"driver-\xff")
    os.mkdir(directory)
    library = os.path.join(directory, b"libnvidia-ml.so.1")
    os.symlink(simulator_path(), library)
    assert open_path(library) == "opened 3 True"


def test_missing_non_utf8_library_is_an_nvml_error(tmp_path):
    # The loader's message names the path; decoding it must not fail on the undecodable byte.
    missing = os.path.join(os.fsencode(str(tmp_path)), b"gone-\xff", b"libnvidia-ml.so.1")
    assert open_path(missing).startswith("NvmlError")


# --- Java's string rules (csrc/flink/java_text.*) --------------------------------------------------


def java_trim_reference(text):
    """Reference: String#trim()."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


@given(st.characters())
def test_is_java_whitespace_agrees_with_java_reference(ch):
    assert _native.is_java_whitespace(ch) == (ch in JAVA_WHITESPACE)


def test_is_java_whitespace_takes_exactly_one_character():
    assert _native.is_java_whitespace("\u2003") and not _native.is_java_whitespace("\u2007")
    for bad in ("", "  "):
        with pytest.raises(TypeError, match="one character"):
            _native.is_java_whitespace(bad)


@pytest.mark.parametrize(
    "text, trimmed, blank",
    [
        ("", "", True),
        ("  0 ", "0", False),
        ("\x01a b\x02", "a b", False),
        ("\x00x\x00", "x", False),
        ("\u2003 0", "\u2003 0", False),  # trim() stops at U+0020; U+2003 is above it
        ("\u2003\u3000\u1680 \t", "\u2003\u3000\u1680", True),
        ("\xa0", "\xa0", False),  # no-break space: not Java whitespace
        ("\x01", "", False),  # a control that trim() strips but is not whitespace
        ("\ud800", "\ud800", False),  # a lone surrogate is a character like any other
    ],
)
def test_java_trim_and_blank_examples(text, trimmed, blank):
    assert _native.java_trim(text) == trimmed
    assert _native.is_java_blank(text) is blank


def test_is_java_blank_of_none_is_true_as_in_flink():
    assert _native.is_java_blank(None) is True


@given(st.text(alphabet=text_alphabet, max_size=20) | st.text(max_size=20))
def test_java_trim_and_blank_agree_with_java_reference(text):
    assert _native.java_trim(text) == java_trim_reference(text)
    assert _native.is_java_blank(text) == all(c in JAVA_WHITESPACE for c in text)


# --- the GPU index order (csrc/base/gpu_index.*) --------------------------------------------------


def test_indices_sort_numerically_first_then_as_text():
    assert _native.sort_indices(["10", "b", "2", "02", "a", "1", "", "0", "é"]) == [
        "0",
        "1",
        "02",
        "2",
        "10",
        "",
        "a",
        "b",
        "é",
    ]
    assert _native.sort_indices(iter(())) == []
    assert _native.sort_indices(("99999999999999999999", "100000000000000000000")) == [
        "99999999999999999999",
        "100000000000000000000",
    ]


def test_compare_indices_is_a_three_way_comparison():
    assert _native.compare_indices("2", "10") == -1
    assert _native.compare_indices("10", "2") == 1
    assert _native.compare_indices("3", "3") == 0
    assert _native.compare_indices("9", "!") == -1


def test_sort_indices_rejects_what_is_not_a_str():
    with pytest.raises(TypeError, match="must be a str, got int: 3"):
        _native.sort_indices(["1", 3])


index_text = st.text(alphabet="0123456789ab", max_size=6) | st.text(max_size=4)


@given(st.lists(index_text, max_size=12))
def test_sort_indices_agrees_with_the_numeric_then_text_key(indices):
    def key(index):
        return (0, int(index), index) if index.isascii() and index.isdigit() else (1, 0, index)

    assert _native.sort_indices(indices) == sorted(indices, key=key)


# --- the stock discovery script's arguments (csrc/flink/script_args.*) -----------------------------

DEFAULT_FILE = _native.COORDINATION_DEFAULT_PATH


def test_script_flags():
    assert _native.SCRIPT_FLAGS == (
        "--enable-coordination-mode",
        "--coordination-file",
        "--busy-gpus",
        "--nvml-timeout",
    )


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([], (False, DEFAULT_FILE, False, [])),
        (["null"], (False, DEFAULT_FILE, False, [])),
        (["--enable-coordination-mode", "--coordination-file", "/x/f"], (True, "/x/f", False, [])),
        # the token after --coordination-file is the file, whatever it looks like
        (["--coordination-file", "--enable-coordination-mode"], (False, "--enable-coordination-mode", False, [])),
        # no value, or an empty one: the stock script keeps its default file
        (["--enable-coordination-mode", "--coordination-file"], (True, DEFAULT_FILE, True, [])),
        (["--coordination-file", "", "--enable-coordination-mode"], (True, DEFAULT_FILE, True, [])),
        (["--coordination-file", "/a", "--coordination-file"], (False, DEFAULT_FILE, True, [])),
        (
            ["--enable-coordination", "--verbose", "--coordination"],
            (
                False,
                DEFAULT_FILE,
                False,
                [
                    ("--enable-coordination", "--enable-coordination-mode"),
                    ("--verbose", None),
                    ("--coordination", "--coordination-file"),
                ],
            ),
        ),
        (["--coordination-file", "/tmp/\udcff\u00e9"], (False, "/tmp/\udcff\u00e9", False, [])),
    ],
)
def test_parse_script_args(tokens, expected):
    parsed = _native.parse_script_args(tokens)
    mode, path, missing, unknown = expected
    assert (parsed.coordination_mode, parsed.coordination_file, parsed.file_value_missing) == (mode, path, missing)
    assert [(u.token, u.suggestion) for u in parsed.unknown] == unknown
    assert (parsed.busy_gpus, parsed.nvml_timeout) == (None, None)  # no --busy-gpus, --nvml-timeout


@pytest.mark.parametrize(
    "tokens, busy",
    [
        (["--busy-gpus", "exclude"], "exclude"),
        (["--busy-gpus", "bogus"], "bogus"),  # checked where it is used (the discovery)
        (["--enable-coordination-mode", "--busy-gpus"], ""),
    ],
)
def test_parse_script_args_busy_gpus_takes_the_next_token(tokens, busy):
    assert _native.parse_script_args(tokens).busy_gpus == busy
    assert _native.parse_script_args(tokens).unknown == ()


def test_parse_script_args_rejects_what_is_not_a_str():
    with pytest.raises(TypeError, match="must be a str, got NoneType"):
        _native.parse_script_args(["--enable-coordination-mode", None])


@pytest.mark.parametrize("devices", [4097, 2**64, 10**30, -(2**64), True, 2.0, "4"])
def test_simulator_environment_names_a_device_count_it_cannot_simulate(devices):
    with pytest.raises(ValueError) as info:
        simulator.environment(devices=devices)
    assert str(info.value) == (
        f"devices must be a whole number from 0 to {simulator.MAX_DEVICES} (the "
        f"simulated host's GPU count), got {devices!r}."
    )


def test_simulator_max_devices_is_the_simulators_own_limit():
    """The constant mirrors the simulator's FLINK_GPU_SIM_DEVICES rule: both ends of it, on the real library."""
    script = "from flink_gpu.nvml import open_library\nprint(len(open_library().devices().devices))\n"
    env = simulated_env(devices=simulator.MAX_DEVICES)
    assert run_python(script, env=env).stdout.strip() == str(simulator.MAX_DEVICES)
    env["FLINK_GPU_SIM_DEVICES"] = str(simulator.MAX_DEVICES + 1)
    proc = run_python(
        "from flink_gpu.nvml import open_library\ntry:\n    open_library()\nexcept Exception as e:\n"
        "    print(type(e).__name__)\n",
        env=env,
    )
    assert proc.stdout.strip() == "NvmlError" and "is not a device count (0..4096)" in proc.stderr


@given(
    st.one_of(
        st.integers(min_value=simulator.MAX_DEVICES + 1),
        st.integers(max_value=-1),
        st.booleans(),
        st.floats(allow_nan=True),
        st.text(max_size=20),
    )
)
def test_simulator_environment_names_every_device_count_it_cannot_simulate(devices):
    with pytest.raises(ValueError) as info:
        simulator.environment(devices=devices)
    assert f"devices must be a whole number from 0 to {simulator.MAX_DEVICES}" in str(info.value)
    assert f"got {devices!r}." in str(info.value)


# --- GPU state at assignment time (csrc/nvml/state.*, csrc/nvml/choice.*) -------------------------

STATES = """
import json, os
from flink_gpu import _native, policy
nvml = _native.Nvml.open()
states = nvml.states(os.getpid())
indices = [d.gpu_index for d in nvml.devices().devices]
def ranked(busy_gpus):
    outcome = policy.discover(nvml, 0, indices, owner=os.getpid(), busy_gpus=busy_gpus)
    return [outcome.order, outcome.ranks, [[gpu.index, gpu.why] for gpu in outcome.left_out]]
print(json.dumps({
    "devices": [[d.index, d.cpu_affinity, d.numa_node] for d in nvml.devices().devices],
    "states": [[s.index, s.health, list(s.findings), s.memory_used, s.memory_free,
                [[p.pid, p.used_memory, p.kind, p.own, p.visible] for p in s.processes],
                s.processes_known, s.busy, s.compute_mode] for s in states],
    "ranked": {busy_gpus: ranked(busy_gpus) for busy_gpus in ("avoid", "exclude", "ignore")},
}))
"""

FOREIGN = [
    {"pid": 4000000001, "used_memory": 1 << 20, "kind": "compute"},
    {"pid": 4000000002, "used_memory": 2 << 20, "kind": "compute"},
    {"pid": 4000000003, "kind": "graphics"},
]


def read_states(spec):
    return json.loads(run_python(STATES, env=simulated_env(spec=spec)).stdout)


@pytest.mark.parametrize("process_struct", ["v2", "r535"])
def test_states_read_processes_memory_and_locality_in_both_struct_layouts(process_struct):
    found = read_states(
        {
            "process_struct": process_struct,
            "devices": [
                {
                    "memory_total": 1000 << 20,
                    "memory_used": 250 << 20,  # its processes' and more
                    "cpu_affinity": "0-3,8",
                    "compute_mode": "exclusive_process",
                    "processes": FOREIGN,
                },
                {},
            ],
        }
    )
    assert found["devices"] == [[0, "0-3,8", None], [1, None, None]]
    first, second = found["states"]
    assert first == [
        0,
        "ok",
        [],
        250 << 20,
        750 << 20,
        [
            [4000000001, 1 << 20, "compute", False, False],
            [4000000002, 2 << 20, "compute", False, False],
            [4000000003, None, "graphics", False, False],
        ],
        True,
        True,
        "exclusive_process",
    ]
    assert second[1:] == ["ok", [], 0, 80 << 30, [], True, False, "default"]
    assert found["ranked"]["avoid"] == [["1", "0"], [0, 1], []]
    assert found["ranked"]["exclude"] == [
        ["1"],
        [0],
        [
            [
                "0",
                "busy: foreign processes 4000000001 (compute, not visible in this pid namespace), 4000000002 "
                "(compute, not visible in this pid namespace), 4000000003 (graphics, not visible in this pid "
                "namespace)",
            ]
        ],
    ]
    assert found["ranked"]["ignore"] == [["0", "1"], [0, 0], []]


def test_states_judge_health_and_never_offer_an_unhealthy_gpu():
    found = read_states(
        {
            "devices": [
                {"health": {"row_remap_pending": True}},
                {"health": {"inforom_corrupted": True}},
                {"health": {"ecc_uncorrected": 2}},
                {"health": {"recovery_action": "drain_and_reset"}},
                {"health": {"state_error": "RESET_REQUIRED"}},
                {},
            ]
        }
    )
    health = [s[1] for s in found["states"]]
    assert health[:4] == [
        "degraded: row remapping pending",
        "unhealthy: InfoROM corrupted",
        "unhealthy: 2 uncorrectable volatile ECC errors",
        "unhealthy: GPU recovery action: drain peer-to-peer traffic and reset the GPU",
    ]
    assert health[4].startswith("unhealthy: GPU reset required")
    indices, ranks, left_out = found["ranked"]["avoid"]
    assert (indices, ranks) == (["5", "0"], [0, 2])
    assert [index for index, _ in left_out] == ["1", "2", "3", "4"]


def test_not_supported_everywhere_is_no_finding():
    everything = [
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
        "processes",
    ]
    found = read_states(
        {
            "devices": [
                {
                    "not_supported": everything,
                    "processes": FOREIGN,
                    "cpu_affinity": "0",
                    "health": {"inforom_corrupted": True, "row_remap_failure": True},
                }
            ]
        }
    )
    assert found["devices"] == [[0, None, None]]
    assert found["states"] == [[0, "ok", [], None, None, [], True, False, None]]


def test_no_permission_on_the_process_queries_makes_them_unknown_not_busy():
    found = read_states({"devices": [{"no_permission": ["processes"], "processes": FOREIGN}]})
    assert found["states"][0][5:8] == [[], False, False]


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_own_process_and_its_taskmanager_are_not_foreign():
    code = """
import json, os, subprocess, sys
from flink_gpu import _native
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
try:
    nvml = _native.Nvml.open()
    as_owner = nvml.states(os.getpid())[0]
    as_worker = nvml.states(child.pid, os.getpid())[0]   # we are the child's TaskManager
    alone = nvml.states(child.pid)[0]
    print(json.dumps([as_owner.busy, as_worker.busy, alone.busy, [[p.own, p.visible] for p in alone.processes]]))
finally:
    child.kill()
"""
    import os

    spec = {"devices": [{"processes": [{"pid": os.getpid()}]}]}
    # the listed pid is this test process: the child interpreter's parent
    spec_code = code.replace("os.getpid())[0]\n    as_worker", "os.getppid())[0]\n    as_worker")
    spec_code = spec_code.replace("nvml.states(child.pid, os.getpid())", "nvml.states(child.pid, os.getppid())")
    assert json.loads(run_python(spec_code, env=simulated_env(spec=spec)).stdout) == [
        False,
        False,
        True,
        [[False, True]],
    ]


def test_states_and_the_discovery_reject_bad_input():
    with pytest.raises(TypeError):
        _native.DiscoveryOutcome()
    with pytest.raises(TypeError):
        _native.DeviceState()
    assert _native.BUSY_GPUS_VALUES == ("avoid", "exclude", "ignore")
    assert _native.find_taskmanager(os.getpid()) is None
    with pytest.raises(ValueError, match="positive"):
        _native.find_taskmanager(0)


def test_find_taskmanager_walks_up_to_the_taskmanager_runner(tmp_path):
    import subprocess
    import sys

    # a parent whose command line carries the TaskManager's main class, and its grandchild
    script = tmp_path / "tm.py"
    script.write_text(
        "import subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-c', 'import subprocess, sys; subprocess.run([sys.executable, \"-c\", "
        '"import os; from flink_gpu import _native; print(_native.find_taskmanager(os.getpid()), os.getppid())"])\'])\n'
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, str(script), "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    found, _ = out.split()
    assert int(found) == proc.pid


def test_simulator_spec_state_keys_are_checked_naming_the_key():
    for spec, words in [
        ({"devices": [{"health": {"inforom_corrupted": "yes"}}]}, "devices[0].health.inforom_corrupted"),
        ({"devices": [{"health": {"recovery_action": "pray"}}]}, "devices[0].health.recovery_action"),
        ({"devices": [{"processes": [{"used_memory": 1}]}]}, "devices[0].processes[0].pid"),
        ({"devices": [{"processes": [{"pid": 1, "kind": "cuda"}]}]}, "devices[0].processes[0].kind"),
        ({"devices": [{"cpu_affinity": "0-"}]}, "devices[0].cpu_affinity"),
        ({"devices": [{"not_supported": ["everything"]}]}, "devices[0].not_supported"),
        ({"devices": [{"compute_mode": "shared"}]}, "devices[0].compute_mode"),
        ({"devices": [{"memory_total": 10, "memory_used": 11}]}, "devices[0].memory_used"),
        ({"process_struct": "v4"}, "process_struct"),
    ]:
        with pytest.raises((TypeError, ValueError), match=__import__("re").escape(words)):
            simulator.environment(spec=spec)


def test_the_simulator_itself_rejects_a_bad_state_value_naming_the_key(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"health": {"ecc_uncorrected": -1}}]}))
    proc = run_python(
        "from flink_gpu import _native; _native.Nvml.open()", env=simulated_env(spec=str(spec)), check=False
    )
    assert proc.returncode != 0
    assert "devices[0].health.ecc_uncorrected" in proc.stderr


def test_the_loader_symbol_table_and_the_r535_detection():
    table = dict(_native.nvml_symbols())
    assert table["nvmlInit_v2"] == "required" and table["nvmlInit"] == "fallback"
    assert table["nvmlDeviceGetRunningProcessDetailList"] == "optional"
    probe = _native.probe_nvml_library(simulator.library_path())
    exported, resolved, api = probe.exported, probe.resolved, probe.process_api
    assert api == "detail_list" and set(resolved) <= set(exported) <= set(table)
    assert "nvmlInit" not in resolved  # a fallback is looked up only where the newer name is absent
    probe = _native.probe_nvml_library(simulator.library_path("r535"))
    exported, api = probe.exported, probe.process_api
    assert api == "v3_r535"
    assert "nvmlDeviceGetRunningProcessDetailList" not in exported


# --- MIG: a GPU in MIG mode contributes its MIG devices (docs/design.md §9.2) ------------------

MIG_HOST = {
    "devices": [
        {
            "uuid": "GPU-mig",
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:17:00.0",
            "memory_total": 80 << 30,
            "mig": {
                "mode": "enabled",
                "max_devices": 7,
                "instances": [
                    {"slot": 0, "uuid": "MIG-a", "memory_total": 10 << 30, "gi": 7, "ci": 0},
                    {"slot": 2, "uuid": "MIG-b", "memory_total": 20 << 30, "gi": 3, "ci": 1},
                    {"slot": 5, "uuid": "MIG-c", "memory_total": 40 << 30, "gi": 1, "ci": 0},
                ],
            },
        },
        {"uuid": "GPU-plain"},
    ]
}

LIST_UNITS = """
import json
from flink_gpu import _native
nvml = _native.Nvml.open()
found = nvml.devices()
devices = found.devices
print(json.dumps({
    "devices": [[d.gpu_index, d.index, d.mig_slot, d.uuid, d.memory_total, d.parent_index, d.parent_uuid, d.mig_gi,
                 d.mig_ci, d.name, d.pci_bus_id] for d in devices],
    "skipped": [[s.gpu_index, s.code, s.reason] for s in found.skipped],
    "notices": list(found.notices),
    "states": [[s.gpu_index, s.health, s.memory_used, [p.pid for p in s.processes]] for s in nvml.states(1)],
}))
"""


def list_units(spec):
    return json.loads(run_python(LIST_UNITS, env=simulated_env(spec=spec)).stdout)


def test_a_mig_gpu_gives_its_units_at_sparse_slots_next_to_a_plain_gpu():
    found = list_units(MIG_HOST)
    h100, bus = "NVIDIA H100 80GB HBM3", "00000000:17:00.0"
    assert found["devices"] == [
        ["0:0", 0, 0, "MIG-a", 10 << 30, 0, "GPU-mig", 7, 0, h100, bus],
        ["0:2", 0, 2, "MIG-b", 20 << 30, 0, "GPU-mig", 3, 1, h100, bus],
        ["0:5", 0, 5, "MIG-c", 40 << 30, 0, "GPU-mig", 1, 0, h100, bus],
        ["1", 1, None, "GPU-plain", 80 << 30, None, None, None, None, "NVIDIA Simulated GPU", "00000000:02:00.0"],
    ]
    assert found["skipped"] == [] and found["notices"] == []
    assert [s[0] for s in found["states"]] == ["0:0", "0:2", "0:5", "1"]


def test_a_unit_state_is_its_own_memory_and_processes_and_its_gpus_health():
    spec = json.loads(json.dumps(MIG_HOST))
    spec["devices"][0]["health"] = {"row_remap_pending": True}
    spec["devices"][0]["processes"] = [{"pid": 999}]
    spec["devices"][0]["mig"]["instances"][0].update(memory_used=1 << 30)  # a list that could hold something
    spec["devices"][0]["mig"]["instances"][1].update(memory_used=1 << 30, processes=[{"pid": 4242}])
    states = {s[0]: s for s in list_units(spec)["states"]}
    assert states["0:2"][2] == 1 << 30 and states["0:2"][3] == [4242]
    assert states["0:0"][3] == []  # the GPU's processes are not the unit's
    assert all(states[u][1].startswith("degraded") for u in ("0:0", "0:2", "0:5"))
    assert states["1"][1] == "ok"


def test_mig_enabled_without_instances_is_skipped_with_a_reason_and_a_pending_mode_is_noticed():
    found = list_units(
        {
            "devices": [
                {"mig": {"mode": "enabled", "pending": "disabled"}},
                {"mig": {"mode": "disabled", "pending": "enabled"}},
            ]
        }
    )
    assert [d[0] for d in found["devices"]] == ["1"]
    [(index, code, reason)] = found["skipped"]
    assert (index, code) == ("0", 6)  # NVML_ERROR_NOT_FOUND
    assert "MIG mode is enabled but it has no MIG instances" in reason
    assert found["notices"] == [
        "GPU 0: MIG mode pending a reset (now enabled, disabled after the GPU is reset).",
        "GPU 1: MIG mode pending a reset (now disabled, enabled after the GPU is reset).",
    ]
    assert [s[0] for s in found["states"]] == ["1"]


def test_unprivileged_the_mig_gpus_memory_is_withheld_but_its_units_answer():
    spec = {**MIG_HOST, "unprivileged": True}
    found = list_units(spec)
    assert [d[4] for d in found["devices"]] == [10 << 30, 20 << 30, 40 << 30, 80 << 30]
    proc = run_python(
        "import ctypes, os\n"
        "lib = ctypes.CDLL(os.environ['FLINK_GPU_NVML_LIBRARY'])\n"
        "assert lib.nvmlInit_v2() == 0\n"
        "h = ctypes.c_void_p(); assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0\n"
        "mem = (ctypes.c_ulonglong * 3)()\n"
        "print(lib.nvmlDeviceGetMemoryInfo(h, mem))\n",
        env=simulated_env(spec=spec),
    )
    assert proc.stdout.strip() == "4"  # NVML_ERROR_NO_PERMISSION


@pytest.mark.parametrize(
    "mig, key",
    [
        ({"mode": "on"}, "devices[0].mig.mode"),
        ({"mode": "enabled", "pending": 1}, "devices[0].mig.pending"),
        ({"mode": "enabled", "max_devices": 65}, "devices[0].mig.max_devices"),
        ({"mode": "enabled", "instances": [{"uuid": "MIG-x"}]}, "devices[0].mig.instances[0].slot"),
        ({"mode": "enabled", "max_devices": 2, "instances": [{"slot": 2}]}, "devices[0].mig.instances[0].slot"),
        ({"mode": "enabled", "instances": [{"slot": 1}, {"slot": 1}]}, "devices[0].mig.instances[1].slot"),
        ({"mode": "disabled", "instances": [{"slot": 0}]}, "devices[0].mig.instances"),
        ({"mode": "enabled", "instances": [{"slot": 0, "gi": -1}]}, "devices[0].mig.instances[0].gi"),
    ],
)
def test_a_bad_mig_spec_is_rejected_naming_the_key_by_both_checkers(tmp_path, mig, key):
    spec = {"devices": [{"mig": mig}]}
    with pytest.raises((TypeError, ValueError), match=key.replace("[", r"\[").replace("]", r"\]")):
        simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = run_python(
        "from flink_gpu import _native; _native.Nvml.open()", env=simulated_env(spec=str(path)), check=False
    )
    assert proc.returncode != 0 and key in proc.stderr


def test_the_unprivileged_key_must_be_a_boolean():
    with pytest.raises(ValueError, match="unprivileged must be true or false"):
        simulator.environment(spec={"unprivileged": "yes"})


def test_the_mig_entry_points_are_optional_in_the_loader_table():
    table = dict(_native.nvml_symbols())
    for name in (
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
    ):
        assert table[name] == "optional"


def test_the_reading_entry_points_are_optional_and_the_original_temperature_query_a_fallback():
    table = dict(_native.nvml_symbols())
    assert [
        table[name]
        for name in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperatureV", "nvmlDeviceGetPowerUsage")
    ] == ["optional"] * 3
    assert table["nvmlDeviceGetTemperature"] == "fallback"
    resolved = _native.probe_nvml_library(simulator.library_path()).resolved
    # both where the driver has both: a driver that refuses the versioned query is read through the original
    assert "nvmlDeviceGetTemperatureV" in resolved and "nvmlDeviceGetTemperature" in resolved
    probe = _native.probe_nvml_library(simulator.library_path("r535"))
    exported, resolved = probe.exported, probe.resolved
    assert "nvmlDeviceGetTemperatureV" not in exported and "nvmlDeviceGetTemperature" in resolved


# ---- NVML's reads need a thread ------------------------------------------------------------------


# An unprivileged process that may start no thread (RLIMIT_NPROC 1: itself) opens NVML, whose reads run on a
# thread of their own (csrc/nvml/deadline.cpp).
NO_THREAD_CHILD = """
import os, resource
from flink_gpu.nvml import open_library
os.setgid(65534)
os.setuid(65534)
resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
try:
    open_library()
except OSError as error:
    print(str(error))
"""


@pytest.mark.usefixtures("no_leaks")
def test_a_thread_that_cannot_start_is_an_os_error_of_one_sentence_naming_the_library():
    """The core's sentence does not name the library, so OSError's filename does, after it: "...: '<path>'",
    never "....: '<path>'"."""
    said = run_child(NO_THREAD_CHILD, env=child_env(devices=1))
    assert said == (
        f"[Errno {errno.EAGAIN}] Could not start a thread to read NVML with a deadline: {os.strerror(errno.EAGAIN)}: "
        f"'{simulator.library_path()}'\n"
    )
