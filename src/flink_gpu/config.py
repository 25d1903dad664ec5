"""Flink's ``Configuration`` and ``ConfigOption`` (SPEC 2.1), with loading of Flink's YAML files.

Values are kept as given (strings from a legacy ``flink-conf.yaml``, YAML scalars from a 2.x
``config.yaml``, anything from a dict) and converted when read through a ``ConfigOption``, with
the rules and error texts of Flink's ``ConfigurationUtils``: ``"2"`` and ``2`` are both the long 2,
``"2.0"`` is not, ``"gpu;fpga"`` is the list ``["gpu", "fpga"]``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from flink_gpu.java_text import is_java_whitespace, java_trim
from flink_gpu.errors import IllegalConfigurationException

__all__ = ["ConfigOption", "Configuration", "Duration", "config_option", "split_escaped"]

LOG = logging.getLogger("flink_gpu.config")

T = TypeVar("T")


def _is_timedelta(value: object) -> bool:
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
    type: type
    default_value: T | None
    description: str

    def __init__(self, key: str, type: type, default_value: T | None = None,
                 description: str = "") -> None:
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
        return (self.key, self.type, self.default_value) == (
            other.key, other.type, other.default_value)

    def __hash__(self) -> int:
        return hash((self.key, self.type))

    def __repr__(self) -> str:
        return (f"ConfigOption(key={self.key!r}, type={self.type.__name__}, "
                f"default_value={self.default_value!r})")


def config_option(key: str, type: type, default: Any = None, description: str = "") -> ConfigOption:
    """Shorthand for ``ConfigOption(key, type, default, description)``."""
    return ConfigOption(key, type, default, description)


# ---------------------------------------------------------------------------------------------
# Conversions (Flink's ConfigurationUtils). Each raises ValueError with the cause (Flink's text
# where it helps a user); the caller wraps it into "Could not parse value '<v>' for key '<k>'."

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
    text = "".join(map(str, digits))
    return (f"{'-' if value < 0 else ''}{text[0]}.{text[1:] or '0'}"
            f"E{len(digits) - 1 + exponent}")


def _duration_string(seconds: float) -> str:
    """Flink's ``TimeUtils.formatWithHighestUnit`` for a duration given in seconds."""
    nanos = round(seconds * 1_000_000_000)
    if nanos == 0:
        return "0 ms"
    for unit, size in (("d", 86_400_000_000_000), ("h", 3_600_000_000_000),
                       ("min", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000),
                       ("µs", 1_000), ("ns", 1)):
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
        return ";".join(_escape_with_single_quote(to_java_string(v)) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{_escape_kv(to_java_string(k))}:{_escape_kv(to_java_string(v))}"
                        for k, v in value.items())
    return str(value)


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
        raise ValueError(f"The value is out of the range of a 64-bit long "
                         f"[{_JAVA_LONG_MIN}, {_JAVA_LONG_MAX}].")
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
    raise ValueError(f"Unrecognized option for boolean: {text}. Expected either true or false"
                     f"(case insensitive)")


def _to_list(value: object) -> list[str]:
    # a real list (dict value, YAML sequence) is taken as is; a string goes through the splitter
    if isinstance(value, (list, tuple)):
        return [to_java_string(v) for v in value]
    return split_escaped(to_java_string(value), ";")


_DURATION_UNITS = {}
for _seconds, _labels in ((86_400.0, ("d", "day", "days")),
                          (3_600.0, ("h", "hour", "hours")),
                          (60.0, ("min", "m", "minute", "minutes")),
                          (1.0, ("s", "sec", "secs", "second", "seconds")),
                          (1e-3, ("ms", "milli", "millis", "millisecond", "milliseconds")),
                          (1e-6, ("µs", "micro", "micros", "microsecond", "microseconds")),
                          (1e-9, ("ns", "nano", "nanos", "nanosecond", "nanoseconds"))):
    for _label in _labels:
        _DURATION_UNITS[_label] = _seconds


