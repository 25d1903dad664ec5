"""The discovery script: present and executable, and one run of it as a TaskManager runs it."""

from __future__ import annotations

import os
import shlex

from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.deploy.taskmanager_env import discovery_executable
from flink_gpu.errors import (
    DiscoveryScriptNotExecutable,
    DiscoveryScriptNotFound,
    FlinkException,
    IllegalConfigurationException,
)
from flink_gpu.flink.script_protocol import (
    ScriptArgs,
    exec_tokens,
    parse_gpu_indices,
    split_output_lines,
    with_coordination_file,
)
from flink_gpu.gpu.options import DEFAULT_DISCOVERY_SCRIPT, GPUDriverOptions
from flink_gpu.gpu.script_discovery import check_script as usable_script
from flink_gpu.gpu.script_discovery import run_script as run_discovery_script
from flink_gpu.gpu.settings import GPUDriverSettings


def check_script(checkup: Checkup, name: str, settings: GPUDriverSettings) -> "str | None":
    """The absolute path of the usable discovery script, else None (with the finding why)."""
    try:
        path = usable_script(settings.script_path, settings.key(GPUDriverOptions.DISCOVERY_SCRIPT_PATH))
    except (DiscoveryScriptNotFound, DiscoveryScriptNotExecutable, IllegalConfigurationException) as error:
        checkup.add("error", "script", str(error), script_fix(checkup, settings, error), resource=name)
        return None
    checkup.add("ok", "script", f"The discovery script {path} exists and is executable.", resource=name)
    return path


def script_fix(checkup: Checkup, settings: GPUDriverSettings, error: Exception) -> str:
    """The fix for a discovery script that cannot be used (``error`` says why)."""
    key = settings.key(GPUDriverOptions.DISCOVERY_SCRIPT_PATH)
    ours = discovery_executable()
    drop_in = f" Or use flink-gpu's NVML drop-in: `{key}: {ours}`." if ours else ""
    if isinstance(error, DiscoveryScriptNotFound):
        if not settings.script_path_set or settings.script_path == DEFAULT_DISCOVERY_SCRIPT:
            home = shlex.quote(checkup.flink_home) if checkup.flink_home else '"$FLINK_HOME"'
            return (
                f"The stock script ships with Flink's GPU plugin: `cp -r {home}/opt/"
                f"external-resource-gpu {home}/plugins/`." + drop_in
            )
        return (
            f"Correct {key} (a relative path is resolved against $FLINK_HOME"
            f"{'=' + checkup.flink_home if checkup.flink_home else ''})." + drop_in
        )
    if isinstance(error, DiscoveryScriptNotExecutable) and not os.path.isdir(error.path):
        return f"chmod +x {shlex.quote(error.path)}"
    return f"Set {key} to the path of an executable discovery script." + drop_in


