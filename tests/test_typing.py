"""The types flink_gpu promises (py.typed, _native.pyi) hold: the stub describes the built extension, and a
user's program type-checks under mypy --strict against the package as installed."""

import importlib.util
import os
import site
import subprocess
import sys
import textwrap

# The flink_gpu under test (the dev tree's src/ or an installation), found as the tests import it.
PACKAGE_DIR = os.path.dirname(importlib.util.find_spec("flink_gpu._native").origin)

# What Cython adds to every extension that no stub names: pickling hooks of cdef classes (and of the
# module), and doctest's table. Nvml and DeviceState come from Nvml.open / Nvml.states, the records from the
# calls that make them: their __init__ only raises, and at run time it has the slot wrapper's signature
# (*args, **kwargs).
STUBTEST_ALLOWLIST = r"""
flink_gpu\._native\.__test__
flink_gpu\._native\.(\w+\.)?__reduce_cython__
flink_gpu\._native\.(\w+\.)?__setstate_cython__
flink_gpu\._native\.(Nvml|DeviceState|DiscoveryOutcome|BindOutcome|NvmlSettings|NvmlEnumeration|GpuProcess|HealthCheck|SampledMetrics|LibraryProbe|ProcessAncestor|UnknownToken|ParsedScriptArgs|LeftOut|Notice|CoordinationClaim|FileSnapshot|Orphan|Topology|NvLinks|GpuLink)\.__init__
"""


def run_mypy_tool(args, cwd):
    """Runs a mypy tool on the flink_gpu under test: an installed one is found through its py.typed (mypy
    refuses site-packages on MYPYPATH), a source tree's through MYPYPATH."""
    parent = os.path.dirname(PACKAGE_DIR)
    installed = {os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [parent, env.get("PYTHONPATH")]))  # stubtest imports it
    if os.path.realpath(parent) not in installed:
        env["MYPYPATH"] = parent
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_stub_names_and_signatures_match_the_built_extension(tmp_path):
    allowlist = tmp_path / "allowlist.txt"
    allowlist.write_text(STUBTEST_ALLOWLIST)
    # the package's other modules are mypy's (tools/lint.sh) to judge, not this test's
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = silent\n")
    result = run_mypy_tool(
        ["mypy.stubtest", "flink_gpu._native", "--allowlist", str(allowlist), "--mypy-config-file", str(config)],
        tmp_path,
    )
    assert result.returncode == 0, (
        f"src/flink_gpu/_native.pyi is out of step with {PACKAGE_DIR}/_native (update the stub):\n"
        + result.stdout
        + result.stderr
    )


# A program written against the README's examples; assert_type pins what each call gives.
USER_PROGRAM = """
import os
import tempfile
from typing import Optional

from typing_extensions import assert_type

from flink_gpu import (Configuration, ExternalResourceInfo, FlinkException, GPUDriverFactory, GPUInfo,
                       cuda_visible_devices, load_external_resources, pin_to_gpus)
from flink_gpu import coordination
from flink_gpu.binding import GPUBinding, bind
from flink_gpu.gpu import GPUDriverOptions
from flink_gpu.pyflink import bind_gpus, get_external_resource_infos


def claim_two() -> str:
    with tempfile.TemporaryDirectory() as scratch:
        args = f"--enable-coordination-mode --coordination-file {os.path.join(scratch, 'coordination')}"
        try:
            with GPUDriverFactory().create_external_resource_driver({"discovery-script.args": args}) as driver:
                gpus = driver.retrieve_resource_info(2)
                assert_type(gpus, frozenset[GPUInfo])
                assert_type(sorted(g.get_property("index") or "" for g in gpus), list[str])
                assert_type(pin_to_gpus(gpus), frozenset[int])
                return cuda_visible_devices(gpus)
        except (FlinkException, OSError) as error:
            return str(error)


def from_configuration() -> Optional[str]:
    config = Configuration({"external-resources": "gpu", "external-resource.gpu.amount": 1,
                            "external-resource.gpu.driver-factory.class": "flink_gpu.GPUDriverFactory"})
    with load_external_resources(config) as resources:
        gpus = resources.get_external_resource_infos("gpu")
        assert_type(gpus, frozenset[ExternalResourceInfo])
        return resources.missing_reason("gpu")


def coordinate(indices: list[str]) -> list[str]:
    result = coordination.claim(1, indices)
    assert_type(result.taken, list[str])
    return coordination.release(result.owner)


def bind_in_open(runtime_context: object) -> str:
    # what an operator's open() does (flink_gpu/pyflink.py's docstring)
    gpus = get_external_resource_infos(runtime_context, "gpu")
    assert_type(gpus, frozenset[GPUInfo])
    with bind(gpus, 1) as own:
        assert_type(own, GPUBinding)
        assert_type(own.infos, frozenset[ExternalResourceInfo])
    binding = bind_gpus(runtime_context, "gpu", count=1)
    assert_type(binding, GPUBinding)
    assert_type(binding.devices, tuple[int, ...])
    binding.register_metrics(None)
    binding.release()
    return binding.cuda_visible_devices


def option_key() -> str:
    return GPUDriverOptions.DISCOVERY_MODE.key
"""


def test_a_user_program_type_checks_strictly_against_the_package(tmp_path):
    program = tmp_path / "user_program.py"
    program.write_text(textwrap.dedent(USER_PROGRAM))
    # errors in flink_gpu's own modules are tools/lint.sh's; here only what the user's program sees counts
    result = run_mypy_tool(
        ["mypy", "--strict", "--no-incremental", "--follow-imports=silent", "--python-version", "3.10", str(program)],
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
