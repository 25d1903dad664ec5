"""Loading Flink's configuration files: a ``conf`` directory, the legacy flat ``flink-conf.yaml``
and the 2.x ``config.yaml`` (standard YAML with the YAML 1.2 core schema, nested keys flattened).

Every file is read through :func:`flink_gpu.base.regular_files.read_regular_file` (a regular file of
bounded size, never blocking), and YAML aliases are bounded as Flink's YAML loader bounds them:
an alias that makes a value contain itself, more than :data:`MAX_COLLECTION_ALIASES` aliases of
mappings or lists, or aliases that expand to more than :data:`MAX_ALIAS_EXPANSION` values are
refused before anything is built, as are collections nested more than :data:`MAX_NESTING_DEPTH`
deep (aliases included).

Keys set more than once are treated as Flink 2.3 treats them: one mapping that holds a key twice
makes snakeyaml-engine refuse the whole file ("found duplicate key"), so it is refused here too; a
key that two spellings set (a nested ``taskmanager: numberOfTaskSlots: 1`` and a flat
``taskmanager.numberOfTaskSlots: 2``), or a line repeated in a legacy ``flink-conf.yaml``, silently
takes the last value in Flink, and here as well; :attr:`ConfigurationFile.repeated` names such keys
with their lines (``flink-gpu doctor`` reports them).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from flink_gpu.base.regular_files import check_regular_file, read_regular_file
from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.flink.grammars import java_trim
from flink_gpu.flink.options import to_java_string

if TYPE_CHECKING:
    import yaml  # loaded on first use, by the functions that parse

__all__ = [
    "CONFIGURATION_FILE_NAMES",
    "MAX_ALIAS_EXPANSION",
    "MAX_COLLECTION_ALIASES",
    "MAX_NESTING_DEPTH",
    "ConfigurationFile",
    "RepeatedKey",
    "SkippedLine",
    "find_configuration_file",
    "flatten_nested_keys",
    "load_configuration_file",
    "read_yaml_mapping",
]

LOG = logging.getLogger("flink_gpu.flink.configuration")

CONFIGURATION_FILE_NAMES = ("config.yaml", "flink-conf.yaml")
"""The files of a conf directory, in Flink's order of preference (2.x's first)."""

MAX_COLLECTION_ALIASES = 50
"""Aliases of mappings or lists one document may hold: Flink's YAML loader (snakeyaml-engine's
``maxAliasesForCollections``) refuses more, the defence against "billion laughs" files."""

MAX_ALIAS_EXPANSION = 100_000
"""Values that aliases may add to a document once expanded: 50 aliases still nest to 2^25 values."""

MAX_NESTING_DEPTH = 100
"""Mappings and lists one document may nest (the top-level mapping is one level): Flink
configurations and pod templates nest a dozen levels at most, while a document nested a thousand
deep (libyaml's own limit) would exhaust the stack of whatever walks it recursively later
(``json.dumps``, ``copy.deepcopy``)."""

_WHAT = "Flink configuration file"


class SkippedLine(NamedTuple):
    """A line of a legacy ``flink-conf.yaml`` that Flink's parser skips (with a WARN)."""

    file: str
    line_number: int
    text: str
    reason: str

    @property
    def message(self) -> str:
        """Flink's WARN for the line (``GlobalConfiguration.loadYAMLResource``)."""
        stage = (
            "Error while trying to split key and value"
            if self.reason.startswith("Line is not")
            else "Error after splitting key and value"
        )
        return f"{stage} in configuration file {self.file}:{self.line_number}: {self.reason}"


_NOT_A_PAIR = "Line is not a key-value pair (missing space after ':'?)"
_EMPTY = "Key or value was empty"


class RepeatedKey(NamedTuple):
    """A flat key that lines of one configuration file set more than once; Flink takes the last."""

    file: str
    key: str
    line_numbers: tuple[int, ...]  # in the file's order; the last one wins
    texts: tuple[str, ...]  # those lines, stripped

    @property
    def message(self) -> str:
        where = ", ".join(f"line {n} (`{text}`)" for n, text in zip(self.line_numbers, self.texts, strict=True))
        return (
            f"{self.key} is set {len(self.line_numbers)} times in {self.file}: {where}. Flink takes "
            f"the last one (line {self.line_numbers[-1]}) without a word."
        )


class ConfigurationFile(NamedTuple):
    """What :func:`load_configuration_file` read: the file, its flat keys, the skipped lines and the
    keys set more than once."""

    path: str
    data: dict[str, object]
    skipped: tuple[SkippedLine, ...]
    repeated: tuple[RepeatedKey, ...] = ()


def find_configuration_file(path: str | os.PathLike[str]) -> str:
    """``path`` itself, or for a directory the configuration file Flink reads there.

    A directory is searched for ``config.yaml``, then ``flink-conf.yaml`` (an INFO when both
    exist); ``FileNotFoundError`` when it has neither or ``path`` does not exist. A name there that
    is not a regular file (a FIFO called ``config.yaml``) is still chosen, as Flink would choose it,
    so that reading it says what it is instead of silently taking the other file.
    """
    file = os.fspath(path)
    if os.path.isdir(file):
        # lexists: a dangling link or a link loop is there too, and reading it says what it is
        found = [
            os.path.join(file, name) for name in CONFIGURATION_FILE_NAMES if os.path.lexists(os.path.join(file, name))
        ]
        if not found:
            raise FileNotFoundError(
                f"No Flink configuration file in directory {file}: expected config.yaml or flink-conf.yaml."
            )
        if len(found) == 2:
            LOG.info("Both %s and %s exist; using %s and ignoring the legacy file.", found[0], found[1], found[0])
        if os.path.isdir(found[0]):  # never searched as a conf directory in its turn: say what it is
            check_regular_file(found[0], _WHAT)
        return found[0]
    if not os.path.lexists(file):
        raise FileNotFoundError(f"The {_WHAT} {file} does not exist.")
    return file


def load_configuration_file(
    path: str | os.PathLike[str], *, legacy: bool | None = None, content: bytes | None = None
) -> ConfigurationFile:
    """Read a Flink configuration file, or the one in a Flink ``conf`` directory.

    ``flink-conf.yaml`` is read with Flink's legacy line parser (``key: value`` lines, ``#``
    comments, values kept as strings; the lines it skips are in ``skipped``); any other file as
    standard YAML with YAML 1.2 core scalars (as Flink 2.x's snakeyaml-engine), nested mappings
    flattened with ``.``. ``legacy`` forces one parser or the other. Raises ``FileNotFoundError``,
    ``NotARegularFileError``/``FileTooLargeError`` (from :mod:`flink_gpu.base.regular_files`), or
    ``IllegalConfigurationException`` naming the file for bad YAML. ``content``: the bytes of the file
    ``path`` names, when the caller read them under a rule of its own (a file another process names).
    """
    file = find_configuration_file(path) if content is None else os.fspath(path)
    if legacy is None:
        legacy = os.path.basename(file) == "flink-conf.yaml"
    if legacy:
        if content is None:
            content = read_regular_file(file, _WHAT)
        data, skipped, key_lines = _parse_legacy(file, content)
        lines = re.split(r"\r\n|\r|\n", content.decode("utf-8", errors="replace"))
    else:
        document, key_lines, content = _read_yaml(
            file,
            _WHAT,
            "a mapping of configuration keys at the top level",
            _core_schema_loader(),
            content=content,
            key_lines=True,
        )
        data, skipped = flatten_nested_keys(document), ()
        # the line breaks of YAML (PyYAML's marks count these)
        lines = re.split(r"\r\n|[\r\n\x85\u2028\u2029]", content.decode("utf-8", errors="replace"))
    repeated = tuple(
        RepeatedKey(file, key, tuple(numbers), tuple(lines[n - 1].strip() for n in numbers))
        for key, numbers in key_lines.items()
        if len(numbers) > 1
    )
    return ConfigurationFile(file, data, skipped, repeated)


def _parse_legacy(file: str, content: bytes) -> tuple[dict[str, object], tuple[SkippedLine, ...], dict[str, list[int]]]:
    """Flink's pre-2.0 ``GlobalConfiguration.loadYAMLResource``: one ``key: value`` per line (a
    key's later line replaces its value); also the lines that set each key."""
    text = content.decode("utf-8", errors="replace")  # Java's reader substitutes too
    data: dict[str, object] = {}
    skipped: list[SkippedLine] = []
    key_lines: dict[str, list[int]] = {}
    # BufferedReader.readLine ends a line at \n, \r or \r\n
    for number, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        conf = java_trim(line.split("#", 1)[0])
        if not conf:
            continue
        key_value = conf.split(": ", 1)
        if len(key_value) == 1:
            skipped.append(SkippedLine(file, number, line, _NOT_A_PAIR))
            continue
        key, value = java_trim(key_value[0]), java_trim(key_value[1])
        if not key or not value:
            skipped.append(SkippedLine(file, number, line, _EMPTY))
            continue
        data[key] = value
        key_lines.setdefault(key, []).append(number)
    return data, tuple(skipped), key_lines


def flatten_nested_keys(data: Mapping[str, object]) -> dict[str, object]:
    """Nested mappings become dotted keys (Flink 2.x ``config.yaml``); ``None`` means unset.

    A mapping that contains itself raises ``IllegalConfigurationException`` naming the key. Any
    depth is flattened: the walk keeps its own stack instead of recursing.
    """
    out: dict[str, object] = {}
    # one (items left, key prefix, id) per open mapping; `open_ids` are the mappings on that path
    stack = [(iter(data.items()), "", id(data))]
    open_ids = {id(data)}
    while stack:
        items, prefix, _ = stack[-1]
        for key, value in items:
            flat_key = prefix + to_java_string(key)
            if isinstance(value, Mapping):
                if id(value) in open_ids:
                    raise IllegalConfigurationException(
                        f"The configuration value at key '{flat_key}' contains itself; a "
                        f"configuration must be a tree of mappings."
                    )
                stack.append((iter(value.items()), flat_key + ".", id(value)))
                open_ids.add(id(value))
                break  # depth first, in the mapping's order, as a recursive walk would
            if value is not None:
                out[flat_key] = value
        else:
            open_ids.discard(stack.pop()[2])
    return out


_CORE_LOADER: type[yaml.SafeLoader] | None = None


def _core_schema_loader() -> type[yaml.SafeLoader]:
    """A PyYAML loader with YAML 1.2 core-schema scalars, as Flink's snakeyaml-engine uses:
    ``010`` is 10, ``yes``/``on`` and dates stay strings, ``1_000`` is a string."""
    global _CORE_LOADER
    if _CORE_LOADER is not None:
        return _CORE_LOADER
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class CoreSchemaLoader(base):  # type: ignore[misc, valid-type]
        yaml_implicit_resolvers: dict[Any, Any] = {}

    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
    )
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
    )
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )

    def construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
        text = loader.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)

    CoreSchemaLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    _CORE_LOADER = CoreSchemaLoader
    return CoreSchemaLoader


