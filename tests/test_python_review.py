"""Regression tests for defects found in a review of the Python layer (one section per fix)."""

import os
import subprocess
import sys

import pytest

import flink_gpu
from conftest import child_env

# the flink_gpu under test (the dev tree or an installation), for child interpreters
SRC = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))


# --- import cost: GPUInfo must not pull in typing (and re, enum, functools, collections) ----------

def test_gpu_info_imports_no_typing_in_a_bare_interpreter():
    # -S: no site, so nothing (a .pth file, sitecustomize) has imported typing before us; this is
    # what an operator gets in a clean virtual environment
    code = ("import sys\n"
            "from flink_gpu import GPUInfo, cuda_visible_devices\n"
            "cuda_visible_devices([GPUInfo('0', {'uuid': 'GPU-a'})])\n"
            "print(','.join(m for m in ('typing', 're', 'enum', 'functools', 'collections')\n"
            "               if m in sys.modules))\n")
    env = dict(os.environ, PYTHONPATH=SRC)
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == ""


# --- cli.main() called in a process leaves the library's logger as it found it -------------------

def test_cli_main_in_process_does_not_pile_up_log_handlers(tmp_path, capsys):
    import logging

    from flink_gpu.cli import main

    conf = tmp_path / "flink-conf.yaml"
    conf.write_text("external-resources: gpu\nexternal-resource.gpu.amount: 1\n")
    logger = logging.getLogger("flink_gpu")
    before = (list(logger.handlers), logger.level, logger.propagate)
    for _ in range(3):
        assert main(["resources", str(conf), "--kubernetes"]) == 0
        err = capsys.readouterr().err
        # the missing kubernetes.config-key is WARNed once per run, not once per earlier run
        assert err.count("Could not find valid external-resource.gpu.kubernetes.config-key") == 1
    assert (list(logger.handlers), logger.level, logger.propagate) == before


# --- auto mode: when NVML fails and the default script is missing, the error says NVML failed ----

def test_auto_fallback_to_a_missing_default_script_says_nvml_was_not_usable(tmp_path, monkeypatch):
    from flink_gpu import GPUDriver

    monkeypatch.setenv("FLINK_HOME", str(tmp_path))  # no plugins/ there
    missing_library = str(tmp_path / "no-libnvidia-ml.so.1")
    with pytest.raises(FileNotFoundError) as error:
        GPUDriver({"nvml.library-path": missing_library})
    message = str(error.value)
    # Flink's sentence stays first, so log scrapers and users of script mode see the same text
    assert message.startswith("The gpu discovery script does not exist in path "
                              f"{tmp_path}/plugins/external-resource-gpu/nvidia-gpu-discovery.sh.")
    assert "discovery-mode is 'auto'" in message and "NVML is not usable" in message
    assert missing_library in message


# --- doctor on a Java-plugin configuration ignores discovery-script.timeout, as Flink does -------

def test_doctor_java_plugin_run_does_not_read_our_timeout_option(tmp_path):
    import json

    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 0\n")
    script.chmod(0o755)
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 1\n"
        "external-resource.gpu.driver-factory.class: "
        "org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
        f"external-resource.gpu.param.discovery-script.path: {script}\n"
        # not an option of Flink's Java plugin: a TaskManager never reads it
        "external-resource.gpu.param.discovery-script.timeout: soon\n")
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "doctor", str(conf), "--json",
                           "--simulate", "2", "--taskmanagers-per-host", "1"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    assert "error" not in doc, doc
    run = [f for f in doc["findings"] if f["check"] == "script-run"]
    assert [f["level"] for f in run] == ["ok"], run
    assert any(f["check"] == "params" and "discovery-script.timeout" in f["message"]
               for f in doc["findings"])


# --- the JSON schema in `pydoc flink_gpu.cli` names every check doctor reports ------------------

