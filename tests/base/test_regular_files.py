"""The one rule for reading a user-named file (flink_gpu.base.regular_files), at every reader of the
package: a path that is not a regular file is refused at once, never blocked on.
"""

import signal

import pytest

import flink_gpu
from flink_gpu import Configuration, simulator
from flink_gpu.flink.framework import load_external_resources
from support.faults import _odd_path


class _Blocked(BaseException):
    """Raised by the alarm: the reader blocked (a BaseException, so no reader's handler takes it)."""


def _read_pod_template(path):
    from flink_gpu import merge_into_pod_template

    return merge_into_pod_template(path, {})


def _load_configuration_file(path):
    from flink_gpu.flink.config_files import load_configuration_file

    return load_configuration_file(path, legacy=False)


def _nvml_driver(path):
    from flink_gpu import GPUDriver

    return GPUDriver({"discovery-mode": "nvml", "nvml.library-path": str(path)})


def _regular_file_refusal(what):
    return OSError, (
        lambda path, description: f"The {what} {path} is {description}, not a regular file; give the path of a file."
    )


# dlopen of a FIFO blocks until a writer comes: the NVML loader refuses it as library-not-found
_NVML_REFUSAL = (
    flink_gpu.NvmlError,
    lambda path, description: (
        f"Could not load the NVIDIA Management Library '{path}': it is {description}, not a regular "
        "file. Install the NVIDIA driver on this host, or set FLINK_GPU_NVML_LIBRARY (driver option "
        "nvml.library-path) to the path of its libnvidia-ml.so.1."
    ),
)


_READERS = {
    "Configuration.from_yaml": (
        lambda path: Configuration.from_yaml(path, legacy=False),
        _regular_file_refusal("Flink configuration file"),
    ),
    "Configuration.from_yaml legacy": (
        lambda path: Configuration.from_yaml(path, legacy=True),
        _regular_file_refusal("Flink configuration file"),
    ),
    "load_configuration_file": (_load_configuration_file, _regular_file_refusal("Flink configuration file")),
    "load_external_resources": (load_external_resources, _regular_file_refusal("Flink configuration file")),
    "merge_into_pod_template": (_read_pod_template, _regular_file_refusal("pod template file")),
    "simulator.read_spec": (simulator.read_spec, _regular_file_refusal("simulator spec file")),
    "simulator.environment": (
        lambda path: simulator.environment(spec=path),
        _regular_file_refusal("simulator spec file"),
    ),
    "GPUDriver nvml.library-path": (_nvml_driver, _NVML_REFUSAL),
}


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("kind", ["fifo", "directory", "socket", "device"])
@pytest.mark.parametrize("reader", sorted(_READERS))
def test_every_reader_refuses_a_path_that_is_not_a_regular_file_at_once(tmp_path, reader, kind):
    read, (error_type, expected) = _READERS[reader]
    path, description = _odd_path(tmp_path, kind)
    if kind == "directory" and reader.startswith(("Configuration", "load_")):
        (path / "config.yaml").mkdir()  # a directory is a conf directory: its file is the odd one
        path = path / "config.yaml"
        read_path = path.parent
    else:
        read_path = path

    def blocked(signum, frame):
        raise _Blocked()

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    try:
        with pytest.raises(error_type) as error:
            read(read_path)
    except _Blocked:
        pytest.fail(f"{reader} blocked on {description} {path}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert str(error.value) == expected(path, description)