def read_yaml_mapping(
    path: str | os.PathLike[str],
    what: str,
    expected: str,
    loader: type[yaml.SafeLoader] | None = None,
    content: bytes | None = None,
) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path`` (``{}`` for an empty file).

    Errors name the file as ``what`` ("Flink configuration file", "pod template file"), the line and
    column of bad YAML or of a refused alias, and what was ``expected`` at the top level instead of
    what was found. The file is read as :func:`~flink_gpu.base.regular_files.read_regular_file` reads;
    a document nested more than :data:`MAX_NESTING_DEPTH` levels deep or with aliases beyond the
    limits of the module's description is refused. ``content``: the file's bytes, read already.
    """
    return _read_yaml(path, what, expected, loader, content=content)[0]


def _read_yaml(
    path: str | os.PathLike[str],
    what: str,
    expected: str,
    loader: type[yaml.SafeLoader] | None = None,
    *,
    content: bytes | None = None,
    key_lines: bool = False,
) -> tuple[dict[str, Any], dict[str, list[int]], bytes]:
    """:func:`read_yaml_mapping`'s mapping, with (when ``key_lines``) the lines that set each flat
    key (a mapping that holds one key twice is refused, as Flink refuses it), and the file's bytes."""
    import yaml

    path = os.fspath(path)
    if content is None:
        content = read_regular_file(path, what)
    if loader is None:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lines: dict[str, list[int]] = {}
    try:
        _check_events(yaml.parse(content, Loader=loader), path, what)
        reader = loader(content)
        try:
            node = reader.get_single_node()
            document = reader.construct_document(node) if node is not None else None
            if key_lines and isinstance(node, yaml.MappingNode):
                lines = _flat_key_lines(reader, node, path, what)
        finally:
            reader.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "unparsable YAML"
        raise IllegalConfigurationException(f"Invalid YAML in {what} {path}{where}: {problem}.") from error
    except yaml.YAMLError as error:
        raise IllegalConfigurationException(f"Invalid YAML in {what} {path}: {error}") from error
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as error:
        # PyYAML's constructors fail this way on a bad explicitly tagged value (`!!float abc`)
        if isinstance(error, IllegalConfigurationException):
            raise
        raise IllegalConfigurationException(
            f"Invalid YAML in {what} {path}: a value cannot be read ({error})."
        ) from error
    if document is None:
        return {}, lines, content
    if not isinstance(document, dict):  # PyYAML builds every mapping as a dict
        raise IllegalConfigurationException(f"The {what} {path} must hold {expected}, not a {_yaml_kind(document)}.")
    return document, lines, content