def _to_duration(value: object) -> float:
    if _is_timedelta(value):
        return value.total_seconds()
    text = java_trim(to_java_string(value))
    if not text:
        raise ValueError("argument is an empty- or whitespace-only string")
    match = re.match(r"[0-9]*", text)
    number = match.group(0) if match else ""
    unit = text[len(number):].strip().lower()
    if not number:
        raise ValueError("text does not start with a number")
    if not unit:
        return int(number) / 1000.0  # Flink: a bare number is milliseconds
    if unit not in _DURATION_UNITS:
        raise ValueError(f"Time interval unit label '{unit}' does not match any of the "
                         f"recognized units: DAYS: (d | day | days), HOURS: (h | hour | hours), "
                         f"MINUTES: (min | m | minute | minutes), SECONDS: (s | sec | secs | "
                         f"second | seconds), MILLISECONDS: (ms | milli | millis | millisecond "
                         f"| milliseconds), MICROSECONDS: (µs | micro | micros | microsecond | "
                         f"microseconds), NANOSECONDS: (ns | nano | nanos | nanosecond | "
                         f"nanoseconds)")
    return int(number) * _DURATION_UNITS[unit]


_CONVERTERS = {str: _to_str, int: _to_int, float: _to_float, bool: _to_bool, list: _to_list,
               Duration: _to_duration}


# ---------------------------------------------------------------------------------------------
# Flink's StructuredOptionsSplitter (the list syntax of string-valued list options)

def split_escaped(text: str, delimiter: str = ";") -> list[str]:
    """Split ``text`` on ``delimiter`` as Flink's ``StructuredOptionsSplitter.splitEscaped`` does.

    Single or double quotes group text (a doubled quote inside is an escape); unquoted parts are
    trimmed; blanks between tokens are skipped; two delimiters in a row give an empty string;
    leading and trailing delimiters give nothing. Raises ``IllegalConfigurationException`` with
    Flink's messages on bad quoting.
    """
    # tokens: (kind, text, position); kind is "q" (quoted), "u" (unquoted) or "d" (delimiter)
    tokens: list[tuple[str, str, int]] = []
    cursor, length = 0, len(text)
    while cursor < length:
        ch = text[cursor]
        if ch in "'\"":
            parts: list[str] = []
            i = cursor + 1
            while True:
                if i >= length:
                    raise IllegalConfigurationException(
                        "Could not split string. Quoting was not closed properly.")
                if text[i] == ch:
                    if i + 1 < length and text[i + 1] == ch:
                        parts.append(ch)
                        i += 2
                        continue
                    break
                parts.append(text[i])
                i += 1
            tokens.append(("q", "".join(parts), cursor))
            cursor = i + 1
        elif ch == delimiter:
            tokens.append(("d", ch, cursor))
            cursor += 1
        elif not is_java_whitespace(ch):
            i = cursor
            while i < length and text[i] != delimiter:
                if text[i] in "'\"":
                    raise IllegalConfigurationException(
                        f"Could not split string. Illegal quoting at position: {i}")
                i += 1
            tokens.append(("u", java_trim(text[cursor:i]), cursor))
            cursor = i
        else:
            cursor += 1

    splits: list[str] = []
    for n, (kind, value, _position) in enumerate(tokens):
        following = tokens[n + 1] if n + 1 < len(tokens) else None
        if kind == "q":
            if following is not None and following[0] != "d":
                raise IllegalConfigurationException(
                    f"Could not split string. Illegal quoting at position: {following[2] - 1}")
            splits.append(value)
        elif kind == "u":
            splits.append(value)
        elif following is not None and following[0] == "d":
            splits.append("")
    return splits


# ---------------------------------------------------------------------------------------------

