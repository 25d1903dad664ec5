"""flink_gpu.pyflink without a cluster: the process-mode lookup with real processes, real files and
the real native coordination and NVML code on the simulator; the thread-mode conversion on a
stand-in for the Java context (the real one runs in test_pyflink_cluster.py)."""

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import run_python, simulated_env
from flink_gpu import GPUInfo, NotEnoughGpusError, SlotUnknownError, coordination
from flink_gpu.coordination import DEFAULT_PATH as DEFAULT_COORDINATION_FILE
from flink_gpu.pyflink import get_external_resource_infos, lookup_external_resource_infos
from support.faults import child_env, run_child
from support.java_context import JavaInfo, JavaRuntimeContext, JavaSubtaskContext, PyFlinkContext

# the tests folder, for a child process that imports support.… (pytest's pythonpath has it for this one)
TESTS = os.path.dirname(os.path.abspath(__file__))
SIM_UUID = "GPU-00000000-0000-4000-8000-{:012x}"
GPU_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"


def write_conf(conf_dir, args, resources="gpu", legacy=False, extra=""):
    conf_dir.mkdir(parents=True, exist_ok=True)
    if legacy:
        (conf_dir / "flink-conf.yaml").write_text(
            f"external-resources: {resources}\n"
            "external-resource.gpu.amount: 2\n"
            f"external-resource.gpu.driver-factory.class: {GPU_FACTORY}\n"
            f"external-resource.gpu.param.discovery-script.args: {args}\n{extra}"
        )
    else:
        (conf_dir / "config.yaml").write_text(
            textwrap.dedent(f"""\
            external-resources: {resources}
            external-resource:
              gpu:
                amount: 2
                driver-factory:
                  class: {GPU_FACTORY}
                param:
                  discovery-script:
                    args: {args}
            """)
            + extra
        )
    return conf_dir


@pytest.fixture
def tm_conf(tmp_path, monkeypatch):
    """A TaskManager configuration in coordination mode with its own coordination file."""
    path = tmp_path / "coordination"
    conf_dir = write_conf(tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}")
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    return conf_dir, path


# -- process mode with real processes -------------------------------------------------------------

# The "TaskManager": claims GPUs in the file as the discovery would for its JVM, then starts its Python
# worker the way Flink does (a shell in between), which looks its GPUs up and prints them.
TASKMANAGER = """
import json, os, subprocess, sys
from flink_gpu import coordination
path, amount, offer = ARGS
claimed = coordination.claim(amount, offer, path=path).taken
worker = '''
import json, os
from flink_gpu.pyflink import lookup_external_resource_infos
lookup = lookup_external_resource_infos(None, "gpu")
print(json.dumps({"pid": os.getpid(), "mode": lookup.mode, "reason": lookup.reason,
                  "holder": lookup.holder_pid, "file": lookup.coordination_file,
                  "infos": sorted(({k: i.get_property(k) for k in i.get_keys()} for i in lookup.infos),
                                  key=lambda p: p["index"])}))
'''
# sh runs python as a child (not exec: a command follows), as pyflink-udf-runner.sh does
shell = subprocess.run(["/bin/sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, worker],
                       capture_output=True, text=True, timeout=60)
print(json.dumps({"pid": os.getpid(), "claimed": claimed, "worker": shell.stdout, "stderr": shell.stderr}))
"""


def start_taskmanager(env, path, amount, offer="0,1,2,3"):
    return run_python(f"ARGS = ({str(path)!r}, {amount}, {offer.split(',')!r})\n" + TASKMANAGER, env=env)


def worker_result(proc):
    outer = json.loads(proc.stdout)
    assert outer["worker"], f"the worker printed nothing; stderr:\n{outer['stderr']}"
    return outer, json.loads(outer["worker"])


def test_grandchild_of_the_holder_gets_its_gpus_with_nvml_properties(tm_conf):
    conf_dir, path = tm_conf
    env = simulated_env(devices=4)
    outer, worker = worker_result(start_taskmanager(env, path, 2))
    assert outer["claimed"] == ["0", "1"]
    assert worker["mode"] == "process" and worker["reason"] is None
    assert worker["holder"] == outer["pid"] != worker["pid"]
    assert worker["file"] == str(path)
    assert [info["index"] for info in worker["infos"]] == ["0", "1"]
    for info in worker["infos"]:
        i = int(info["index"])
        assert info["uuid"] == SIM_UUID.format(i)
        assert info["name"] == "NVIDIA Simulated GPU"
        assert info["pci.bus-id"] == f"00000000:{i + 1:02x}:00.0"
        assert info["memory.total"] == str(80 * 1024**3)
        assert info["minor-number"] == str(i)


