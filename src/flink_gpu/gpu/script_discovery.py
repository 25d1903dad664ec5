"""The discovery-script backend: Flink's GPUDriver (docs/design.md §3.2-3.3), minus its process handling bugs.

What is kept to the letter: path resolution, the construction checks and their messages, the
command line (whitespace tokens, the literal ``null`` for unset args), first-line-only parsing and
the log lines. What is fixed: the script runs in its own session and its whole process group is
killed on timeout; stdout/stderr are drained while it runs (Flink deadlocks past the 64 KiB pipe
buffer); no shell parses anything; descriptors are closed and the child is always reaped.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import NamedTuple

from flink_gpu.errors import (
    DiscoveryScriptNotExecutable,
    DiscoveryScriptNotFound,
    FlinkException,
    IllegalConfigurationException,
)
from flink_gpu.flink.grammars import is_java_blank
from flink_gpu.flink.script_protocol import exec_tokens
from flink_gpu.gpu.info import GPUInfo

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    import subprocess

    from flink_gpu.gpu.settings import GPUDriverSettings

__all__ = [
    "DiscoveryScriptNotExecutable",
    "DiscoveryScriptNotFound",
    "ScriptDiscovery",
    "ScriptOutput",
    "check_script",
    "resolve_script_path",
    "run_script",
]

_log = logging.getLogger("flink_gpu.gpu.script_discovery")

# Output kept per stream; more is still read (so the script never blocks) but dropped.
_OUTPUT_LIMIT = 64 * 1024 * 1024
# The longest single wait on the script's pipes, in seconds (epoll's limit is INT_MAX ms).
_MAX_WAIT = 86_400.0
# At most this many lines (and characters) of extra output are quoted in the one-line WARN.
_WARN_LINES = 20
_WARN_CHARS = 4096
# ... and this many characters of each stream in the WARN for a failed script.
_FAILURE_CHARS = 16384


def resolve_script_path(path: str) -> str:
    """Flink's resolution: relative paths against ``$FLINK_HOME``, else the working directory.

    Like Java's ``File.getAbsolutePath`` the result is absolute but not normalised.
    """
    if not os.path.isabs(path):
        # an empty FLINK_HOME behaves like an unset one: Paths.get("", p) is relative to the cwd
        path = os.path.join(os.environ.get("FLINK_HOME", ""), path)
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    return path


def check_script(path: str | None, key: str) -> str:
    """docs/design.md §3.2: the absolute path of a usable discovery script, or Flink's exception for it.

    Raises ``IllegalConfigurationException`` when ``path`` (the value of ``key``) is blank,
    :class:`DiscoveryScriptNotFound` when nothing is there and :class:`DiscoveryScriptNotExecutable`
    when it cannot be run, with Flink's messages.
    """
    if path is None or is_java_blank(path):
        raise IllegalConfigurationException(
            f"GPU discovery script ('{key}') is not configured. Set it to the path of an "
            "executable discovery script, or leave it unset to use Flink's default."
        )
    absolute = resolve_script_path(path)
    if not os.path.exists(absolute):
        raise DiscoveryScriptNotFound(absolute)
    if os.path.isdir(absolute):
        raise DiscoveryScriptNotExecutable(
            absolute, f"The discovery script {absolute} is not executable. It is a directory."
        )
    if not os.access(absolute, os.X_OK):
        raise DiscoveryScriptNotExecutable(absolute, f"The discovery script {absolute} is not executable.")
    return absolute


class ScriptOutput(NamedTuple):
    """What a finished script left behind: exit status and its (possibly truncated) output."""

    returncode: int
    stdout: bytes
    stderr: bytes
    truncated: bool


def _popen(argv: list[str]) -> subprocess.Popen[bytes]:
    import subprocess

    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        start_new_session=True,
    )


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    try:
        return _popen(argv)
    except OSError as error:
        if error.errno != errno.ENOEXEC:
            raise FlinkException(f"Could not start the discovery script {argv[0]}: {error.strerror}.") from error
    # No interpreter line: run it with /bin/sh as the JVM's process launcher (and execvp) do,
    # so scripts that work under Flink keep working. The arguments are still passed verbatim.
    try:
        return _popen(["/bin/sh", *argv])
    except OSError as error:
        raise FlinkException(
            f"Could not start the discovery script {argv[0]} with /bin/sh: {error.strerror}."
        ) from error


def _kill_group(pgid: int) -> None:
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone (or, after pid reuse, not ours)


def _kill_pipe_writers(pipes: set[int]) -> None:
    """SIGKILL every other process that holds the write end of one of ``pipes`` (inode numbers).

    A process the script moved into another session (``setsid``) escapes the group kill, but while it
    holds the script's output pipe it is the script's. Found through /proc (processes we may inspect).
    """
    import signal

    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if not target.startswith("pipe:[") or int(target[6:-1]) not in pipes:
                    continue
                with open(f"/proc/{entry}/fdinfo/{fd}") as info:
                    flags = int(info.read().split("flags:", 1)[1].split()[0], 8)
            except (OSError, IndexError, ValueError):
                continue
            if flags & os.O_ACCMODE == os.O_WRONLY:  # a writer; a forked copy of us holds read ends
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                break


def run_script(argv: list[str], timeout: float) -> ScriptOutput:
    """Run ``argv`` (no shell) in a new session; drain its pipes; kill its group on timeout.

    Raises ``TimeoutError`` with Flink's message when the script (or anything it started that
    holds its output pipes) is still running after ``timeout`` seconds.
    """
    import selectors
    import subprocess
    import time

    deadline = time.monotonic() + timeout
    process = _spawn(argv)
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None  # _popen pipes both
    stdout_fd, stderr_fd = stdout.fileno(), stderr.fileno()
    pipes = {os.fstat(stdout_fd).st_ino, os.fstat(stderr_fd).st_ino}
    buffers = {stdout_fd: bytearray(), stderr_fd: bytearray()}
    truncated = False
    finished = False
    try:
        with selectors.DefaultSelector() as selector:
            for fd in buffers:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _timeout(timeout)
                # epoll takes at most INT_MAX ms (~24.8 days): wait in slices, so that a long
                # configured timeout ("30 d") is not an OverflowError
                for key, _ in selector.select(min(remaining, _MAX_WAIT)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    buffer = buffers[key.fd]
                    room = _OUTPUT_LIMIT - len(buffer)
                    if len(chunk) > room:
                        truncated = True
                        chunk = chunk[:room]
                    buffer += chunk
        try:
            process.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            raise _timeout(timeout) from None
        finished = True
    finally:
        if not finished:
            # timeout or interrupt: nothing the script started may outlive this call
            _kill_group(process.pid)
            process.kill()
            _kill_pipe_writers(pipes)
        stdout.close()
        stderr.close()
        process.wait()  # always reap: no zombie
    return ScriptOutput(process.returncode, bytes(buffers[stdout_fd]), bytes(buffers[stderr_fd]), truncated)


def _timeout(timeout: float) -> TimeoutError:
    return TimeoutError(f"The discovery script executed for over {round(timeout * 1000)} ms.")


def _exit_description(returncode: int) -> str:
    """Flink's exit code for ``returncode``; a signal death as the JVM reports it (128+N), named."""
    if returncode >= 0:
        return f"Discovery script exit with non-zero return code: {returncode}."
    import signal

    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    return (
        f"Discovery script exit with non-zero return code: {128 + number}. It was killed by signal {number} ({name})."
    )


