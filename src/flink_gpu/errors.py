"""Every exception flink-gpu raises for a failure the caller can act on, in one place (docs/design.md §10.1).

Each is importable from ``flink_gpu`` and from here; the modules that raise them import them from here (the
old places, ``flink_gpu.binding.BindingError`` and the like, still name the same classes). Flink's names
where Flink has the type: ``FlinkException``, ``IllegalConfigurationException``. Python's own types
otherwise: ``ValueError`` for a bad argument (Java's ``IllegalArgumentException``), ``TimeoutError`` for a
lock not had in time, ``OSError`` for a file that cannot be used. This module imports nothing: ``import
flink_gpu`` stays light.
"""

__all__ = [
    "BindingError",
    "CudaDeviceError",
    "DiscoveryScriptNotExecutable",
    "DiscoveryScriptNotFound",
    "FactoryLoadError",
    "FactoryNotFoundError",
    "FileTooLargeError",
    "FlinkException",
    "IllegalConfigurationException",
    "LocalClusterError",
    "NotARegularFileError",
    "NotEnoughGpusError",
    "NvmlError",
    "SlotUnknownError",
    "ValueTooLongError",
]


class FlinkException(Exception):
    """A failure Flink would report as ``org.apache.flink.util.FlinkException``: the base of the failures
    below that a TaskManager reports, so that ``except FlinkException`` catches them as Flink does."""


class IllegalConfigurationException(ValueError):
    """A configuration value that cannot be used (Flink's ``IllegalConfigurationException``); the message
    names the key, the value and what it must be: change it in the Flink configuration."""


class ValueTooLongError(ValueError):
    """A configuration value that renders to more than ``flink_gpu.flink.options.MAX_RENDERED_LENGTH``
    characters (a list nested so deep that Flink's quoting doubles it at each level): flatten the value."""


class NvmlError(FlinkException):
    """NVML could not be loaded or answered with an error.

    ``code`` is NVML's return code (``None`` when the library itself could not be loaded),
    ``library_path`` the libnvidia-ml that was tried, ``function`` the NVML call that failed. The message
    says what to check: the driver (``nvidia-smi``), ``FLINK_GPU_NVML_LIBRARY``, or the bundled simulator
    for a host without a GPU.
    """

    def __init__(self, message: str, code: "int | None" = None, library_path: str = "", function: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.library_path = library_path
        self.function = function


class BindingError(FlinkException):
    """GPUs could not be given to a holder: the base of :class:`NotEnoughGpusError` and
    :class:`SlotUnknownError`, and what ``flink_gpu.binding`` raised for both before they had types of
    their own (``except BindingError`` still catches them)."""


class NotEnoughGpusError(BindingError):
    """Fewer GPUs are free, or usable, than a claim (``flink_gpu.coordination``, a coordinated driver) or a
    bind (``flink_gpu.binding.bind``, ``flink_gpu.pyflink.bind_gpus``) asks for; nothing was taken.

    The message says how many were asked for, which GPUs the host or the TaskManager has, who holds each
    and where (the coordination or bindings file), and what to change: release or clean stale holders
    (``flink-gpu coordination clean``), ask for fewer, or give the TaskManager more (its
    ``external-resource.<name>.amount``). The core's not-enough status reaches Python as this type.
    """

    #: A bind's shortage only: a flink_gpu.policy.Orphan (pid, taskmanager, index) for each orphaned worker its
    #: message names, a process that still runs on a GPU short of memory though the TaskManager it bound for is
    #: gone: ending it is the fix, not asking for less.
    orphans: "tuple[object, ...]" = ()


class SlotUnknownError(BindingError):
    """``bind_gpus`` in thread mode cannot tell the subtask's slot (the Java RuntimeContext gives no
    allocation id), so it cannot give the slot GPUs of its own: bind in process mode
    (``python.execution-mode: process``), where the slot's Python worker is the holder."""


class CudaDeviceError(FlinkException):
    """A GPU that CUDA does not see in this process (or whose ordinal cannot be told): the message
    names the GPU, the environment variable and its value, and what to change."""


class FactoryNotFoundError(FlinkException):
    """A driver factory name resolves to nothing (docs/design.md §2.4); ``detail`` says what was tried:
    fix ``external-resource.<name>.driver-factory.class`` or install the package that provides it."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class FactoryLoadError(FlinkException):
    """A driver factory's module exists but could not be imported, or the object is no factory;
    ``detail`` says why (the import's own error, or what the object is)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class DiscoveryScriptNotFound(FileNotFoundError):
    """The discovery script does not exist (docs/design.md §3.2); ``path`` is the absolute path that was
    tried: fix ``discovery-script.path`` (relative paths are resolved against ``$FLINK_HOME``)."""

    def __init__(self, path: str, message: "str | None" = None) -> None:
        super().__init__(message or f"The gpu discovery script does not exist in path {path}.")
        self.path = path


class DiscoveryScriptNotExecutable(FlinkException):
    """The discovery script exists but cannot be run (not executable, or a directory); ``path`` is its
    absolute path: ``chmod +x`` it, or point ``discovery-script.path`` at the script itself."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class NotARegularFileError(OSError):
    """A path given as a file (a configuration, a simulator spec, a pod template)
    names a directory, FIFO, socket or device instead: the message says which; name the file itself."""


class FileTooLargeError(OSError):
    """A file holds more than ``flink_gpu.base.regular_files.MAX_FILE_SIZE`` bytes, far above any configuration,
    spec or template: it is not the file meant."""


class LocalClusterError(RuntimeError):
    """A local Flink cluster (flink_gpu.deploy.local_cluster, the example's and the end-to-end tests') cannot
    start or do what was asked: no Flink distribution or Java, a daemon that exits, a job that fails; the
    message says why."""