def _key_of(key_or_option: str | ConfigOption) -> str:
    if isinstance(key_or_option, ConfigOption):
        return key_or_option.key
    if isinstance(key_or_option, str):
        return key_or_option
    raise TypeError(f"A configuration key must be a str or ConfigOption, got {key_or_option!r}")


def _flatten(data: Mapping, prefix: str, out: dict[str, object]) -> None:
    """Nested mappings become dotted keys (Flink 2.x ``config.yaml``); ``None`` means unset."""
    for key, value in data.items():
        flat_key = prefix + to_java_string(key)
        if isinstance(value, Mapping) and not isinstance(value, Configuration):
            _flatten(value, flat_key + ".", out)
        elif value is not None:
            out[flat_key] = value


class Configuration:
    """Flat Flink configuration keys mapped to raw values.

    ``prefixed(p)`` returns a live view in which every key is read and written with ``p`` in
    front (Flink's ``DelegatingConfiguration``), which is how a driver sees its ``param.`` keys.
    """

    __slots__ = ("_data", "_prefix")

    def __init__(self, data: Mapping[str, object] | None = None) -> None:
        self._data: dict[str, object] = {}
        self._prefix = ""
        if data is None:
            return
        if isinstance(data, Configuration):
            self._data = data.to_dict()
        elif isinstance(data, Mapping):
            _flatten(data, "", self._data)
        else:
            raise TypeError(
                f"Configuration expects a mapping of Flink keys, got {type(data).__name__}")

    @classmethod
    def coerce(cls, value: Configuration | Mapping | None) -> Configuration:
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

    def get(self, key_or_option: str | ConfigOption, default: Any = None) -> Any:
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
            return _CONVERTERS[key_or_option.type](raw)
        except ValueError as cause:
            raise IllegalConfigurationException(
                f"Could not parse value '{to_java_string(raw)}' for key '{self._prefix + key}'. "
                f"{cause}") from cause

    def get_string(self, key: str | ConfigOption, default: str | None = None) -> str | None:
        """The value rendered as Flink would (``2`` → ``"2"``, lists joined with ``;``)."""
        present, raw = self._raw(_key_of(key))
        return to_java_string(raw) if present else default

    def contains(self, key_or_option: str | ConfigOption) -> bool:
        return self._raw(_key_of(key_or_option))[0]

    def __contains__(self, key_or_option: object) -> bool:
        if not isinstance(key_or_option, (str, ConfigOption)):
            return False
        return self.contains(key_or_option)

    def keys(self) -> list[str]:
        """The keys of this view (prefix stripped), in insertion order."""
        p = self._prefix
        return [k[len(p):] for k in self._data if k.startswith(p)]

    def to_dict(self) -> dict[str, object]:
        p = self._prefix
        return {k[len(p):]: v for k, v in self._data.items() if k.startswith(p)}

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Configuration):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        if self._prefix:
            return f"Configuration(prefix={self._prefix!r}, {self.to_dict()!r})"
        return f"Configuration({self._data!r})"

    # -- writing ---------------------------------------------------------------------------

    def set(self, key_or_option: str | ConfigOption, value: object) -> Configuration:
        """Set a raw value (``None`` removes the key); returns ``self`` for chaining."""
        full = self._prefix + _key_of(key_or_option)
        if value is None:
            self._data.pop(full, None)
        else:
            self._data[full] = value
        return self

    def remove(self, key_or_option: str | ConfigOption) -> bool:
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
    def from_yaml(cls, path: str | os.PathLike, *, legacy: bool | None = None) -> Configuration:
        """Load a Flink configuration file, or the one in a Flink ``conf`` directory.

        A directory is searched for ``config.yaml`` (Flink 2.x), then ``flink-conf.yaml``.
        ``flink-conf.yaml`` is read with Flink's legacy line parser (``key: value`` lines, ``#``
        comments, values kept as strings); any other file as standard YAML with YAML 1.2 core
        scalars (as Flink 2.x's snakeyaml-engine), nested mappings flattened with ``.``.
        ``legacy`` forces one parser or the other.
        """
        file = os.fspath(path)
        if os.path.isdir(file):
            candidates = [os.path.join(file, name) for name in ("config.yaml", "flink-conf.yaml")]
            found = [c for c in candidates if os.path.isfile(c)]
            if not found:
                raise FileNotFoundError(
                    f"No Flink configuration file in directory {file}: expected config.yaml "
                    f"or flink-conf.yaml.")
            if len(found) == 2:
                LOG.info("Both %s and %s exist; using %s and ignoring the legacy file.",
                         found[0], found[1], found[0])
            file = found[0]
        elif not os.path.exists(file):
            raise FileNotFoundError(f"The Flink configuration file {file} does not exist.")
        if legacy is None:
            legacy = os.path.basename(file) == "flink-conf.yaml"
        config = cls()
        if legacy:
            config._data = _load_legacy(file)
        else:
            config._data = _load_standard(file)
        return config


