"""Exceptions of flink-gpu, named after their Java counterparts in Flink (docs/design.md §1)."""


class FlinkException(Exception):
    """A failure Flink would report as ``org.apache.flink.util.FlinkException``."""


class IllegalConfigurationException(ValueError):
    """A configuration value that cannot be used (Flink's ``IllegalConfigurationException``)."""


class NvmlError(FlinkException):
    """NVML could not be loaded or answered with an error.

    ``code`` is NVML's return code (``None`` when the library itself could not be loaded),
    ``library_path`` the libnvidia-ml that was tried, ``function`` the NVML call that failed.
    """

    def __init__(self, message: str, code: "int | None" = None, library_path: str = "",
                 function: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.library_path = library_path
        self.function = function