def _flat_key_lines(reader: yaml.SafeLoader, top: yaml.MappingNode, path: str, what: str) -> dict[str, list[int]]:
    """Per flat key (as :func:`flatten_nested_keys` names it), the lines that give it a value, in
    the document's order. A key twice in one mapping is refused as snakeyaml-engine refuses it."""
    import yaml

    lines: dict[str, list[int]] = {}
    stack: list[tuple[yaml.MappingNode, str]] = [(top, "")]
    while stack:
        mapping, prefix = stack.pop()
        seen: dict[tuple[type, object], int] = {}
        for key_node, value_node in mapping.value:
            key = reader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if (type(key), key) in seen:
                first = seen[type(key), key]
                where = f"line {line}" if first == line else f"lines {first} and {line}"
                raise IllegalConfigurationException(
                    f"The {what} {path} sets the key '{prefix}{to_java_string(key)}' twice in one mapping "
                    f'({where}): Flink refuses such a file ("found duplicate key") and does not start. '
                    f"Keep one of the two."
                )
            seen[type(key), key] = line
            flat_key = prefix + to_java_string(key)
            if isinstance(value_node, yaml.MappingNode):
                stack.append((value_node, flat_key + "."))
            elif value_node.tag != "tag:yaml.org,2002:null":  # null: unset (flatten_nested_keys)
                lines.setdefault(flat_key, []).append(line)
    for numbers in lines.values():
        numbers.sort()
    return lines