def _load_legacy(file: str) -> dict[str, object]:
    """Flink's pre-2.0 ``GlobalConfiguration.loadYAMLResource``: one ``key: value`` per line."""
    with open(file, "rb") as handle:
        text = handle.read().decode("utf-8", errors="replace")  # Java's reader substitutes too
    data: dict[str, object] = {}
    # BufferedReader.readLine ends a line at \n, \r or \r\n
    for number, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        conf = java_trim(line.split("#", 1)[0])
        if not conf:
            continue
        key_value = conf.split(": ", 1)
        if len(key_value) == 1:
            LOG.warning("Error while trying to split key and value in configuration file "
                        "%s:%d: Line is not a key-value pair (missing space after ':'?)",
                        file, number)
            continue
        key, value = java_trim(key_value[0]), java_trim(key_value[1])
        if not key or not value:
            LOG.warning("Error after splitting key and value in configuration file %s:%d: "
                        "Key or value was empty", file, number)
            continue
        data[key] = value
    return data


_CORE_LOADER = None


def _core_schema_loader():
    """A PyYAML loader with YAML 1.2 core-schema scalars, as Flink's snakeyaml-engine uses:
    ``010`` is 10, ``yes``/``on`` and dates stay strings, ``1_000`` is a string."""
    global _CORE_LOADER
    if _CORE_LOADER is not None:
        return _CORE_LOADER
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class CoreSchemaLoader(base):  # type: ignore[misc, valid-type]
        yaml_implicit_resolvers: dict = {}

    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"))
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
        list("-+0123456789"))
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                   r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))

    def construct_int(loader, node):
        text = loader.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)

    CoreSchemaLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    _CORE_LOADER = CoreSchemaLoader
    return CoreSchemaLoader


def read_yaml_mapping(path: str, what: str, expected: str, loader=None) -> dict:
    """The mapping at the top of the YAML file ``path`` (``{}`` for an empty file).

    Errors name the file as ``what`` ("Flink configuration file", "pod template file"), the line and
    column of bad YAML, and what was ``expected`` at the top level instead of what was found.
    """
    import yaml

    try:
        with open(path, "rb") as handle:
            document = yaml.load(handle, Loader=loader or getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise FileNotFoundError(f"The {what} {path} does not exist.") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "unparsable YAML"
        raise IllegalConfigurationException(f"Invalid YAML in {what} {path}{where}: {problem}.") from error
    except yaml.YAMLError as error:
        raise IllegalConfigurationException(f"Invalid YAML in {what} {path}: {error}") from error
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise IllegalConfigurationException(
            f"The {what} {path} must hold {expected}, not a {_yaml_kind(document)}.")
    return document


def _load_standard(file: str) -> dict[str, object]:
    document = read_yaml_mapping(file, "Flink configuration file",
                                 "a mapping of configuration keys at the top level", _core_schema_loader())
    data: dict[str, object] = {}
    _flatten(document, "", data)
    return data


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
