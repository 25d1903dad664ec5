"""Flink's ``Configuration`` (docs/design.md §2.1): flat configuration keys mapped to raw values.

Values are kept as given (strings from a legacy ``flink-conf.yaml``, YAML scalars from a 2.x
``config.yaml``, anything from a dict) and converted when read through a ``ConfigOption``
(:mod:`flink_gpu.flink.options`, with Flink's list syntax from :mod:`flink_gpu.flink.list_syntax`);
files are read by :mod:`flink_gpu.flink.config_files`. This module also exports the public names of
those modules, so ``from flink_gpu.flink.configuration import ...`` keeps working for all of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from flink_gpu.errors import IllegalConfigurationException, ValueTooLongError
from flink_gpu.flink.config_files import flatten_nested_keys, load_configuration_file
from flink_gpu.flink.list_syntax import split_escaped
from flink_gpu.flink.options import ConfigOption, Duration, config_option, convert_value, to_java_string

__all__ = [
    "ConfigOption",
    "Configuration",
    "Duration",
    "config_option",
    "convert_value",
    "split_escaped",
    "to_java_string",
]

LOG = logging.getLogger("flink_gpu.flink.configuration")


def _key_of(key_or_option: str | ConfigOption[Any]) -> str:
    if isinstance(key_or_option, ConfigOption):
        return key_or_option.key
    if isinstance(key_or_option, str):
        return key_or_option
    raise TypeError(f"A configuration key must be a str or ConfigOption, got {key_or_option!r}")


class Configuration:
    """Flat Flink configuration keys mapped to raw values.

    ``prefixed(p)`` returns a live view in which every key is read and written with ``p`` in
    front (Flink's ``DelegatingConfiguration``), which is how a driver sees its ``param.`` keys.
    """

    __slots__ = ("_data", "_prefix")

    def __init__(self, data: Configuration | Mapping[str, object] | None = None) -> None:
        self._data: dict[str, object] = {}
        self._prefix = ""
        if data is None:
            return
        if isinstance(data, Configuration):
            self._data = data.to_dict()
        elif isinstance(data, Mapping):
            self._data = flatten_nested_keys(data)
        else:
            raise TypeError(f"Configuration expects a mapping of Flink keys, got {type(data).__name__}")

    @classmethod
    def coerce(cls, value: Configuration | Mapping[str, object] | None) -> Configuration:
        """``None``: empty; a mapping: a new ``Configuration``; a ``Configuration``: itself."""
        if isinstance(value, Configuration):
            return value
        return cls(value)

    # -- reading ---------------------------------------------------------------------------

    def _raw(self, key: str) -> tuple[bool, object]:
        full = self._prefix + key
        if full in self._data:
            return True, self._data[full]
        return False, None

    def get(self, key_or_option: str | ConfigOption[Any], default: Any = None) -> Any:
        """A ``ConfigOption`` is converted to its type (its default, or ``default`` when given,
        if absent); a plain key gives the raw value or ``default``."""
        key = _key_of(key_or_option)
        present, raw = self._raw(key)
        if not isinstance(key_or_option, ConfigOption):
            return raw if present else default
        if not present:
            value = default if default is not None else key_or_option.default_value
            return list(value) if isinstance(value, list) else value  # never hand out a shared list
        try:
            return convert_value(raw, key_or_option.type)
        except ValueTooLongError as cause:
            raise IllegalConfigurationException(f"Could not read key '{self._prefix + key}': {cause}") from None
        except ValueError as cause:
            raise IllegalConfigurationException(
                f"Could not parse value '{to_java_string(raw)}' for key '{self._prefix + key}'. {cause}"
            ) from cause

    def get_string(self, key: str | ConfigOption[Any], default: str | None = None) -> str | None:
        """The value rendered as Flink would (``2`` → ``"2"``, lists joined with ``;``)."""
        present, raw = self._raw(_key_of(key))
        if not present:
            return default
        try:
            return to_java_string(raw)
        except ValueTooLongError as cause:
            raise IllegalConfigurationException(
                f"Could not read key '{self._prefix + _key_of(key)}': {cause}"
            ) from None

    def contains(self, key_or_option: str | ConfigOption[Any]) -> bool:
        return self._raw(_key_of(key_or_option))[0]

    def __contains__(self, key_or_option: object) -> bool:
        if not isinstance(key_or_option, (str, ConfigOption)):
            return False
        return self.contains(key_or_option)

    def keys(self) -> list[str]:
        """The keys of this view (prefix stripped), in insertion order."""
        p = self._prefix
        return [k[len(p) :] for k in self._data if k.startswith(p)]

    def to_dict(self) -> dict[str, object]:
        p = self._prefix
        return {k[len(p) :]: v for k, v in self._data.items() if k.startswith(p)}

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Configuration):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, like a dict

    def __repr__(self) -> str:
        if self._prefix:
            return f"Configuration(prefix={self._prefix!r}, {self.to_dict()!r})"
        return f"Configuration({self._data!r})"

    # -- writing ---------------------------------------------------------------------------

    def set(self, key_or_option: str | ConfigOption[Any], value: object) -> Configuration:
        """Set a raw value (``None`` removes the key); returns ``self`` for chaining."""
        full = self._prefix + _key_of(key_or_option)
        if value is None:
            self._data.pop(full, None)
        else:
            self._data[full] = value
        return self

    def remove(self, key_or_option: str | ConfigOption[Any]) -> bool:
        full = self._prefix + _key_of(key_or_option)
        return self._data.pop(full, None) is not None

    def prefixed(self, prefix: str) -> Configuration:
        """A live view of the keys under ``prefix``, with the prefix stripped."""
        view = Configuration.__new__(Configuration)
        view._data = self._data
        view._prefix = self._prefix + prefix
        return view

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], *, legacy: bool | None = None) -> Configuration:
        """Load a Flink configuration file, or the one in a Flink ``conf`` directory.

        A directory is searched for ``config.yaml`` (Flink 2.x), then ``flink-conf.yaml``.
        ``flink-conf.yaml`` is read with Flink's legacy line parser (``key: value`` lines, ``#``
        comments, values kept as strings; each line it skips is a WARN, as in Flink); any other
        file as standard YAML with YAML 1.2 core scalars (as Flink 2.x's snakeyaml-engine), nested
        mappings flattened with ``.``. ``legacy`` forces one parser or the other. See
        :func:`flink_gpu.flink.config_files.load_configuration_file` for the errors, and for the skipped
        lines as data.
        """
        loaded = load_configuration_file(path, legacy=legacy)
        for line in loaded.skipped:
            LOG.warning("%s", line.message)
        config = cls()
        config._data = loaded.data
        return config