class _Anchor:
    __slots__ = ("size", "depth", "collection", "open")

    def __init__(self, collection: bool) -> None:
        self.size = 1
        self.depth = 0  # the levels of collections the anchored value nests, itself included
        self.collection = collection
        self.open = collection


def _check_events(events: Iterable[yaml.Event], path: str, what: str) -> None:
    """Refuse deep nesting, recursive aliases and alias bombs from the parser's events, before
    anything is built: each anchor's expanded size and depth are counted once, so a bomb costs its
    length, not 2^n, and an alias nests as deep as the value it names."""
    import yaml

    anchors: dict[str | None, _Anchor] = {}
    frames: list[list[Any]] = []  # [values so far, _Anchor | None, levels nested] per open collection
    collection_aliases = expansion = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            anchor = anchors.get(event.anchor)
            if anchor is None:
                continue  # undefined: the loader reports it with its position
            if anchor.open:
                raise IllegalConfigurationException(
                    f"The {what} {path} has a recursive alias *{event.anchor} at {_where(event)}: "
                    f"the value anchored &{event.anchor} would contain itself. Write the values "
                    f"out instead of the alias."
                )
            if anchor.collection:
                collection_aliases += 1
                if collection_aliases > MAX_COLLECTION_ALIASES:
                    raise IllegalConfigurationException(
                        f"The {what} {path} has more than {MAX_COLLECTION_ALIASES} aliases of "
                        f"mappings or lists (at {_where(event)}), the limit of Flink's YAML "
                        f"loader. Write the values out instead of the aliases."
                    )
                _check_depth(len(frames) + anchor.depth, event, path, what)
            expansion += anchor.size
            if expansion > MAX_ALIAS_EXPANSION:
                raise IllegalConfigurationException(
                    f"The aliases of the {what} {path} expand to more than "
                    f"{MAX_ALIAS_EXPANSION} values (at {_where(event)}), the limit flink-gpu "
                    f"reads. Write the values out instead of the aliases."
                )
            if frames:
                frames[-1][0] += anchor.size
                frames[-1][2] = max(frames[-1][2], 1 + anchor.depth)
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                anchors[event.anchor] = _Anchor(collection=False)
            if frames:
                frames[-1][0] += 1
        elif isinstance(event, yaml.CollectionStartEvent):
            _check_depth(len(frames) + 1, event, path, what)
            anchor = None
            if event.anchor is not None:
                anchor = anchors[event.anchor] = _Anchor(collection=True)
            frames.append([1, anchor, 1])
        elif isinstance(event, yaml.CollectionEndEvent):
            size, anchor, depth = frames.pop()
            if anchor is not None:
                anchor.size, anchor.depth, anchor.open = size, depth, False
            if frames:
                frames[-1][0] += size
                frames[-1][2] = max(frames[-1][2], 1 + depth)


def _where(event: yaml.Event) -> str:
    mark = event.start_mark  # the parser marks every event it makes
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "an unknown place"


def _check_depth(depth: int, event: yaml.Event, path: str, what: str) -> None:
    if depth > MAX_NESTING_DEPTH:
        raise IllegalConfigurationException(
            f"The {what} {path} nests mappings or lists more than {MAX_NESTING_DEPTH} levels deep "
            f"(at {_where(event)}), the most flink-gpu reads. Nest fewer levels."
        )


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
