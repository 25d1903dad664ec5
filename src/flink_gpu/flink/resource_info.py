"""``ExternalResourceInfo``, the base of what operators receive (Flink's interface of that name).

Its own module, importing nothing, so that ``GPUInfo`` loads without the configuration machinery.
"""

from abc import ABC, abstractmethod


class ExternalResourceInfo(ABC):
    """Information about one external resource (e.g. one GPU), exposed as string properties."""

    __slots__ = ()

    @abstractmethod
    def get_property(self, key: str) -> "str | None":
        """The value of property ``key``, or ``None`` when this info has no such property."""

    @abstractmethod
    def get_keys(self) -> "tuple[str, ...]":
        """The property keys this info has."""
