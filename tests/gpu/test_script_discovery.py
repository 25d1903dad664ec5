"""The discovery-script backend (docs/design.md §3.2-3.3) with real scripts and real processes.

The first block mirrors every case of Flink's GPUDriverTest; then the parsing rules, the command
line, and the process handling Flink gets wrong (timeouts, big output, descriptors, zombies).
"""

import logging
import os
import re
import signal
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flink_gpu import Configuration, FlinkException, GPUDriverFactory, GPUInfo, IllegalConfigurationException
from flink_gpu.gpu import script_discovery as script_module
from support.faults import children, proc_stat, running, script_driver, wait_gone

LOGGER = "flink_gpu.gpu.script_discovery"

# Flink's testing-gpu-discovery.sh, in spirit: prints 0..amount-1, or fails on request.
TESTING_SCRIPT = """#!/bin/sh
if [ "$2" = "--exit-non-zero" ]; then
  echo "some output"
  echo "something went wrong" >&2
  exit 1
fi
i=0; out=""
while [ $i -lt "$1" ]; do out="$out${out:+,}$i"; i=$((i+1)); done
echo "$out"
"""


def write_script(directory, body, name="discovery.sh", mode=0o755):
    path = directory / name
    path.write_text(body) if isinstance(body, str) else path.write_bytes(body)
    path.chmod(mode)
    return str(path)


def printing_script(tmp_path, output: bytes, name="print.sh"):
    """A script that writes exactly ``output`` to stdout (bytes, via a data file)."""
    data = tmp_path / (name + ".out")
    data.write_bytes(output)
    return write_script(tmp_path, f"#!/bin/sh\ncat '{data}'\n", name)


def driver(path, **params):
    config = {"discovery-script.path": path}
    config.update({key.replace("_", "-"): value for key, value in params.items()})
    return GPUDriverFactory().create_external_resource_driver(Configuration(config))


def indices(infos):
    return sorted(info.get_property("index") for info in infos)


# --- Flink's GPUDriverTest -----------------------------------------------------------------------


def test_gpu_driver_with_test_script(tmp_path):
    infos = driver(write_script(tmp_path, TESTING_SCRIPT)).retrieve_resource_info(2)
    assert isinstance(infos, frozenset)
    assert infos == {GPUInfo("0"), GPUInfo("1")}
    assert all(type(info) is GPUInfo for info in infos)


@pytest.mark.parametrize("amount", [-1, 0])
def test_gpu_driver_with_invalid_amount(tmp_path, amount):
    gpu_driver = driver(write_script(tmp_path, TESTING_SCRIPT))
    with pytest.raises(
        ValueError, match="^The gpuAmount should be positive when retrieving the GPU resource information.$"
    ):
        gpu_driver.retrieve_resource_info(amount)


@pytest.mark.parametrize("blank", [" ", "", "\t\n"])
def test_gpu_driver_with_illegal_config(blank):
    with pytest.raises(IllegalConfigurationException, match="discovery-script.path"):
        driver(blank)


