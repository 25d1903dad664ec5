"""Regression tests for defects found in a review of the Python layer (one section per fix)."""

import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'src')


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