def test_two_taskmanagers_on_one_file_see_disjoint_gpus(tm_conf):
    _, path = tm_conf
    env = simulated_env(devices=4)
    # the first one stays alive (holding 0,1) while the second one claims and looks up
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        from flink_gpu import coordination
        print(",".join(coordination.claim(2, ["0", "1", "2", "3"], path={str(path)!r}).taken), flush=True)
        sys.stdin.read()
        """),
        ],
        env=run_env(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "0,1"
        outer, worker = worker_result(start_taskmanager(env, path, 2))
        assert outer["claimed"] == ["2", "3"]
        assert [info["index"] for info in worker["infos"]] == ["2", "3"]
        assert worker["holder"] == outer["pid"]
    finally:
        holder.stdin.close()
        holder.wait(30)


def run_env(env):
    import flink_gpu

    env = dict(env)
    root = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def test_nearest_holding_ancestor_wins(tm_conf, tmp_path):
    """This process (the worker's grandparent) holds GPUs too; the worker's parent's are the ones."""
    _, path = tm_conf
    mine = coordination.claim(1, ["3"], path=path).taken
    try:
        outer, worker = worker_result(start_taskmanager(simulated_env(devices=4), path, 2))
        assert mine == ["3"] and outer["claimed"] == ["0", "1"]
        assert worker["holder"] == outer["pid"]
        assert [info["index"] for info in worker["infos"]] == ["0", "1"]
    finally:
        coordination.release(path=path)


def test_the_caller_itself_may_be_the_holder(tm_conf):
    _, path = tm_conf
    coordination.claim(2, ["1", "2", "10"], path=path)
    try:
        lookup = lookup_external_resource_infos(None, "gpu")
        assert lookup.holder_pid == os.getpid()
        assert sorted(info.index for info in lookup.infos) == ["1", "2"]
    finally:
        coordination.release(path=path)


def test_a_dead_holders_entries_are_not_reported(tm_conf):
    _, path = tm_conf
    run_python(f"from flink_gpu import coordination; coordination.claim(2, ['0', '1'], path={str(path)!r})")
    assert path.read_text().count("\n") == 2  # a dead owner's entries stay until reclaimed
    lookup = lookup_external_resource_infos(None, "gpu")
    assert lookup.infos == frozenset()
    assert "no live entry" in lookup.reason and str(os.getpid()) in lookup.reason


def test_an_entry_of_a_previous_process_with_an_ancestors_pid_is_not_its(tm_conf):
    """PID reuse: the line names this process's pid but another start time, so it is a dead owner's."""
    _, path = tm_conf
    start = coordination.process_start_time(os.getpid())
    path.write_text(f"2 {os.getpid()}\t{start - 1}\n")
    assert lookup_external_resource_infos(None, "gpu").infos == frozenset()
    path.write_text(f"2 {os.getpid()}\t{start}\n")
    assert lookup_external_resource_infos(None, "gpu").infos == {GPUInfo("2")}


def test_without_nvml_the_infos_carry_the_index(tm_conf, tmp_path):
    _, path = tm_conf
    env = simulated_env(devices=4)
    env["FLINK_GPU_NVML_LIBRARY"] = str(tmp_path / "no-such-libnvidia-ml.so.1")
    _, worker = worker_result(start_taskmanager(env, path, 2))
    assert worker["reason"] is None
    assert worker["infos"] == [{"index": "0"}, {"index": "1"}]


def test_nvml_library_path_from_the_resource_configuration(tmp_path, monkeypatch):
    """``param.nvml.library-path`` in the TaskManager's configuration is the NVML the worker loads."""
    from flink_gpu import simulator

    path = tmp_path / "coordination"
    conf_dir = write_conf(
        tmp_path / "conf",
        f"--enable-coordination-mode --coordination-file {path}",
        extra=f"external-resource.gpu.param.nvml.library-path: {simulator.library_path()}\n",
    )
    env = simulated_env(devices=4)
    env.pop("FLINK_GPU_NVML_LIBRARY")
    env["FLINK_CONF_DIR"] = str(conf_dir)
    _, worker = worker_result(start_taskmanager(env, path, 2))
    assert worker["infos"][0]["uuid"] == SIM_UUID.format(0)


# -- FLINK_CONF_DIR parsing -----------------------------------------------------------------------


def test_legacy_flink_conf_yaml_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "coord-legacy"
    conf_dir = write_conf(tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}", legacy=True)
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    coordination.claim(2, ["0", "1"], path=path)
    try:
        lookup = lookup_external_resource_infos(None, "gpu")
        assert lookup.coordination_file == str(path)
        assert sorted(info.index for info in lookup.infos) == ["0", "1"]
    finally:
        coordination.release(path=path)


def test_coordination_mode_without_a_file_uses_the_stock_default(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_CONF_DIR", str(write_conf(tmp_path / "conf", "--enable-coordination-mode")))
    assert lookup_external_resource_infos(None, "gpu").coordination_file == DEFAULT_COORDINATION_FILE


def test_the_resource_name_selects_the_keys(tmp_path, monkeypatch):
    path = tmp_path / "fpga-coordination"
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "config.yaml").write_text(
        "external-resources: [gpu, fpga]\n"
        + "".join(
            f"external-resource.{name}.amount: 1\nexternal-resource.{name}.driver-factory.class: {GPU_FACTORY}\n"
            for name in ("gpu", "fpga")
        )
        + "external-resource.gpu.param.discovery-script.args: --enable-coordination-mode\n"
        "external-resource.fpga.param.discovery-script.args: "
        f"--enable-coordination-mode --coordination-file {path}\n"
    )
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    coordination.claim(1, ["7"], path=path)
    try:
        assert {info.index for info in get_external_resource_infos(None, "fpga")} == {"7"}
        assert lookup_external_resource_infos(None, "gpu").coordination_file == DEFAULT_COORDINATION_FILE
    finally:
        coordination.release(path=path)


# -- empty set with a reason ----------------------------------------------------------------------


def reason_of(name="gpu"):
    lookup = lookup_external_resource_infos(None, name)
    assert lookup.infos == frozenset() and lookup.mode == "process"
    return lookup.reason


def test_no_flink_conf_dir(monkeypatch):
    monkeypatch.delenv("FLINK_CONF_DIR", raising=False)
    reason = reason_of()
    assert "FLINK_CONF_DIR is not set" in reason and DEFAULT_COORDINATION_FILE in reason


def test_conf_dir_without_a_configuration_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_CONF_DIR", str(tmp_path))
    reason = reason_of()
    assert f"FLINK_CONF_DIR={tmp_path}" in reason and "config.yaml" in reason
    assert DEFAULT_COORDINATION_FILE in reason


def test_a_coordination_file_flag_without_a_value_means_the_default_file_with_a_warn(tmp_path, monkeypatch, caplog):
    # the stock script's reading (and flink-gpu-discovery's): the default file
    monkeypatch.setenv(
        "FLINK_CONF_DIR", str(write_conf(tmp_path / "conf", "--enable-coordination-mode --coordination-file"))
    )
    with caplog.at_level(logging.WARNING, "flink_gpu.flink.script_protocol"):
        lookup = lookup_external_resource_infos(None, "gpu")
    assert lookup.coordination_file == DEFAULT_COORDINATION_FILE
    assert DEFAULT_COORDINATION_FILE in lookup.reason
    assert any(
        "'--coordination-file' in 'external-resource.gpu.param.discovery-script.args'" in r.getMessage()
        and "has no file path after it" in r.getMessage()
        and r.levelno == logging.WARNING
        for r in caplog.records
    )


def test_our_invalid_options_do_not_change_what_the_java_plugin_records(tmp_path, monkeypatch):
    # Flink's Java plugin never reads discovery-mode: its TaskManager records its GPUs in the
    # --coordination-file of its args, and that is the file the worker must read
    path = tmp_path / "coordination"
    monkeypatch.setenv(
        "FLINK_CONF_DIR",
        str(
            write_conf(
                tmp_path / "conf",
                f"--enable-coordination-mode --coordination-file {path}",
                extra="external-resource.gpu.param.discovery-mode: gpu\n",
            )
        ),
    )
    coordination.claim(2, ["0", "1"], path=path)
    try:
        lookup = lookup_external_resource_infos(None, "gpu")
        assert lookup.coordination_file == str(path)
        assert sorted(info.index for info in lookup.infos) == ["0", "1"]
    finally:
        coordination.release(path=path)


def test_a_python_gpu_driver_that_cannot_be_built_gives_nothing(tmp_path, monkeypatch):
    # our own factory validates discovery-mode: the TaskManager's driver is never built, so
    # Flink gives the operator nothing, and no coordination file is read
    conf_dir = write_conf(
        tmp_path / "conf", "--enable-coordination-mode", extra="external-resource.gpu.param.discovery-mode: gpu\n"
    )
    config = conf_dir / "config.yaml"
    config.write_text(config.read_text().replace(GPU_FACTORY, "flink_gpu.GPUDriverFactory"))
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    lookup = lookup_external_resource_infos(None, "gpu")
    assert lookup.infos == frozenset() and lookup.coordination_file is None
    assert "the GPU driver of 'gpu' cannot be built" in lookup.reason
    assert "Invalid value 'gpu' for key 'external-resource.gpu.param.discovery-mode'" in lookup.reason


def test_coordination_mode_off(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_CONF_DIR", str(write_conf(tmp_path / "conf", "null")))
    assert "does not contain --enable-coordination-mode" in reason_of()


def test_resource_not_listed(tmp_path, monkeypatch):
    path = tmp_path / "coordination"
    monkeypatch.setenv(
        "FLINK_CONF_DIR",
        str(write_conf(tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}", resources="fpga")),
    )
    reason = reason_of()
    assert "'gpu' is not listed in 'external-resources' ('fpga')" in reason


def test_missing_coordination_file(tm_conf):
    _, path = tm_conf
    reason = reason_of()
    assert f"the coordination file {path} does not exist" in reason
    assert not path.exists()  # looking never creates it


def test_file_of_other_holders_only(tm_conf):
    _, path = tm_conf
    other = subprocess.Popen(["sleep", "60"])  # alive, but not an ancestor
    try:
        path.write_text(f"0 {other.pid}\n1 {other.pid}\n")
        reason = reason_of()
    finally:
        other.kill()
        other.wait()
    assert "no live entry" in reason and f"the file holds pids {other.pid}" in reason


def test_get_logs_the_reason_as_a_warning(tm_conf, caplog):
    _, path = tm_conf
    with caplog.at_level(logging.WARNING, logger="flink_gpu.pyflink"):
        assert get_external_resource_infos(None, "gpu") == frozenset()
    [record] = [r for r in caplog.records if r.name == "flink_gpu.pyflink"]
    assert record.levelno == logging.WARNING
    assert "'gpu'" in record.getMessage() and str(path) in record.getMessage()


def test_a_typo_in_the_args_is_warned_once_per_process_not_per_operator(tmp_path, monkeypatch):
    # every UDF's open() looks its GPUs up; the configuration's typo is news only the first time
    path = tmp_path / "coordination"
    monkeypatch.setenv(
        "FLINK_CONF_DIR",
        str(
            write_conf(
                tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path} --enable-coordination"
            )
        ),
    )
    caplog_records = []
    handler = logging.Handler()
    handler.emit = caplog_records.append
    nvml_log = logging.getLogger("flink_gpu.flink.script_protocol")
    nvml_log.addHandler(handler)
    try:
        for _ in range(3):
            get_external_resource_infos(None, "gpu")
    finally:
        nvml_log.removeHandler(handler)
    typo = [r for r in caplog_records if "'--enable-coordination'" in r.getMessage()]
    assert len(typo) == 1 and typo[0].levelno == logging.WARNING


def test_a_coordination_file_that_is_a_directory(tmp_path, monkeypatch):
    path = tmp_path / "coordination"
    path.mkdir()
    monkeypatch.setenv(
        "FLINK_CONF_DIR", str(write_conf(tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}"))
    )
    reason = reason_of()
    assert f"could not read the coordination file {path}" in reason


def test_bad_name():
    with pytest.raises(ValueError, match="non-empty string"):
        lookup_external_resource_infos(None, "")


# -- thread mode, on stand-ins for the Java context (support.java_context) ------------------------


def test_thread_mode_converts_the_java_infos(tm_conf):
    java = JavaRuntimeContext([JavaInfo({"index": "0"}), JavaInfo({"index": "3", "uuid": "GPU-x", "empty": None})])
    lookup = lookup_external_resource_infos(PyFlinkContext(java), "gpu")
    assert lookup.mode == "thread" and lookup.reason is None and java.asked == ["gpu"]
    assert lookup.infos == {GPUInfo("0"), GPUInfo("3")}
    by_index = {info.index: info for info in lookup.infos}
    assert by_index["3"].get_keys() == ("index", "uuid")
    assert by_index["3"].get_property("uuid") == "GPU-x"
    assert by_index["0"].get_keys() == ("index",)


def test_thread_mode_unwraps_nested_contexts():
    java = JavaRuntimeContext([JavaInfo({"index": "1"})])
    assert get_external_resource_infos(PyFlinkContext(PyFlinkContext(java)), "gpu") == {GPUInfo("1")}


def test_thread_mode_empty_has_a_reason_and_never_reads_the_file(tm_conf, caplog):
    _, path = tm_conf
    coordination.claim(1, ["0"], path=path)  # the Java answer is authoritative in thread mode
    try:
        with caplog.at_level(logging.WARNING, logger="flink_gpu.pyflink"):
            infos = get_external_resource_infos(PyFlinkContext(JavaRuntimeContext([])), "gpu")
    finally:
        coordination.release(path=path)
    assert infos == frozenset()
    assert "returned no infos" in caplog.text and "MiniCluster" in caplog.text


def test_thread_mode_info_without_an_index_keeps_its_java_string():
    java = JavaRuntimeContext([JavaInfo({"serial": "abc"})])
    [info] = get_external_resource_infos(PyFlinkContext(java), "gpu")
    assert info.index == "Info({'serial': 'abc'})" and info.get_property("serial") == "abc"


# -- process mode gives what the TaskManager's RuntimeContext would ---------------------------------


def conf_with(tmp_path, monkeypatch, lines):
    """A configuration of ``lines`` (flat keys) in FLINK_CONF_DIR; this process holds GPUs 0 and 1
    in its coordination file, which every ``lines`` names."""
    path = tmp_path / "coordination"
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "config.yaml").write_text("".join(f"{line}\n" for line in lines).format(path=path))
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    assert coordination.claim(2, ["0", "1"], path=path).taken == ["0", "1"]
    return conf_dir, path


SERVED = [
    "external-resources: gpu",
    "external-resource.gpu.amount: 2",
    f"external-resource.gpu.driver-factory.class: {GPU_FACTORY}",
    "external-resource.gpu.param.discovery-script.args: --enable-coordination-mode --coordination-file {path}",
]


def replaced(key, value):
    """SERVED with ``key`` set to ``value`` (None: removed)."""
    lines = [line for line in SERVED if not line.startswith(f"{key}:")]
    return lines if value is None else lines + [f"{key}: {value}"]


@pytest.mark.parametrize(
    "lines, expected",
    [
        (replaced("external-resources", "none"), "'external-resources' is 'none', which enables no external resource"),
        (replaced("external-resources", "fpga"), "'gpu' is not listed in 'external-resources' ('fpga')"),
        (replaced("external-resource.gpu.amount", None), "'external-resource.gpu.amount' is not set"),
        (replaced("external-resource.gpu.amount", "0"), "'external-resource.gpu.amount' is '0'; it must be positive"),
        (replaced("external-resource.gpu.amount", "-3"), "'external-resource.gpu.amount' is '-3'; it must be positive"),
        (replaced("external-resource.gpu.amount", "two"), "a TaskManager does not start with it"),
        (
            replaced("external-resource.gpu.amount", "99999999999999999999"),
            "a TaskManager does not start with it (Could not parse value '99999999999999999999' for key "
            "'external-resource.gpu.amount'. The value is out of the range of a 64-bit long",
        ),
        (
            replaced("external-resource.gpu.driver-factory.class", None),
            "'external-resource.gpu.driver-factory.class' is not set",
        ),
        (
            replaced("external-resource.gpu.driver-factory.class", "no_such_pkg.Factory"),
            "('external-resource.gpu.driver-factory.class': no_such_pkg.Factory) cannot be loaded",
        ),
    ],
    ids=[
        "none",
        "not-listed",
        "no-amount",
        "amount-0",
        "amount-negative",
        "amount-not-a-number",
        "amount-beyond-64-bits",
        "no-factory",
        "factory-not-found",
    ],
)
def test_a_resource_the_taskmanager_does_not_serve_gives_nothing_and_the_file_is_not_read(
    tmp_path, monkeypatch, lines, expected
):
    from flink_gpu.flink.framework import load_external_resources

    conf_dir, path = conf_with(tmp_path, monkeypatch, lines)
    try:
        lookup = lookup_external_resource_infos(None, "gpu")
        if not expected.startswith("a TaskManager does not start with it"):  # there Flink fails to start
            assert load_external_resources(conf_dir).get_external_resource_infos("gpu") == frozenset()
    finally:
        coordination.release(path=path)
    assert lookup.infos == frozenset() and lookup.mode == "process"
    assert expected in lookup.reason and f"FLINK_CONF_DIR={conf_dir}" in lookup.reason
    assert "the TaskManager discovered nothing" in lookup.reason
    assert lookup.coordination_file is None and lookup.holder_pid is None


def test_the_served_configuration_gives_the_holders_gpus(tmp_path, monkeypatch):
    _, path = conf_with(tmp_path, monkeypatch, SERVED)
    try:
        lookup = lookup_external_resource_infos(None, "gpu")
    finally:
        coordination.release(path=path)
    assert lookup.reason is None and sorted(info.index for info in lookup.infos) == ["0", "1"]


def test_never_more_infos_than_the_amount_with_a_warn(tmp_path, monkeypatch, caplog):
    _, path = conf_with(tmp_path, monkeypatch, replaced("external-resource.gpu.amount", "1"))
    try:
        with caplog.at_level(logging.WARNING, logger="flink_gpu.pyflink"):
            lookup = lookup_external_resource_infos(None, "gpu")
    finally:
        coordination.release(path=path)
    assert lookup.reason is None and [info.index for info in lookup.infos] == ["0"]
    [warn] = [r for r in caplog.records if r.name == "flink_gpu.pyflink"]
    assert warn.levelno == logging.WARNING
    assert str(path) in warn.getMessage() and "holds 2 GPUs (0,1)" in warn.getMessage()
    assert "amount 1 of 'gpu'" in warn.getMessage() and "using GPU(s) 0" in warn.getMessage()


def test_without_coordination_mode_the_file_is_not_read(tmp_path, monkeypatch):
    # the file named by --coordination-file holds this process's GPUs, but the discovery did not write them
    _, path = conf_with(
        tmp_path,
        monkeypatch,
        replaced("external-resource.gpu.param.discovery-script.args", "--coordination-file {path}"),
    )
    try:
        lookup = lookup_external_resource_infos(None, "gpu")
    finally:
        coordination.release(path=path)
    assert lookup.infos == frozenset() and lookup.coordination_file is None
    assert "does not contain --enable-coordination-mode" in lookup.reason
    assert "records nothing in the coordination file" in lookup.reason


# -- bind_gpus: one GPU per slot ---------------------------------------------------------------------

# The "TaskManager" claims `amount` GPUs as its discovery would, then starts `workers` Python workers
# at once (a shell in between, as Flink does); each binds and prints, and all hold until every one printed.
BINDING_TASKMANAGER = """
import json, os, subprocess, sys
from flink_gpu import coordination
path, amount, workers, count, share, memory = ARGS
claimed = coordination.claim(amount, ["0", "1", "2", "3"], path=path).taken
worker = '''
import json, os, sys
from flink_gpu.pyflink import bind_gpus
from flink_gpu.binding import BindingError
try:
    b = bind_gpus(None, "gpu", count=COUNT, subtasks_per_gpu=SHARE, memory=MEMORY)
    print(json.dumps({"pid": os.getpid(), "indices": list(b.indices), "visible": b.cuda_visible_devices,
                      "memory_limit": b.memory_limit}), flush=True)
except BindingError as error:
    print(json.dumps({"pid": os.getpid(), "error": f"{type(error).__name__}: {error}"}), flush=True)
sys.stdin.read()
'''.replace("COUNT", str(count)).replace("SHARE", str(share)).replace("MEMORY", repr(memory))
procs = [subprocess.Popen(["/bin/sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, worker],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(workers)]
reports = [json.loads(p.stdout.readline()) for p in procs]
from flink_gpu.bindings_file import bindings_path, snapshot
held = [(e.index, e.holders_per_gpu, e.memory) for e in snapshot(bindings_path(path)).entries if e.alive]
for p in procs:
    p.stdin.close()
    p.wait(30)
print(json.dumps({"pid": os.getpid(), "claimed": claimed, "reports": reports, "held": held}))
"""


def bind_in_workers(env, path, amount, workers, count=1, share=1, memory=None):
    proc = run_python(
        f"ARGS = ({str(path)!r}, {amount}, {workers}, {count}, {share}, {memory!r})\n" + BINDING_TASKMANAGER, env=env
    )
    return json.loads(proc.stdout)


def test_process_mode_workers_of_one_taskmanager_bind_distinct_gpus(tm_conf):
    _, path = tm_conf
    result = bind_in_workers(simulated_env(devices=4), path, 2, 2)
    assert result["claimed"] == ["0", "1"]
    got = sorted(index for report in result["reports"] for index in report["indices"])
    assert got == ["0", "1"]
    for report in result["reports"]:  # completed from NVML: the UUID names the device for CUDA
        assert report["visible"] == SIM_UUID.format(int(report["indices"][0]))
    # each worker's binding went with it
    from flink_gpu import binding

    assert binding.snapshot(binding.bindings_path(path)).by_taskmanager() == {}


def test_process_mode_shares_a_gpu_among_subtasks_per_gpu_workers(tm_conf):
    _, path = tm_conf
    result = bind_in_workers(simulated_env(devices=4), path, 2, 4, share=2)
    assert sorted(index for report in result["reports"] for index in report["indices"]) == ["0", "0", "1", "1"]


def test_process_mode_workers_bind_with_a_memory_request_and_subtasks_per_gpu(tm_conf):
    """bind_gpus(ctx, "gpu", memory="12 gb", subtasks_per_gpu=4): both limits apply; the bindings file records
    the request for every process to count."""
    _, path = tm_conf
    result = bind_in_workers(simulated_env(devices=4), path, 1, 4, share=4, memory="12 gb")
    assert [report.get("memory_limit") for report in result["reports"]] == [12 * 2**30] * 4, result
    assert sorted(index for report in result["reports"] for index in report["indices"]) == ["0"] * 4
    assert sorted(map(tuple, result["held"])) == [("0", 4, 12 * 2**30)] * 4


def test_memory_requests_beyond_a_gpu_say_what_each_gpu_has_and_what_to_change(tm_conf):
    """Three 30 GiB slots on one 80 GiB GPU with 4 subtasks per GPU: the third is refused naming memory."""
    _, path = tm_conf
    result = bind_in_workers(simulated_env(devices=4), path, 1, 3, share=4, memory=30 * 2**30)
    [error] = [report["error"] for report in result["reports"] if "error" in report]
    assert error.startswith("NotEnoughGpusError: Could not bind 1 GPU") and "30 GiB of memory on each" in error, error
    assert "60 GiB of its 80 GiB requested, 80 GiB free" in error, error
    assert "each asking 30 GiB of it (memory). Ask for less memory" in error, error


def test_a_memory_shortage_where_an_orphaned_worker_runs_names_it_instead_of_what_to_change(tm_conf):
    """A worker of a dead TaskManager still runs on GPU 0, whose 70 GiB of 80 are in use (its line stays,
    counting for nothing): a slot asking 20 GiB is told to end it, not to ask for less or raise the amount."""
    from conftest import dead_pid, proc_start_time

    _, path = tm_conf
    orphan, gone = subprocess.Popen(["sleep", "600"]), dead_pid()
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
        with open(f"{path}.bindings", "w") as bindings:
            bindings.write(
                f"0 {orphan.pid}\t{proc_start_time(orphan.pid)}\tns={ns}\ttm={gone}\tshare=1\tmem={60 * 2**30}\n"
            )
        busy = simulated_env(spec={"devices": [{"memory_used": 70 * 2**30}] * 4})
        result = bind_in_workers(busy, path, 1, 1, memory="20 gb")
    finally:
        orphan.kill()
        orphan.wait()
    [error] = [report["error"] for report in result["reports"]]
    assert (
        f"pid {orphan.pid}, a worker of TaskManager {gone} which is gone, still runs on GPU 0: end it (kill "
        f"{orphan.pid})." in error
    ), error
    assert error.endswith(f"The TaskManager (pid {result['pid']}) has 1 GPU(s) of 'gpu' (0) for its slots."), error
    assert "Ask for less memory" not in error and "raise" not in error


def test_not_enough_says_what_the_taskmanager_has_who_binds_it_and_what_to_change(tm_conf):
    _, path = tm_conf
    result = bind_in_workers(simulated_env(devices=4), path, 2, 3)
    errors = [report["error"] for report in result["reports"] if "error" in report]
    assert len(errors) == 1, result
    [error] = errors
    # one error, the core's not-enough status told what this TaskManager can serve: no second message
    assert error.startswith("NotEnoughGpusError: Could not bind 1 GPU") and error.count("Could not bind") == 1, error
    bound = [report for report in result["reports"] if "indices" in report]
    for report in bound:
        assert f"GPU {report['indices'][0]} is bound by pid {report['pid']} (1 of at most 1)" in error
    assert f"The TaskManager (pid {result['pid']}) has 2 GPU(s) of 'gpu' (0, 1)" in error
    assert "external-resource.gpu.amount" in error and "subtasks_per_gpu" in error and "parallelism" in error


def test_bind_gpus_without_gpus_says_why(tmp_path, monkeypatch):
    conf_dir = write_conf(tmp_path / "conf", "--coordination-file /nonexistent")  # coordination off
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    from flink_gpu.binding import BindingError
    from flink_gpu.pyflink import bind_gpus

    with pytest.raises(
        BindingError, match="No GPUs of 'gpu' to bind in process mode: .*enable-coordination-mode"
    ) as raised:
        bind_gpus(None, "gpu")
    assert type(raised.value) is NotEnoughGpusError
    # where a TaskManager that found no GPU says why, and the command that checks it
    assert "Failed to retrieve information of external resource gpu" in str(raised.value)
    assert "flink-gpu doctor" in str(raised.value)


def test_thread_mode_bind_gpus_without_gpus_points_to_the_taskmanager_log_and_doctor(tm_conf):
    from flink_gpu.binding import BindingError
    from flink_gpu.pyflink import bind_gpus

    with pytest.raises(BindingError) as raised:
        bind_gpus(PyFlinkContext(JavaRuntimeContext([])), "gpu")
    message = str(raised.value)
    assert "getExternalResourceInfos('gpu') returned no infos" in message
    assert "log/flink-*-taskexecutor-*.log" in message and "flink-gpu doctor" in message


@pytest.mark.parametrize(
    "count, share, message",
    [
        (0, 1, "count must be 1 to"),
        (1, 0, "Invalid subtasks_per_gpu 0: it must be 1 to 1024."),
        (1, 2000, "Invalid subtasks_per_gpu 2000: it must be 1 to 1024."),
    ],
)
def test_bind_gpus_refuses_bad_counts_naming_the_parameter(count, share, message):
    from flink_gpu.pyflink import bind_gpus

    with pytest.raises(ValueError, match=message):
        bind_gpus(None, "gpu", count=count, subtasks_per_gpu=share)


@pytest.mark.parametrize(
    "memory, error, message",
    [
        (0, ValueError, "memory must be more than 0 bytes, got 0"),
        (-1, ValueError, "memory must be more than 0 bytes, got -1"),
        ("ten gb", ValueError, "memory 'ten gb' is not a memory size"),
        ("10 gigs", ValueError, "the unit 'gigs' is none of b, bytes"),
        (1.5, TypeError, "memory must be bytes \\(int\\) or a Flink memory size \\(str\\)"),
    ],
)
def test_bind_gpus_refuses_a_bad_memory_request_naming_it_before_looking_for_gpus(memory, error, message):
    from flink_gpu.pyflink import bind_gpus

    with pytest.raises(error, match=message):
        bind_gpus(None, "gpu", memory=memory)


def test_bind_gpus_names_subtasks_per_gpu_when_it_is_not_a_whole_number():
    from flink_gpu.pyflink import bind_gpus

    with pytest.raises(TypeError, match=r"^subtasks_per_gpu \(how many holders may share one GPU\) must be a whole "):
        bind_gpus(None, "gpu", count=1, subtasks_per_gpu=1.5)


@contextlib.contextmanager
def thread_mode_subtasks(gpus, subtasks):
    """Runs thread-mode subtasks ``(name, allocation id)``, one after the other, each binding one GPU of
    ``gpus`` in a thread of its own that lives until the block ends (a slot's binding lives with its
    threads): yields name -> GPUBinding, or the BindingError it got."""
    from flink_gpu.binding import BindingError
    from flink_gpu.pyflink import bind_gpus

    results, hold = {}, threading.Event()

    def subtask(name, allocation):
        try:
            results[name] = bind_gpus(PyFlinkContext(JavaSubtaskContext(gpus, allocation)), "gpu")
        except BindingError as error:
            results[name] = error
        hold.wait(30)

    threads = [threading.Thread(target=subtask, args=args) for args in subtasks]
    try:
        for t, (name, _) in zip(threads, subtasks, strict=True):  # one after the other: each binds before the next asks
            t.start()
            while name not in results and t.is_alive():
                threading.Event().wait(0.01)
        yield results
    finally:
        hold.set()
        for t in threads:
            t.join()


@pytest.mark.parametrize("memory, logged", [(None, ""), ("4 gb", ", memory request 4 GiB")])
def test_each_binding_logs_operator_subtask_gpu_index_uuid_and_memory_request(tm_conf, memory, logged):
    env = simulated_env(devices=2)
    env["PYTHONPATH"] = TESTS  # for support.java_context
    code = textwrap.dedent(f"""
        import logging
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
        from support.java_context import JavaInfo, NamedSubtaskContext, PyFlinkContext
        from flink_gpu.pyflink import bind_gpus
        context = PyFlinkContext(NamedSubtaskContext([JavaInfo({{"index": "0"}}), JavaInfo({{"index": "1"}})], "1f"))
        bind_gpus(context, "gpu", memory={memory!r}).release()
        """)
    proc = run_python(code, env=env)
    lines = [line for line in proc.stderr.splitlines() if "Bound" in line]
    assert len(lines) == 1, proc.stderr
    # thread mode's Java infos carry the index only: the uuid is NVML's; the request in the size form of the
    # other messages (4 gb is 4 GiB to Flink)
    assert re.fullmatch(
        r"flink_gpu\.pyflink INFO Bound infer -> Sink: print subtask 3 to slot 1f \(thread \d+\) of "
        r"the TaskManager \(pid \d+\), thread mode: GPU 0 \(" + SIM_UUID.format(0) + re.escape(logged) + r"\)",
        lines[0],
    ), lines


def test_thread_mode_binds_per_slot_allocation_id(tm_conf):
    _, path = tm_conf
    gpus = [JavaInfo({"index": "0"}), JavaInfo({"index": "1"})]
    # subtasks a and b share slot "1f" (chained or slot-sharing operators); c has its own slot
    with thread_mode_subtasks(gpus, (("a", "1f"), ("b", "1f"), ("c", "2e"))) as results:
        assert results["a"].indices == results["b"].indices
        assert {results["a"].indices, results["c"].indices} == {("0",), ("1",)}
        assert all(binding.infos <= {GPUInfo("0"), GPUInfo("1")} for binding in results.values())
        from flink_gpu import binding as bindings

        [holders] = bindings.snapshot(bindings.bindings_path(path)).by_taskmanager().items()
        assert holders[0] == (os.getpid(), None) and set(holders[1]) == {"slot 1f", "slot 2e"}


def test_a_thread_mode_subtask_without_an_allocation_id_is_refused_as_of_an_unknown_slot(tm_conf):
    """A null allocation id would make every such subtask the one slot "None", sharing its GPU."""
    from flink_gpu.binding import BindingError

    _, path = tm_conf
    gpus = [JavaInfo({"index": "0"}), JavaInfo({"index": "1"})]
    with thread_mode_subtasks(gpus, (("a", None), ("b", None))) as results:
        for name in "ab":
            # its own type (what to do differs: bind in process mode), still a BindingError as before
            assert type(results[name]) is SlotUnknownError and isinstance(results[name], BindingError)
            assert "slot" in str(results[name]) and "allocation id is unknown" in str(results[name])
    assert not os.path.exists(f"{path}.bindings")


def test_the_taskmanagers_configuration_is_read_again_only_when_it_changes(tm_conf, tmp_path):
    from flink_gpu.gpu.taskmanager_view import taskmanager_view

    conf_dir, path = tm_conf
    first = taskmanager_view("gpu")
    assert first.path == str(path)
    assert taskmanager_view("gpu") is first  # every operator's open() asks: parsed once
    other = tmp_path / "other-coordination"
    write_conf(conf_dir, f"--enable-coordination-mode --coordination-file {other}")
    assert taskmanager_view("gpu").path == str(other)
    (conf_dir / "config.yaml").unlink()
    assert taskmanager_view("gpu").path == DEFAULT_COORDINATION_FILE  # gone: the default, as before


# -- bind_gpus: what the not-enough advice promises ------------------------------------------------


def test_not_enough_never_promises_slots_that_cannot_bind_that_many(tm_conf):
    """3 GPUs per slot of a TaskManager that has 2: no slot can have them, whatever subtasks_per_gpu."""
    _, path = tm_conf
    result = bind_in_workers(simulated_env(devices=4), path, 2, 1, count=3, share=2)
    [report] = result["reports"]
    error = report["error"]
    promised = re.search(r"so at most (\d+) of its slots can bind 3 each", error)
    assert promised is None or promised.group(1) == "0", error


def test_thread_mode_slots_of_one_taskmanager_never_hold_two_mig_units(tm_conf):
    """In thread mode every slot is a thread of the one TaskManager process, and CUDA uses one MIG
    instance per process: a second slot must not be handed a second unit it can never reach."""
    gpus = [JavaInfo({"index": "0:1"}), JavaInfo({"index": "0:2"})]
    with thread_mode_subtasks(gpus, (("1f", "1f"), ("2e", "2e"))) as results:
        units = {index for got in results.values() if not isinstance(got, Exception) for index in got.indices}
        assert len(units) <= 1, f"one TaskManager process holds MIG units {sorted(units)}: {results}"


def test_thread_mode_not_enough_for_mig_units_never_promises_a_slot_per_unit(tm_conf):
    """The slots of one thread-mode TaskManager share one MIG unit (CUDA uses one per process): with two
    units and subtasks_per_gpu=1 one slot can bind, so the advice must not say two can."""
    gpus = [JavaInfo({"index": "0:1"}), JavaInfo({"index": "0:2"})]
    with thread_mode_subtasks(gpus, (("1f", "1f"), ("2e", "2e"))) as results:
        error = str(results["2e"])
    promised = re.search(r"so at most (\d+) of its slots can bind 1 each", error)
    assert promised is None or promised.group(1) == "1", error


# -- bind_gpus reads the GPUs' state as the TaskManager's driver does ---------------------------------

INFOROM_OFF = "external-resource.gpu.param.health-checks: all,-inforom\n"


@pytest.mark.parametrize("health_checks", [INFOROM_OFF, ""])
def test_a_thread_mode_slot_judges_health_by_the_taskmanagers_health_checks(tmp_path, health_checks):
    """The driver of a TaskManager with health-checks: all,-inforom hands out GPU 0, whose InfoROM is
    corrupt; its slots bind it (with every check, the default, they refuse it as the driver would)."""
    path = tmp_path / "coordination"
    conf_dir = write_conf(
        tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}", extra=health_checks
    )
    env = {
        **simulated_env(spec={"devices": [{"health": {"inforom_corrupted": True}}]}),
        "FLINK_CONF_DIR": str(conf_dir),
    }
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")])
    code = textwrap.dedent("""
        from support.java_context import JavaInfo, JavaSubtaskContext, PyFlinkContext
        from flink_gpu.binding import BindingError
        from flink_gpu.pyflink import bind_gpus
        try:
            print(list(bind_gpus(PyFlinkContext(JavaSubtaskContext([JavaInfo({"index": "0"})], "a1")), "gpu").indices))
        except BindingError as error:
            print(type(error).__name__, error)
        """)
    out = run_python(code, env=env).stdout
    if health_checks:
        assert out.strip() == "['0']", out
    else:
        assert out.startswith(
            "NotEnoughGpusError Could not bind: 1 GPU requested, but 0 of the 1 given are usable: GPU 0 is left out ("
        ), out


@pytest.mark.parametrize(
    "extra, call, got",
    [
        ("", "", "['0', '2']"),  # the bridged pair, not index order's 0,1
        ("external-resource.gpu.param.topology: ignore\n", "", "['0', '1']"),  # the TaskManager's setting
        ("external-resource.gpu.param.topology: ignore\n", ", topology='prefer'", "['0', '2']"),  # the call's
        ("", ", placement='fill'", "ValueError Invalid value 'fill' for placement: expected one of spread, pack."),
    ],
)
def test_a_slot_of_two_gets_the_bridged_pair_as_the_taskmanager_or_the_call_says(tmp_path, extra, call, got):
    path = tmp_path / "coordination"
    conf_dir = write_conf(tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}", extra=extra)
    env = {**simulated_env(profile="rtx3090-bridged-4"), "FLINK_CONF_DIR": str(conf_dir)}
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")])
    code = textwrap.dedent(f"""
        from support.java_context import JavaInfo, JavaSubtaskContext, PyFlinkContext
        from flink_gpu.pyflink import bind_gpus
        gpus = [JavaInfo({{"index": str(i)}}) for i in range(4)]
        try:
            print(list(bind_gpus(PyFlinkContext(JavaSubtaskContext(gpus, "a1")), "gpu", count=2{call}).indices))
        except ValueError as error:
            print(type(error).__name__, error)
        """)
    assert run_python(code, env=env).stdout.strip() == got


def test_a_process_mode_worker_judges_health_by_the_taskmanagers_health_checks(tmp_path):
    path = tmp_path / "coordination"
    conf_dir = write_conf(
        tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}", extra=INFOROM_OFF
    )
    env = {**simulated_env(spec={"devices": [{"health": {"inforom_corrupted": True}}, {}]})}
    env["FLINK_CONF_DIR"] = str(conf_dir)
    result = bind_in_workers(env, path, 1, 1)
    assert result["claimed"] == ["0"]
    assert [report.get("indices") for report in result["reports"]] == [["0"]], result