def test_cli_schema_lists_every_doctor_check():
    import importlib
    import inspect
    import pkgutil
    import re

    import flink_gpu.cli
    from flink_gpu.cli import doctor

    sources = [inspect.getsource(importlib.import_module(f"{doctor.__name__}.{module.name}"))
               for module in pkgutil.iter_modules(doctor.__path__)]
    emitted = set(re.findall(r'\.add\(\s*"(?:error|warning|note|ok)",\s*"([a-z-]+)"',
                             "\n".join(sources)))
    schema = flink_gpu.cli.__doc__.split("``check`` is one of", 1)[1].split("``resources``", 1)[0]
    assert "resource-keys" in emitted  # the regex still finds the checks
    assert emitted <= set(re.findall(r"``([a-z-]+)``", schema))


# --- a coordinated NVML driver releases on close only what it claimed itself ---------------------

KEEPS_EARLIER_CLAIMS = r"""
import json, os, sys
from flink_gpu import GPUDriver, coordination
path = sys.argv[1]
args = {"discovery-mode": "nvml",
        "discovery-script.args": "--enable-coordination-mode --coordination-file " + path}
mine = lambda: sorted(e.index for e in coordination.snapshot(path).entries if e.pid == os.getpid())
held = coordination.claim(2, ["0", "1", "2", "3"], path=path)   # the process's own, explicit claim
with GPUDriver(args) as driver:
    got = sorted(i.index for i in driver.retrieve_resource_info(2))
after_close = mine()
coordination.release(path=path)
with GPUDriver(args) as driver:                                  # nothing held before: all its own
    driver.retrieve_resource_info(1)
    topped_up = sorted(i.index for i in driver.retrieve_resource_info(2))
print(json.dumps({"held": held, "got": got, "after_close": after_close, "topped_up": topped_up,
                  "left": mine()}))
"""