def test_gpu_driver_with_test_script_do_not_exist(tmp_path, monkeypatch):
    monkeypatch.delenv("FLINK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    expected = f"The gpu discovery script does not exist in path {tmp_path}/invalid/path."
    with pytest.raises(FileNotFoundError) as error:
        driver("invalid/path")
    assert str(error.value) == expected


def test_gpu_driver_with_inexecutable_script(tmp_path):
    path = write_script(tmp_path, TESTING_SCRIPT, mode=0o644)
    with pytest.raises(FlinkException) as error:
        driver(path)
    assert str(error.value) == f"The discovery script {path} is not executable."


def test_gpu_driver_with_test_script_exit_with_non_zero(tmp_path, caplog):
    gpu_driver = driver(write_script(tmp_path, TESTING_SCRIPT), **{"discovery-script.args": "--exit-non-zero"})
    with caplog.at_level(logging.WARNING, LOGGER):
        with pytest.raises(FlinkException) as error:
            gpu_driver.retrieve_resource_info(1)
    assert str(error.value) == "Discovery script exit with non-zero return code: 1."
    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith("Discovery script exit with 1.")
    assert "STDOUT: some output" in message and "STDERR: something went wrong" in message


# --- construction (docs/design.md §3.2) ----------------------------------------------------------------------


def test_relative_path_resolves_against_flink_home(tmp_path, monkeypatch):
    home = tmp_path / "flink"
    (home / "plugins" / "gpu").mkdir(parents=True)
    write_script(home / "plugins" / "gpu", TESTING_SCRIPT, "discover.sh")
    monkeypatch.setenv("FLINK_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert indices(driver("plugins/gpu/discover.sh").retrieve_resource_info(3)) == ["0", "1", "2"]
    with pytest.raises(FileNotFoundError, match=f"in path {home}/nope.sh"):
        driver("nope.sh")


@pytest.mark.parametrize("flink_home", [None, ""])
def test_relative_path_resolves_against_cwd_without_flink_home(tmp_path, monkeypatch, flink_home):
    if flink_home is None:
        monkeypatch.delenv("FLINK_HOME", raising=False)
    else:
        monkeypatch.setenv("FLINK_HOME", flink_home)
    write_script(tmp_path, TESTING_SCRIPT, "discover.sh")
    monkeypatch.chdir(tmp_path)
    assert indices(driver("discover.sh").retrieve_resource_info(1)) == ["0"]


def test_directory_is_not_executable(tmp_path):
    with pytest.raises(FlinkException, match="is not executable. It is a directory"):
        driver(str(tmp_path))


def test_check_script_raises_typed_errors_with_the_absolute_path(tmp_path, monkeypatch):
    from flink_gpu.gpu.script_discovery import DiscoveryScriptNotExecutable, DiscoveryScriptNotFound, check_script

    monkeypatch.delenv("FLINK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DiscoveryScriptNotFound) as missing:
        check_script("no/such.sh", "k")
    assert missing.value.path == f"{tmp_path}/no/such.sh"
    assert isinstance(missing.value, FileNotFoundError)
    assert str(missing.value) == f"The gpu discovery script does not exist in path {tmp_path}/no/such.sh."
    plain = write_script(tmp_path, TESTING_SCRIPT, mode=0o644)
    for path, message in (
        (plain, f"The discovery script {plain} is not executable."),
        (str(tmp_path), f"The discovery script {tmp_path} is not executable. It is a directory."),
    ):
        with pytest.raises(DiscoveryScriptNotExecutable) as refused:
            check_script(path, "k")
        assert refused.value.path == path and str(refused.value) == message
        assert isinstance(refused.value, FlinkException)


def test_nothing_runs_at_construction(tmp_path):
    marker = tmp_path / "ran"
    driver(write_script(tmp_path, f"#!/bin/sh\ntouch '{marker}'\necho 0\n"))
    assert not marker.exists()


# --- parsing (docs/design.md §3.3 steps 5-6) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "output, expected",
    [
        (b"0,1\n", ["0", "1"]),
        (b" 0 , 1,,  ,2 ", ["0", "1", "2"]),
        (b",0,1,\r\n", ["0", "1"]),
        (b"0\t1\n", ["0\t1"]),  # a tab is not a separator, only trimmed at ends
        (b"0,0,1,1\n", ["0", "1"]),  # duplicates collapse
        (b"0,1,2,3\n", ["0", "1", "2", "3"]),  # the count is not checked against the amount
        (b"", []),
        (b"\n", []),
        (b",,\n", []),
        ("0,\u00a0,1".encode(), ["0", "1", "\u00a0"]),  # U+00A0 is not Java whitespace: kept
        (b"0,\x1c,1", ["0", "1"]),  # \x1c alone is Java whitespace: dropped
        ("0,\u2003,1".encode(), ["0", "1"]),  # U+2003 alone: dropped
        (" \u2003 1\u2003 ".encode(), ["\u2003 1\u2003"]),  # trim strips <= U+0020 only
        (b"\x1c2\x1f", ["2"]),  # ... which includes \x1c-\x1f
        (b"0,\xff1\n", ["0", "\ufffd1"]),  # invalid UTF-8 is replaced, as Java does
        (b"\xef\xbb\xbf0,1", ["\ufeff0", "1"]),  # a BOM is not stripped (as Java)
    ],
)
def test_parsing(tmp_path, output, expected):
    infos = driver(printing_script(tmp_path, output)).retrieve_resource_info(2)
    assert indices(infos) == sorted(expected)


@pytest.mark.parametrize(
    "output, first",
    [
        (b"0,1\n2,3\n", ["0", "1"]),
        (b"0,1\r2,3", ["0", "1"]),  # a lone CR ends a line too
        (b"0,1\r\n2,3\r\n", ["0", "1"]),
        (b"\n0,1\n", []),  # an empty first line: empty set, no error
        (b"0\x0b1\n2", ["0\x0b1"]),  # vertical tab does not end a line
        ("0\u20281\n2".encode(), ["0\u20281"]),  # nor does U+2028 (unlike str.splitlines)
    ],
)
def test_only_the_first_line_counts(tmp_path, caplog, output, first):
    with caplog.at_level(logging.WARNING, LOGGER):
        infos = driver(printing_script(tmp_path, output)).retrieve_resource_info(2)
    assert indices(infos) == first
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(
        "The output of the discovery script should only contain one single line. Finding 2 lines with content: ["
    )
    assert warning.getMessage().endswith("]. Will only keep the first line.")


def test_multi_line_warn_lists_lines_like_java(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        driver(printing_script(tmp_path, b"0,1\n2\n3\n")).retrieve_resource_info(2)
    assert caplog.records[0].getMessage() == (
        "The output of the discovery script should only contain one single line. Finding 3 lines "
        "with content: [0,1, 2, 3]. Will only keep the first line."
    )


def test_info_line(tmp_path, caplog):
    with caplog.at_level(logging.INFO, LOGGER):
        driver(printing_script(tmp_path, b"0,1\n")).retrieve_resource_info(2)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "Discover GPU resources: [GPU Device(0), GPU Device(1)]."
    ]


def test_info_line_for_no_gpu(tmp_path, caplog):
    with caplog.at_level(logging.INFO, LOGGER):
        assert driver(printing_script(tmp_path, b"")).retrieve_resource_info(1) == frozenset()
    assert caplog.records[-1].getMessage() == "Discover GPU resources: []."


# --- the command line (docs/design.md §3.3 step 2) ----------------------------------------------------------

ARGV_SCRIPT = """#!/bin/sh
for a in "$@"; do printf '%s\\0' "$a"; done > "$(dirname "$0")/argv"
echo 0
"""


def recorded_argv(tmp_path, **params):
    path = write_script(tmp_path, ARGV_SCRIPT, "argv.sh")
    driver(path, **params).retrieve_resource_info(3)
    return (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]


def test_unset_args_pass_the_literal_null(tmp_path):
    assert recorded_argv(tmp_path) == ["3", "null"]


def test_empty_args_pass_nothing(tmp_path):
    assert recorded_argv(tmp_path, **{"discovery-script.args": ""}) == ["3"]
    assert recorded_argv(tmp_path, **{"discovery-script.args": " \t "}) == ["3"]


def test_args_split_on_java_whitespace_only(tmp_path):
    args = "a\tb\nc\rd\fe  f\x0bg\u00a0h"
    assert recorded_argv(tmp_path, **{"discovery-script.args": args}) == ["3", "a", "b", "c", "d", "e", "f\x0bg\u00a0h"]


def test_quotes_are_kept_literally_and_nothing_is_expanded(tmp_path):
    args = "--coordination-file '/tmp/a b' \"$HOME\" `id` ;x"
    assert recorded_argv(tmp_path, **{"discovery-script.args": args}) == [
        "3",
        "--coordination-file",
        "'/tmp/a",
        "b'",
        '"$HOME"',
        "`id`",
        ";x",
    ]


def test_a_path_with_spaces_works(tmp_path):
    # Flink splits the path too and fails; the path is one argv entry here
    directory = tmp_path / "my scripts"
    directory.mkdir()
    assert indices(driver(write_script(directory, TESTING_SCRIPT)).retrieve_resource_info(2)) == ["0", "1"]


def test_script_without_interpreter_line_runs_with_sh(tmp_path):
    # the JVM (like execvp) runs such a script with /bin/sh; scripts that work under Flink work here
    path = write_script(tmp_path, 'echo "0,$1"\n', "noshebang.sh")
    assert indices(driver(path).retrieve_resource_info(5)) == ["0", "5"]


def test_script_that_cannot_start(tmp_path):
    path = write_script(tmp_path, "#!/nonexistent/interpreter\n", "broken.sh")
    with pytest.raises(FlinkException, match=f"Could not start the discovery script {path}"):
        driver(path).retrieve_resource_info(1)


# --- exit status ---------------------------------------------------------------------------------


def test_failure_warn_quotes_a_bounded_part_of_the_output(tmp_path, caplog):
    path = write_script(tmp_path, "#!/bin/sh\necho begin >&2\nhead -c 1000000 /dev/zero | tr '\\0' x >&2\nexit 2\n")
    with caplog.at_level(logging.WARNING, LOGGER):
        with pytest.raises(FlinkException, match="return code: 2"):
            driver(path).retrieve_resource_info(1)
    message = caplog.records[0].getMessage()
    assert "STDERR: begin\nxxx" in message
    assert message.endswith("... (983622 more characters)")
    assert len(message) < 20_000


def test_signal_death_is_named(tmp_path):
    path = write_script(tmp_path, "#!/bin/sh\necho partial\nkill -TERM $$\n")
    with pytest.raises(FlinkException) as error:
        driver(path).retrieve_resource_info(1)
    assert str(error.value) == (
        "Discovery script exit with non-zero return code: 143. It was killed by signal 15 (SIGTERM)."
    )


def test_exit_code_is_reported_verbatim(tmp_path):
    path = write_script(tmp_path, "#!/bin/sh\nexit 42\n")
    with pytest.raises(
        FlinkException,
        match=r"^Discovery script exit with non-zero return code: "
        r"42\.$",
    ):
        driver(path).retrieve_resource_info(1)


# --- process handling Flink gets wrong -----------------------------------------------------------


def test_timeout_kills_the_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    path = write_script(tmp_path, f"#!/bin/sh\nsleep 60 &\necho $! > '{pids}'\nsleep 60\n")
    gpu_driver = driver(path, **{"discovery-script.timeout": "300 ms"})
    started = time.monotonic()
    with pytest.raises(TimeoutError) as error:
        gpu_driver.retrieve_resource_info(1)
    assert time.monotonic() - started < 5
    assert str(error.value) == "The discovery script executed for over 300 ms."
    grandchild = int(pids.read_text())
    assert wait_gone(grandchild), f"grandchild {grandchild} survived the timeout"


def test_grandchild_holding_the_pipe_does_not_hang(tmp_path):
    # the script itself exits at once, but a background child keeps stdout open: Java would
    # block forever reading it; here the timeout covers it and the child is killed
    pids = tmp_path / "pids"
    path = write_script(tmp_path, f"#!/bin/sh\nsleep 60 &\necho $! > '{pids}'\necho 0,1\n")
    with pytest.raises(TimeoutError, match="over 250 ms"):
        driver(path, **{"discovery-script.timeout": "250 ms"}).retrieve_resource_info(2)
    assert wait_gone(int(pids.read_text()))


def test_default_timeout_is_flinks():
    from flink_gpu import GPUDriverOptions

    assert GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT.key == "discovery-script.timeout"
    assert GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT.default_value == 10.0
    assert str(script_module._timeout(10.0)) == "The discovery script executed for over 10000 ms."


def test_huge_output_does_not_hang(tmp_path, caplog):
    # 8 MiB on stdout and on stderr: Flink's waitFor-then-read deadlocks at 64 KiB
    path = write_script(
        tmp_path,
        """#!/bin/sh
echo 0,1
head -c 8388608 /dev/zero | tr '\\0' '7' | fold -w 1024
head -c 8388608 /dev/zero >&2
""",
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, LOGGER):
        infos = driver(path, **{"discovery-script.timeout": "20 s"}).retrieve_resource_info(2)
    assert time.monotonic() - started < 15
    assert indices(infos) == ["0", "1"]
    [warning] = caplog.records
    assert "Finding 8193 lines with content: [0,1, 777" in warning.getMessage()
    assert "more lines)]. Will only keep the first line." in warning.getMessage()
    assert len(warning.getMessage()) < 10_000  # a readable log line, not 8 MiB


def test_output_beyond_the_limit_is_drained_and_dropped(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(script_module, "_OUTPUT_LIMIT", 1024)
    path = write_script(tmp_path, "#!/bin/sh\nprintf 0,1,\nhead -c 1000000 /dev/zero | tr '\\0' 9\n")
    with caplog.at_level(logging.WARNING, LOGGER):
        infos = driver(path).retrieve_resource_info(2)
    assert len(infos) == 3  # "0", "1" and the first 1020 nines
    assert "wrote more than 1024 bytes" in caplog.records[0].getMessage()


def test_stdin_is_empty_not_a_pipe_left_open(tmp_path):
    # a script reading stdin gets EOF at once (Flink leaves it an open pipe: a hang)
    path = write_script(tmp_path, "#!/bin/sh\ncat > /dev/null\necho 4\n")
    assert indices(driver(path, **{"discovery-script.timeout": "5 s"}).retrieve_resource_info(1)) == ["4"]


def test_no_descriptor_is_inherited_and_none_leaks(tmp_path):
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        path = write_script(tmp_path, "#!/bin/sh\nls /proc/$$/fd | tr '\\n' ,\n")
        gpu_driver = driver(path)
        before = sorted(os.listdir("/proc/self/fd"))
        for _ in range(5):
            script_fds = indices(gpu_driver.retrieve_resource_info(1))
        assert sorted(os.listdir("/proc/self/fd")) == before
        assert {"0", "1", "2"} <= set(script_fds)
        assert str(write_end) not in script_fds
    finally:
        os.close(read_end)
        os.close(write_end)


def test_children_are_reaped(tmp_path):
    before = children()
    gpu_driver = driver(write_script(tmp_path, TESTING_SCRIPT))
    for _ in range(3):
        gpu_driver.retrieve_resource_info(1)
    with pytest.raises(FlinkException):
        driver(write_script(tmp_path, "#!/bin/sh\nexit 3\n", "fail.sh")).retrieve_resource_info(1)
    with pytest.raises(TimeoutError):
        driver(
            write_script(tmp_path, "#!/bin/sh\nsleep 30\n", "slow.sh"), **{"discovery-script.timeout": "100 ms"}
        ).retrieve_resource_info(1)
    assert children() <= before  # no child left behind, zombie or not


def test_script_runs_in_its_own_session(tmp_path):
    path = write_script(tmp_path, "#!/bin/sh\ncut -d' ' -f6 /proc/$$/stat\n")
    [sid] = indices(driver(path).retrieve_resource_info(1))
    assert int(sid) != os.getsid(0)


# --- a discovery-script.timeout longer than epoll's limit (~24.8 days) works ---------------------


def test_script_with_a_timeout_of_thirty_days_runs(tmp_path):
    from flink_gpu import GPUDriver, GPUInfo

    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 0\n")
    script.chmod(0o755)
    with GPUDriver({"discovery-script.path": str(script), "discovery-script.timeout": "30 d"}) as driver:
        assert driver.retrieve_resource_info(1) == {GPUInfo("0")}  # was OverflowError


# ---- scripts that misbehave, and whatever bytes a script prints ----------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_script_killing_its_own_process_group_cannot_touch_the_caller(tmp_path):
    # `kill 0` signals the caller's group; Flink runs the script in the TaskManager's group
    pids = tmp_path / "pids"
    gpu_driver = script_driver(tmp_path, f"#!/bin/sh\nsleep 600 &\necho $! > '{pids}'\nkill -TERM 0\nsleep 5\n")
    with pytest.raises(FlinkException, match=r"return code: 143\. It was killed by signal 15 \(SIGTERM\)"):
        gpu_driver.retrieve_resource_info(1)
    assert wait_gone(int(pids.read_text()))  # its own background child went with it


@pytest.mark.usefixtures("no_leaks")
def test_script_closing_its_output_then_hanging_times_out(tmp_path):
    gpu_driver = script_driver(tmp_path, "#!/bin/sh\necho 0\nexec >&- 2>&-\nsleep 600\n", timeout="300 ms")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="over 300 ms"):
        gpu_driver.retrieve_resource_info(1)
    assert time.monotonic() - started < 3


@pytest.mark.usefixtures("no_leaks")
def test_grandchild_that_left_the_process_group_is_killed_on_timeout(tmp_path):
    # setsid escapes the process-group kill; holding the script's output pipe, it is still the script's
    pids = tmp_path / "pids"
    gpu_driver = script_driver(
        tmp_path, f"#!/bin/sh\nsetsid sleep 600 &\necho $! > '{pids}'\necho 0,1\n", timeout="300 ms"
    )
    try:
        with pytest.raises(TimeoutError):
            gpu_driver.retrieve_resource_info(2)
        assert wait_gone(int(pids.read_text()), 2)
    finally:
        if running(int(pids.read_text())):
            os.kill(int(pids.read_text()), signal.SIGKILL)


@pytest.mark.usefixtures("no_leaks")
def test_invalid_utf8_output_is_replaced_like_java(tmp_path):
    # Java's decoder and Python's "replace" both give one U+FFFD per malformed byte here
    gpu_driver = script_driver(tmp_path, b"#!/bin/sh\nprintf '0,\\377,1\\376, \\355\\240\\200 \\n'\n")
    assert indices(gpu_driver.retrieve_resource_info(2)) == ["0", "1\ufffd", "\ufffd", "\ufffd\ufffd\ufffd"]


@pytest.mark.usefixtures("no_leaks")
def test_a_control_character_index_is_a_clear_error_as_in_flink(tmp_path):
    # "\x01" is not Java whitespace, so Flink keeps the field, trims it to "" and GPUInfo rejects it
    gpu_driver = script_driver(tmp_path, b"#!/bin/sh\nprintf '0,\\001\\n'\n")
    with pytest.raises(ValueError, match="must not be blank"):
        gpu_driver.retrieve_resource_info(1)


@pytest.mark.usefixtures("no_leaks")
def test_a_megabyte_line_of_indices_parses_in_linear_time(tmp_path):
    count = 60_000  # 350 KB: Flink collects into a HashSet; a quadratic de-duplication takes > 10 s
    gpu_driver = script_driver(tmp_path, f"#!/bin/sh\nseq -s, 0 {count - 1}\n", timeout="20 s")
    started = time.monotonic()
    infos = gpu_driver.retrieve_resource_info(1)
    assert len(infos) == count
    assert time.monotonic() - started < 3


@pytest.mark.usefixtures("no_leaks")
def test_script_dying_by_a_signal_while_its_child_still_runs(tmp_path):
    # the child keeps no pipe open: the death is reported at once and the child is not waited for
    pids = tmp_path / "pids"
    gpu_driver = script_driver(
        tmp_path, f"#!/bin/sh\nsleep 600 >/dev/null 2>&1 &\necho $! > '{pids}'\necho 0\nkill -SEGV $$\n"
    )
    started = time.monotonic()
    with pytest.raises(FlinkException, match=r"return code: 139\. It was killed by signal 11 \(SIGSEGV\)"):
        gpu_driver.retrieve_resource_info(1)
    assert time.monotonic() - started < 3
    child = int(pids.read_text())
    try:
        # documented: a background child that holds none of the script's pipes is the script's business
        # (as in Flink); it was not started by us, so it is not reaped here and leaks no zombie to us
        assert proc_stat(child) is None or proc_stat(child)[1] != os.getpid()
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


# java.lang.Character.isWhitespace
JAVA_WHITESPACE = set("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \u1680\u2028\u2029\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B) if c != 0x2007
}


def java_lines(text):
    """BufferedReader#lines(): ends at \\n, \\r or \\r\\n; no empty line after a final terminator."""
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines[-1] == "" else lines


def java_indices(line):
    """GPUDriver: split(","), drop isNullOrWhitespaceOnly fields, trim() (chars <= U+0020), a set."""
    out = []
    for field in line.split(","):
        if not all(c in JAVA_WHITESPACE for c in field):
            index = field.strip("".join(map(chr, range(0x21))))
            if index not in out:
                out.append(index)
    return out


@pytest.mark.usefixtures("no_leaks")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    output=st.binary(max_size=64)
    | st.text(alphabet="0123, \t\r\n\x00\x01\x1c\u2003\u00a0\u2028é", max_size=40).map(lambda t: t.encode())
)
def test_any_script_output_gives_flinks_result(tmp_path, output):
    """A real script prints arbitrary bytes; the driver's answer is Java's: UTF-8 with replacement,
    BufferedReader lines, the first line only, Flink's split/filter/trim, GPUInfo rejecting an index that is
    whitespace only (isNullOrWhitespaceOnly, which a trimmed field can still be)."""
    data = tmp_path / "output"
    data.write_bytes(output)
    gpu_driver = script_driver(tmp_path, f"#!/bin/sh\ncat '{data}'\n")
    lines = java_lines(output.decode("utf-8", "replace"))
    expected = java_indices(lines[0]) if lines else []
    if any(all(c in JAVA_WHITESPACE for c in index) for index in expected):  # "\x01" -> "", "\x01\u2003" -> "\u2003"
        with pytest.raises(ValueError, match="must not be blank"):
            gpu_driver.retrieve_resource_info(1)
    else:
        assert indices(gpu_driver.retrieve_resource_info(1)) == sorted(expected)