def test_a_slot_reads_its_gpus_within_the_taskmanagers_nvml_timeout(tmp_path):
    """With GPU 1 stuck in the driver and nvml-timeout: 300 ms in the TaskManager's configuration, a slot
    binds GPU 0 in well under the default 5 s deadline."""
    from flink_gpu import simulator

    path, hang = tmp_path / "coordination", tmp_path / "hang"
    conf_dir = write_conf(
        tmp_path / "conf",
        f"--enable-coordination-mode --coordination-file {path}",
        extra="external-resource.gpu.param.nvml-timeout: 300 ms\n",
    )
    spec = {"devices": [{}, {}], "hang": [{"query": "field_values", "device": 1, "while_exists": str(hang)}]}
    env = {**simulated_env(spec=spec), "FLINK_CONF_DIR": str(conf_dir)}
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")])
    code = textwrap.dedent("""
        import time
        from support.java_context import JavaInfo, JavaSubtaskContext, PyFlinkContext
        from flink_gpu.pyflink import bind_gpus
        gpus = [JavaInfo({"index": "0"}), JavaInfo({"index": "1"})]
        start = time.monotonic()
        binding = bind_gpus(PyFlinkContext(JavaSubtaskContext(gpus, "a1")), "gpu")
        print(list(binding.indices), time.monotonic() - start)
        """)
    with simulator.hanging(hang):
        indices, seconds = run_python(code, env=env).stdout.rsplit(" ", 1)
    assert indices == "['0']"
    assert float(seconds) < 3.0  # 0.3 s and the bind; the default deadline alone is 5 s


