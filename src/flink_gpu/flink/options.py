"""Flink's ``ConfigOption`` and the conversions of raw configuration values (Flink's
``ConfigurationUtils``): ``"2"`` and ``2`` are both the long 2, ``"2.0"`` is not, ``"gpu;fpga"``
is the list ``["gpu", "fpga"]``. Each conversion raises ``ValueError`` with the cause (Flink's text
where it helps a user); ``Configuration.get`` wraps it into "Could not parse value '<v>' for key
'<k>'."
"""

from __future__ import annotations

import builtins
import re
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeGuard, TypeVar

if TYPE_CHECKING:
    from datetime import timedelta

from flink_gpu.errors import ValueTooLongError
from flink_gpu.flink.grammars import java_trim
from flink_gpu.flink.list_syntax import split_escaped

__all__ = [
    "MAX_RENDERED_LENGTH",
    "ConfigOption",
    "Duration",
    "ValueTooLongError",
    "config_option",
    "convert_value",
    "to_java_string",
]

#: The most characters a value renders to. Flink doubles the quotes of a list nested in a list at
#: each level, so a short hostile value could render to 2**depth characters; no option needs this.
MAX_RENDERED_LENGTH = 1 << 20


T = TypeVar("T")


def _is_timedelta(value: object) -> TypeGuard[timedelta]:
    # datetime is only imported by callers that have timedeltas; keep `import flink_gpu` light
    datetime = sys.modules.get("datetime")
    return datetime is not None and isinstance(value, datetime.timedelta)


_JAVA_LONG_MIN = -(2**63)
_JAVA_LONG_MAX = 2**63 - 1


class Duration:
    """Marker type for duration options: values read as seconds (``float``).

    Raw values use Flink's ``TimeUtils.parseDuration`` grammar (``"10 s"``, ``"500ms"``,
    ``"1 min"``; a bare number is milliseconds, as in Flink); a ``datetime.timedelta`` is taken
    as is.
    """

    def __init__(self) -> None:
        raise TypeError("Duration is a marker type for ConfigOption; it has no instances")


class ConfigOption(Generic[T]):
    """An immutable description of one configuration key: its type, default and documentation."""

    __slots__ = ("key", "type", "default_value", "description")

    key: str
    type: builtins.type  # the attribute's name shadows the builtin in the class body
    default_value: T | None
    description: str

    def __init__(self, key: str, type: builtins.type, default_value: T | None = None, description: str = "") -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"A ConfigOption key must be a non-empty string, got {key!r}")
        if type not in _CONVERTERS:
            names = ", ".join(t.__name__ for t in _CONVERTERS)
            raise TypeError(f"Unsupported type {type!r} for option {key!r}; use one of {names}")
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "default_value", default_value)
        object.__setattr__(self, "description", description)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ConfigOption is immutable (tried to set {name!r})")

    def has_default_value(self) -> bool:
        return self.default_value is not None

    def with_description(self, description: str) -> ConfigOption[T]:
        return ConfigOption(self.key, self.type, self.default_value, description)

    def with_default(self, default_value: T | None) -> ConfigOption[T]:
        return ConfigOption(self.key, self.type, default_value, self.description)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigOption):
            return NotImplemented
        return (self.key, self.type, self.default_value) == (other.key, other.type, other.default_value)

    def __hash__(self) -> int:
        return hash((self.key, self.type))

    def __repr__(self) -> str:
        return f"ConfigOption(key={self.key!r}, type={self.type.__name__}, default_value={self.default_value!r})"


def config_option(key: str, type: type, default: Any = None, description: str = "") -> ConfigOption[Any]:
    """Shorthand for ``ConfigOption(key, type, default, description)``."""
    return ConfigOption(key, type, default, description)


# ---------------------------------------------------------------------------------------------
# Conversions


def _java_double_string(value: float) -> str:
    """Java's ``Double.toString`` for the common cases (``2.0``, ``1.0E20``, ``NaN``)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e7:
        text = repr(value)
        return text if ("." in text or "e" in text) else text + ".0"
    from decimal import Decimal  # rare path: only huge or tiny floats

    # repr gives the shortest round-tripping digits, as Java's Double.toString (JDK 19+)
    _sign, digits, exponent = Decimal(repr(magnitude)).normalize().as_tuple()
    assert isinstance(exponent, int)  # a finite value's ('n', 'N', 'F': NaN and infinity, returned above)
    text = "".join(map(str, digits))
    return f"{'-' if value < 0 else ''}{text[0]}.{text[1:] or '0'}E{len(digits) - 1 + exponent}"


def _duration_string(seconds: float) -> str:
    """Flink's ``TimeUtils.formatWithHighestUnit`` for a duration given in seconds."""
    nanos = round(seconds * 1_000_000_000)
    if nanos == 0:
        return "0 ms"
    for unit, size in (
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("µs", 1_000),
        ("ns", 1),
    ):
        if nanos % size == 0:
            return f"{nanos // size} {unit}"
    raise AssertionError("unreachable: every integer is a multiple of 1 ns")


