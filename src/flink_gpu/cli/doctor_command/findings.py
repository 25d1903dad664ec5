"""What doctor found: one finding per check result, the checkup that collects them, the report."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Union

from flink_gpu.cli._output import plural
from flink_gpu.flink.configuration import Configuration

if TYPE_CHECKING:
    import argparse

    from flink_gpu.errors import NvmlError
    from flink_gpu.nvml import Enumeration, Library

    #: NVML as one library path gave it: (the library, its enumeration), or why it cannot be opened.
    OpenedNvml = Union[tuple[Library, Enumeration], NvmlError]

_LEVELS = {"error": "[FAIL]", "warning": "[WARN]", "note": "[note]", "ok": "[ ok ]"}


class Finding(NamedTuple):
    resource: "str | None"
    check: str
    level: str  # error, warning, note, ok
    message: str
    fix: "str | None"


class Checkup:
    """One run of doctor: where the configuration is, what it holds, and the findings so far.

    Every check module reads the run's facts from here and reports with :meth:`add`.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        file: str,
        conf_dir: str,
        flink_home: "str | None",
        flink_home_source: "str | None",
    ) -> None:
        self.args = args
        self.file = file
        self.conf_dir = conf_dir
        self.flink_home = flink_home
        self.flink_home_source = flink_home_source
        self._config: "Configuration | None" = None
        self.findings: "list[Finding]" = []
        # NVML opened once per library path for the whole run (several GPU resources may share it)
        self.nvml: "dict[str | None, OpenedNvml]" = {}
        # the GPU resources whose discovery loads the NVML that the TaskManager's environment selects
        self.nvml_resources: "list[str]" = []

    @property
    def config(self) -> Configuration:
        """The configuration the checks read; set once it is loaded (the checks run only then)."""
        if self._config is None:
            raise RuntimeError("doctor's checks read the configuration before it was loaded")
        return self._config

    @config.setter
    def config(self, config: Configuration) -> None:
        self._config = config

    def add(
        self, level: str, check: str, message: str, fix: "str | None" = None, resource: "str | None" = None
    ) -> None:
        self.findings.append(Finding(resource, check, level, message, fix))

    def summary(self) -> dict[str, int]:
        count = {level: sum(1 for f in self.findings if f.level == level) for level in ("error", "warning", "note")}
        return {"errors": count["error"], "warnings": count["warning"], "notes": count["note"]}


def print_report(checkup: Checkup) -> None:
    """The text report: where the configuration is, each finding with its fix, a summary line."""
    print(f"Configuration: {checkup.file}")
    if checkup.flink_home:
        print(
            f"FLINK_HOME: {checkup.flink_home}"
            + (f" ({checkup.flink_home_source})" if checkup.flink_home_source else "")
        )
    print()
    for finding in checkup.findings:
        prefix = _LEVELS[finding.level]
        who = f"{finding.resource}: " if finding.resource else ""
        print(f"{prefix} {who}{finding.message}")
        if finding.fix:
            lines = finding.fix.split("\n")
            print(f"       fix: {lines[0]}")
            for line in lines[1:]:
                print(f"            {line}")
    summary = checkup.summary()
    print()
    notes = plural(summary["notes"], "note")
    if summary["errors"]:
        print(f"{plural(summary['errors'], 'check')} failed, {plural(summary['warnings'], 'warning')}.")
    elif summary["warnings"]:  # exit status 0, but something to look at: never "no problem"
        print(f"{plural(summary['warnings'], 'warning')}, no failure ({notes}).")
    else:
        print(f"No problem found ({notes}).")
