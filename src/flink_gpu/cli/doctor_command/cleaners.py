"""Age-based cleaners of the coordination file's directory: systemd-tmpfiles deletes files left untouched
for a rule's age, locked or not (docs/SECURITY.md). A coordination or bindings file deleted while
TaskManagers hold GPUs drops their claims, and the next TaskManager is given GPUs already in use.

The rules are read from the tmpfiles.d directories as systemd-tmpfiles reads them (tmpfiles.d(5)): a
file name in an earlier directory overrides the same name in a later one, the files are applied in the
lexical order of their names, and the first line for a path wins; ``x`` and ``X`` lines exclude paths
(shell globs) from cleaning.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from typing import NamedTuple

from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.coordination import TOPOLOGY_SUFFIX, companion_paths

#: tmpfiles.d(5)'s search path, highest precedence first.
TMPFILES_DIRS = ("/etc/tmpfiles.d", "/run/tmpfiles.d", "/usr/local/lib/tmpfiles.d", "/usr/lib/tmpfiles.d")

#: The line types whose age field cleans the directory's contents.
_CLEANING_TYPES = frozenset("dDevqQ")


class TmpfilesRule(NamedTuple):
    kind: str  # the line's type, without its modifiers ("d", "x", ...)
    path: str
    age: str  # "-" when none
    where: str  # "<file>:<line number>", for the message


def read_rules(directories: "tuple[str, ...] | list[str]" = TMPFILES_DIRS) -> "list[TmpfilesRule]":
    """Every rule of the configuration files in ``directories`` (earlier ones override later ones)."""
    files: "dict[str, str]" = {}
    for directory in reversed(directories):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if name.endswith(".conf"):
                files[name] = os.path.join(directory, name)
    rules = []
    for name in sorted(files):
        try:
            with open(files[name], encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            fields = line.split()
            if len(fields) < 2 or fields[0].startswith("#"):
                continue
            kind = fields[0].rstrip("!+-=~^$?")  # modifiers (tmpfiles.d(5)): not the type
            age = fields[5] if len(fields) > 5 else "-"
            rules.append(TmpfilesRule(kind, fields[1], age, f"{files[name]}:{number}"))
    return rules


def _cleans_files_in(rule: TmpfilesRule, directory: str) -> bool:
    """Whether the rule ages out the files directly in ``directory``."""
    if rule.kind not in _CLEANING_TYPES or rule.age in ("-", "") or "%" in rule.path:
        return False
    age = rule.age.partition(":")[2] if ":" in rule.age else rule.age  # "cm:30d": which times count
    if age.startswith("~"):  # only the contents of its subdirectories
        return os.path.normpath(rule.path) != directory and _within(directory, rule.path)
    return _within(directory, rule.path)


def _within(directory: str, top: str) -> bool:
    top = os.path.normpath(top)
    return directory == top or directory.startswith(top.rstrip("/") + "/")


def cleaning(path: str, rules: "list[TmpfilesRule]") -> "tuple[TmpfilesRule | None, list[str]]":
    """The rule that ages out ``path``'s directory (the first for its path, as tmpfiles applies them), and
    which of the coordination file's companions (itself, ``.lease``, ``.bindings``, ``.bindings.lease``)
    no ``x``/``X`` line excludes from it."""
    directory = os.path.dirname(os.path.abspath(path))
    seen: "set[str]" = set()
    cleaner = None
    for rule in rules:
        if rule.kind in _CLEANING_TYPES:
            if rule.path in seen:
                continue
            seen.add(rule.path)
            if cleaner is None and _cleans_files_in(rule, directory):
                cleaner = rule
    if cleaner is None:
        return None, []
    # x excludes a path and, for a directory, what is below it; X the path only
    excludes = [(rule.path, rule.kind == "x") for rule in rules if rule.kind in ("x", "X")]

    def excluded(file: str) -> bool:
        ancestors = [os.path.dirname(file)]
        while ancestors[-1] not in ("/", ""):
            ancestors.append(os.path.dirname(ancestors[-1]))
        return any(
            fnmatch.fnmatchcase(file, glob) or (below and any(fnmatch.fnmatchcase(a, glob) for a in ancestors))
            for glob, below in excludes
        )

    # the topology copy is read again when it is gone: a cleaner costs nothing there
    companions = [
        os.path.abspath(path),
        *(c for c in companion_paths(os.path.abspath(path)) if not c.endswith(TOPOLOGY_SUFFIX)),
    ]
    return cleaner, [c for c in companions if not excluded(c)]


def check_age_cleaners(
    checkup: Checkup, name: str, path: str, directories: "tuple[str, ...] | list[str]" = TMPFILES_DIRS
) -> None:
    cleaner, exposed = cleaning(path, read_rules(directories))
    if cleaner is None:
        return
    if not exposed:
        checkup.add(
            "ok",
            "coordination-file",
            f"systemd-tmpfiles cleans {cleaner.path} (age {cleaner.age}, "
            f"{cleaner.where}) but excludes the coordination file and its companions.",
            resource=name,
        )
        return
    glob = os.path.abspath(path) + "*"
    checkup.add(
        "warning",
        "coordination-file",
        f"systemd-tmpfiles deletes files in {cleaner.path} untouched for {cleaner.age} ({cleaner.where}), "
        f"locked or not: {', '.join(exposed)}. Where no TaskManager claims GPUs for that long, the "
        "claims of running TaskManagers are deleted with the file, and the next TaskManager is given "
        "GPUs already in use.",
        f"Exclude them from cleaning (as root): echo {shlex.quote('x ' + glob)} >> /etc/tmpfiles.d/flink-gpu.conf",
        resource=name,
    )