def _escape_with_single_quote(text: str) -> str:
    if ";" in text or '"' in text or "'" in text:
        return "'" + text.replace("'", "''") + "'"
    return text


def to_java_string(value: object) -> str:
    """Render a raw value the way Flink's ``ConfigurationUtils.convertToString`` does."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double_string(value)
    if _is_timedelta(value):
        return _duration_string(value.total_seconds())
    if isinstance(value, (list, tuple)):
        return _bounded_join(";", (_escape_with_single_quote(to_java_string(v)) for v in value))
    if isinstance(value, Mapping):
        return _bounded_join(
            ",", (f"{_escape_kv(to_java_string(k))}:{_escape_kv(to_java_string(v))}" for k, v in value.items())
        )
    return str(value)


def _bounded_join(separator: str, parts: Iterable[str]) -> str:
    # checked per part, so that no level builds more than twice the limit before it is refused
    out: list[str] = []
    length = 0
    for part in parts:
        length += len(part) + len(separator)
        if length > MAX_RENDERED_LENGTH:
            raise ValueTooLongError(
                f"The value renders to more than {MAX_RENDERED_LENGTH} characters (lists nested in "
                "lists double their quotes at each level); write it flat."
            )
        out.append(part)
    return separator.join(out)


def _escape_kv(text: str) -> str:
    if ":" in text or "," in text or '"' in text or "'" in text:
        return "'" + text.replace("'", "''") + "'"
    return text


def _to_str(value: object) -> str:
    return to_java_string(value)


# patterns are compiled on first use (re caches them), not at import
_LONG_RE = r"[+-]?\d+"
_WHOLE_NUMBER = "Expected a whole number such as 2 (Flink reads it as a Java long)."


def _to_int(value: object) -> int:
    # Long.parseLong: optional sign and decimal digits only; no blanks, no '_', no '2.0'
    if isinstance(value, bool):
        raise ValueError(_WHOLE_NUMBER)
    if isinstance(value, int):
        result = value
    else:
        text = to_java_string(value)
        if not re.fullmatch(_LONG_RE, text):
            raise ValueError(_WHOLE_NUMBER)
        result = int(text)
    if not _JAVA_LONG_MIN <= result <= _JAVA_LONG_MAX:
        raise ValueError(f"The value is out of the range of a 64-bit long [{_JAVA_LONG_MIN}, {_JAVA_LONG_MAX}].")
    return result


_NUMBER = "Expected a number such as 1.5."
_DOUBLE_RE = r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)"


def _to_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(_NUMBER)
    if isinstance(value, (int, float)):
        return float(value)
    text = java_trim(to_java_string(value))  # Double.parseDouble trims
    if not re.fullmatch(_DOUBLE_RE, text):
        raise ValueError(_NUMBER)
    return float(text.rstrip("fFdD").replace("Infinity", "inf"))


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = to_java_string(value)
    if text.lower() == "true":
        return True
    if text.lower() == "false":
        return False
    raise ValueError(f"Unrecognized option for boolean: {text}. Expected either true or false(case insensitive)")


def _to_list(value: object) -> list[str]:
    # a real list (dict value, YAML sequence) is taken as is; a string goes through the splitter
    if isinstance(value, (list, tuple)):
        return [to_java_string(v) for v in value]
    return split_escaped(to_java_string(value), ";")


def _to_duration(value: object) -> float:
    if _is_timedelta(value):
        return value.total_seconds()
    from flink_gpu.flink.grammars import parse_duration

    return parse_duration(to_java_string(value))


_CONVERTERS = {str: _to_str, int: _to_int, float: _to_float, bool: _to_bool, list: _to_list, Duration: _to_duration}


def convert_value(raw: object, type: type) -> Any:
    """``raw`` converted to ``type`` (one of a ``ConfigOption``'s types), as Flink's
    ``ConfigurationUtils.convertValue``; ``ValueError`` with the cause when it does not convert."""
    return _CONVERTERS[type](raw)