def _clip(output: bytes) -> str:
    text = output.decode("utf-8", "replace").rstrip("\r\n")
    if len(text) <= _FAILURE_CHARS:
        return text
    return f"{text[:_FAILURE_CHARS]}... ({len(text) - _FAILURE_CHARS} more characters)"


def _quote_lines(lines: list[str]) -> str:
    """Java's ``Arrays.toString`` of the lines, shortened so one WARN stays readable."""
    shown = []
    size = 0
    for line in lines[:_WARN_LINES]:
        if size + len(line) > _WARN_CHARS:
            shown.append(line[: max(_WARN_CHARS - size, 0)] + "...")
            break
        shown.append(line)
        size += len(line)
    text = ", ".join(shown)
    if len(shown) < len(lines):
        text += f", ... ({len(lines) - len(shown)} more lines)"
    return f"[{text}]"


class ScriptDiscovery:
    """Runs a discovery script and parses its first output line into ``GPUInfo``s (docs/design.md §3.3)."""

    def __init__(self, script_path: str, settings: GPUDriverSettings) -> None:
        """``script_path`` must already have passed :func:`check_script`; the script gets
        ``settings.script_args_text`` and runs for at most ``settings.timeout`` seconds."""
        self.script_path = script_path
        self.args = settings.script_args_text
        self.timeout = settings.timeout

    def command(self, amount: int) -> list[str]:
        """The argv the script is started with (the path is one token, unlike Flink)."""
        return [self.script_path, str(amount), *exec_tokens(self.args)]

    def retrieve(self, amount: int) -> frozenset[GPUInfo]:
        from flink_gpu.flink.script_protocol import parse_gpu_indices, split_output_lines

        result = run_script(self.command(amount), self.timeout)
        if result.truncated:
            _log.warning(
                "The discovery script %s wrote more than %d bytes to stdout or stderr; the rest was discarded.",
                self.script_path,
                _OUTPUT_LIMIT,
            )
        if result.returncode != 0:
            _log.warning(
                "Discovery script exit with %s.\nSTDOUT: %s\nSTDERR: %s",
                result.returncode if result.returncode >= 0 else f"signal {-result.returncode}",
                _clip(result.stdout),
                _clip(result.stderr),
            )
            raise FlinkException(_exit_description(result.returncode))
        lines = split_output_lines(result.stdout.decode("utf-8", "replace"))
        if len(lines) > 1:
            _log.warning(
                "The output of the discovery script should only contain one single line. "
                "Finding %d lines with content: %s. Will only keep the first line.",
                len(lines),
                _quote_lines(lines),
            )
        infos = [GPUInfo(index) for index in parse_gpu_indices(lines[0])] if lines else []
        _log.info("Discover GPU resources: [%s].", ", ".join(map(str, infos)))
        return frozenset(infos)