@pytest.mark.parametrize(
    "extra, args, where, accepted",
    [
        ("metrics.interval: soon", "", "'soon' for key '{}metrics.interval'", "expected a duration of at least 1 s"),
        (
            "metrics.interval: 500 ms",
            "",
            "'500 ms' for key '{}metrics.interval'",
            "expected a duration of at least 1 s",
        ),
        (
            "health-checks: all,-inforum",
            "",
            "'all,-inforum' for key '{}health-checks'",
            "'-inforum' is not a health check",
        ),
        ("nvml-timeout: 5 parsecs", "", "'5 parsecs' for key '{}nvml-timeout'", "expected a positive duration"),
        ("topology: maybe", "", "'maybe' for key '{}topology'", "expected one of prefer, ignore"),
        ("", " --nvml-timeout 3q", "'3q' for --nvml-timeout in key '{}discovery-script.args'", "expected a positive"),
    ],
)
def test_bind_gpus_refuses_a_malformed_option_it_reads_from_a_java_plugin_taskmanagers_configuration(
    tmp_path, extra, args, where, accepted
):
    """Flink's Java plugin ignores these options, but bind_gpus reads them: a malformed one is an error naming
    the file, the key, the value and what to write, never the default in silence."""
    path = tmp_path / "coordination"
    extra = f"external-resource.gpu.param.{extra}\n" if extra else ""
    conf_dir = write_conf(
        tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}{args}", extra=extra
    )
    env = {**simulated_env(devices=2), "FLINK_CONF_DIR": str(conf_dir)}
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")])
    code = textwrap.dedent("""
        from support.java_context import JavaInfo, JavaSubtaskContext, PyFlinkContext
        from flink_gpu.errors import IllegalConfigurationException
        from flink_gpu.pyflink import bind_gpus
        try:
            print(list(bind_gpus(PyFlinkContext(JavaSubtaskContext([JavaInfo({"index": "0"})], "a1")), "gpu").indices))
        except IllegalConfigurationException as error:
            print(error)
        """)
    out = run_python(code, env=env).stdout.strip()
    assert out.startswith(
        f"The TaskManager's configuration {conf_dir / 'config.yaml'} has a value bind_gpus cannot use (it reads this "
        f"key even where Flink's Java plugin does not): Invalid value {where.format('external-resource.gpu.param.')}: "
        + accepted
    ), out