def test_coordinated_driver_close_keeps_gpus_the_process_held_before(tmp_path):
    import json

    from flink_gpu import simulator

    env = child_env(**simulator.environment(devices=4))
    done = subprocess.run([sys.executable, "-c", KEEPS_EARLIER_CLAIMS, str(tmp_path / "coord")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"held": ["0", "1"], "got": ["0", "1"],
                                       "after_close": ["0", "1"], "topped_up": ["0", "1"],
                                       "left": []}


# --- `resources` and `doctor` agree: a conf directory without a configuration file is exit 2 -----

def test_resources_on_a_conf_directory_without_a_file_is_a_usage_error(tmp_path, capsys):
    from flink_gpu.cli import main

    assert main(["doctor", str(tmp_path)]) == 2
    assert main(["resources", str(tmp_path)]) == 2
    assert "expected config.yaml or flink-conf.yaml" in capsys.readouterr().err


# --- a discovery-script.timeout longer than epoll's limit (~24.8 days) works ---------------------

def test_script_with_a_timeout_of_thirty_days_runs(tmp_path):
    from flink_gpu import GPUDriver, GPUInfo

    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 0\n")
    script.chmod(0o755)
    with GPUDriver({"discovery-script.path": str(script),
                    "discovery-script.timeout": "30 d"}) as driver:
        assert driver.retrieve_resource_info(1) == {GPUInfo("0")}  # was OverflowError


# --- simulator.environment(spec=...) leaves no temporary file behind when the spec is not JSON ---

def test_simulator_spec_that_is_not_json_leaves_no_file(tmp_path, monkeypatch):
    import tempfile

    from flink_gpu import simulator

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(TypeError):
        simulator.environment(spec={"devices": [{"name": object()}]})
    assert list(tmp_path.iterdir()) == []


# --- doctor resolves the factory name exactly as a worker does (no stripping) ----------------------

def test_doctor_does_not_pass_a_factory_name_a_worker_cannot_load(tmp_path):
    import json

    from flink_gpu import load_external_resources

    conf = tmp_path / "config.yaml"
    conf.write_text('external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n'
                    '    driver-factory:\n      class: "flink_gpu.GPUDriverFactory "\n')
    provider = load_external_resources(str(conf))
    assert "was not found" in provider.missing_reason("gpu")  # what a worker does with it
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "doctor", str(conf), "--json",
                           "--simulate", "2", "--taskmanagers-per-host", "1"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    factory = [f for f in doc["findings"] if f["check"] == "factory"]
    assert [f["level"] for f in factory] == ["error"], factory
    assert proc.returncode == 1


# --- demo: a worker that cannot claim is reported with its own error, not "read of closed file" ---

def test_demo_worker_failure_reports_the_workers_error(tmp_path, monkeypatch):
    from flink_gpu import FlinkException, simulator
    from flink_gpu.cli.demo import Worker, _child_env

    for key, value in simulator.environment(devices=2).items():
        monkeypatch.setenv(key, value)
    worker = Worker("worker-x", 5, str(tmp_path / "coordination"), _child_env())
    with pytest.raises(FlinkException) as error:
        worker.wait_report()  # 5 of 2 GPUs: the worker exits with an error on stderr
    assert "worker-x" in str(error.value) and "Could not get enough GPU resources" in str(error.value)
    assert worker.process.poll() is not None and worker.process.stderr.closed


# --- two coordinated drivers of one process: the first close() does not free the other's GPUs ----

SHARED_IN_ONE_PROCESS = r"""
import json, os, sys, threading, time
from flink_gpu import GPUDriver, coordination
from flink_gpu.gpu import nvml
path = sys.argv[1]
args = {"discovery-mode": "nvml",
        "discovery-script.args": "--enable-coordination-mode --coordination-file " + path}
mine = lambda: sorted(e.index for e in coordination.snapshot(path).entries if e.pid == os.getpid())
a, b = GPUDriver(args), GPUDriver(args)
got_a = sorted(i.index for i in a.retrieve_resource_info(2))
got_b = sorted(i.index for i in b.retrieve_resource_info(2))   # the process's GPUs again
a.close()
after_a = mine()                                                 # b still uses them
b.close()
after_b = mine()
# a child forked while another thread holds the drivers' lock can still claim and release
c = GPUDriver(args)
held = threading.Event()
def hold():
    with getattr(nvml, "_driver_holds_lock", threading.Lock()):
        held.set()
        time.sleep(1.5)
threading.Thread(target=hold).start()
held.wait(10)
pid = os.fork()
if pid == 0:
    c.retrieve_resource_info(1)
    c.close()
    os._exit(0 if not mine() else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"a": got_a, "b": got_b, "after_a": after_a, "after_b": after_b,
                  "child": os.waitstatus_to_exitcode(status)}))
"""


def test_coordinated_drivers_of_one_process_release_when_the_last_closes(tmp_path):
    import json

    from flink_gpu import simulator

    env = child_env(**simulator.environment(devices=4))
    done = subprocess.run([sys.executable, "-c", SHARED_IN_ONE_PROCESS, str(tmp_path / "coord")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"a": ["0", "1"], "b": ["0", "1"], "after_a": ["0", "1"],
                                       "after_b": [], "child": 0}


# --- README names every module `import flink_gpu` loads ---------------------------------------------

def test_readme_names_what_import_flink_gpu_loads():
    import re

    code = ("import sys, flink_gpu\n"
            "print(','.join(sorted(m for m in sys.modules if m.startswith('flink_gpu.'))))\n")
    loaded = subprocess.run([sys.executable, "-S", "-c", code], env=dict(os.environ, PYTHONPATH=SRC),
                            capture_output=True, text=True, check=True).stdout.strip().split(",")
    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
    if not os.path.exists(readme):
        pytest.skip("no README.md beside the tests")
    with open(readme, encoding="utf-8") as handle:
        claim = re.search(r"`import flink_gpu` loads only (.*?);", handle.read(), re.S).group(1)
    assert sorted(re.findall(r"`(flink_gpu\.[a-z_.]+)`", claim)) == loaded


def test_cli_usage_error_with_json_still_answers_in_json():
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "--json", "claim", "two"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    import json

    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] is None and doc["ok"] is False
    assert doc["error"]["type"] == "UsageError" and "'two'" in doc["error"]["message"]
    assert "usage:" in proc.stderr and "'two'" in proc.stderr