def run_script(
    checkup: Checkup, name: str, settings: GPUDriverSettings, script: str, script_args: "ScriptArgs | None"
) -> None:
    """Runs ``script`` once with amount 1, as a TaskManager runs it; when the arguments are the
    stock script's (``script_args``) and turn coordination on, against a scratch file."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="flink-gpu-doctor-") as scratch:
        tokens = exec_tokens(settings.script_args_text)
        if script_args is not None and script_args.coordination_mode:
            # claim nothing in the real file: the run's GPUs would stay listed under this
            # short-lived process until someone reclaims them
            tokens = with_coordination_file(tokens, os.path.join(scratch, "coordination"))
        argv = [script, "1", *tokens]
        # the run as a command that works when pasted (the scratch file is gone by then)
        shown = _by_hand(script, settings, script_args)
        try:
            # Flink's Java plugin waits a fixed 10 s, the default: a valid timeout only shortens
            # doctor's own run
            result = run_discovery_script(argv, settings.timeout)
        except TimeoutError as error:
            checkup.add(
                "error",
                "script-run",
                f"`{shown}`: {error}",
                f"Run it by hand to see where it hangs (a hung nvidia-smi is the usual cause): {shown}",
                resource=name,
            )
            return
        except FlinkException as error:
            checkup.add(
                "error",
                "script-run",
                str(error),
                "Check the script's interpreter line (#!) and permissions.",
                resource=name,
            )
            return
    stdout = result.stdout.decode("utf-8", "replace")
    stderr = result.stderr.decode("utf-8", "replace")
    if result.returncode != 0:
        status = f"exit status {result.returncode}" if result.returncode >= 0 else f"signal {-result.returncode}"
        detail = _quote_output(stdout, stderr)
        fix = _failure_fix(stdout, stderr, settings, script_args, shown)
        checkup.add(
            "error",
            "script-run",
            f"The discovery script failed with {status} when run as `{shown}`{detail}: a TaskManager gets no GPU.",
            fix,
            resource=name,
        )
        return
    lines = split_output_lines(stdout)
    indices = parse_gpu_indices(lines[0]) if lines else []
    if not indices:
        checkup.add(
            "error",
            "script-run",
            f"`{shown}` exited 0 but printed no GPU index"
            f"{_quote_output(stdout, stderr)}: a TaskManager gets an empty set.",
            "Make the script print the indices on its first line, e.g. `0,1`.",
            resource=name,
        )
        return
    if len(lines) > 1:
        checkup.add(
            "warning",
            "script-run",
            f"`{shown}` printed {len(lines)} lines; Flink reads only the first.",
            "Print the indices on one line; send the rest to stderr.",
            resource=name,
        )
    replaced = (
        " (with a coordination file of its own: nothing was claimed)"
        if script_args is not None and script_args.coordination_mode
        else ""
    )
    checkup.add("ok", "script-run", f"`{shown}` gave GPU {', '.join(indices)}{replaced}.", resource=name)


def _failure_fix(
    stdout: str, stderr: str, settings: GPUDriverSettings, script_args: "ScriptArgs | None", shown: str
) -> str:
    """What to do about a discovery script that failed, printing ``stdout`` and ``stderr``."""
    if "Could not load the NVIDIA Management Library" in stdout + stderr:
        # NVML's own hint names nvml.library-path, an option Flink's Java plugin never reads
        return (
            "Install the NVIDIA driver, or set FLINK_GPU_NVML_LIBRARY to its libnvidia-ml.so.1 in the "
            "environment of the shell that starts the TaskManager (Flink's Java plugin does not read "
            'nvml.library-path). No GPU on this host: eval "$(flink-gpu --simulate 4 taskmanager-env)" '
            "before start-cluster.sh."
        )
    if "Could not get enough GPU resources" in stdout:  # the stock script's own words
        from flink_gpu.coordination import DEFAULT_PATH

        real_file = shlex.quote(
            script_args.coordination_file if script_args is not None and script_args.coordination_mode else DEFAULT_PATH
        )
        return (
            f"No GPU is free: see `flink-gpu list --file {real_file}`; entries of dead TaskManagers "
            f"are removed by `flink-gpu coordination clean --file {real_file}`."
        )
    if "nvidia-smi" in stdout + stderr:
        ours = discovery_executable()
        key = settings.key(GPUDriverOptions.DISCOVERY_SCRIPT_PATH)
        return "Install the NVIDIA driver (the stock script runs nvidia-smi)" + (
            f", or use the NVML drop-in: `{key}: {ours}`." if ours else "."
        )
    return f"Run it by hand: {shown}"


def _by_hand(script: str, settings: GPUDriverSettings, script_args: "ScriptArgs | None") -> str:
    """The run as a shell command that works when pasted: doctor's scratch file is gone by then, so a
    coordinated run gets a fresh one of its own (claiming nothing in the real file)."""
    tokens = exec_tokens(settings.script_args_text)
    if script_args is None or not script_args.coordination_mode:
        return " ".join(shlex.quote(a) for a in [script, "1", *tokens])
    marker = "FLINK_GPU_DOCTOR_SCRATCH"
    command = " ".join(shlex.quote(a) for a in [script, "1", *with_coordination_file(tokens, marker)])
    return command.replace(marker, '"$(mktemp -d)/coordination"')


def _quote_output(stdout: str, stderr: str) -> str:
    parts = []
    for label, text in (("stdout", stdout), ("stderr", stderr)):
        text = text.strip()
        if text:
            if len(text) > 300:
                text = text[:300] + "..."
            parts.append(f"{label}: {text!r}")
    return f" ({'; '.join(parts)})" if parts else ""