def test_bind_gpus_binds_whatever_a_java_plugin_taskmanagers_busy_gpus_says(tmp_path):
    """busy-gpus is the driver's alone (a binding reads no process list's policy): a wrong one, which Flink's Java
    plugin ignores, does not stop a binding."""
    path = tmp_path / "coordination"
    conf_dir = write_conf(
        tmp_path / "conf",
        f"--enable-coordination-mode --coordination-file {path}",
        extra="external-resource.gpu.param.busy-gpus: sometimes\n",
    )
    env = {**simulated_env(devices=2), "FLINK_CONF_DIR": str(conf_dir)}
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")])
    code = textwrap.dedent("""
        from support.java_context import JavaInfo, JavaSubtaskContext, PyFlinkContext
        from flink_gpu.pyflink import bind_gpus
        print(list(bind_gpus(PyFlinkContext(JavaSubtaskContext([JavaInfo({"index": "0"})], "a1")), "gpu").indices))
        """)
    assert run_python(code, env=env).stdout.strip() == "['0']"


# ---- a FLINK_CONF_DIR that is no directory -------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_flink_conf_dir_naming_a_fifo_does_not_block_pyflink(tmp_path):
    fifo = tmp_path / "conf"
    os.mkfifo(fifo)
    env = child_env(devices=2)
    env["FLINK_CONF_DIR"] = str(fifo)
    out = run_child(
        """
        from flink_gpu.pyflink import get_external_resource_infos, lookup_external_resource_infos
        print(sorted(get_external_resource_infos(None, "gpu")))
        print(lookup_external_resource_infos(None, "gpu").reason)
    """,
        env=env,
        timeout=30,
    )
    infos, reason = out.splitlines()
    assert infos == "[]"
    assert f"The Flink configuration file {fifo} is a FIFO (named pipe), not a regular file" in reason
