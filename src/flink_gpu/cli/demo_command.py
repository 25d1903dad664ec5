"""``flink-gpu demo``: several workers share one (simulated) GPU host through the coordination file,
then the slots of one of them bind its GPUs, alone and shared (what ``bind_gpus`` does for PyFlink).

Each worker is a real Python process that gets its GPUs as a coordinated TaskManager does (Flink's
GPU plugin with ``--enable-coordination-mode``), reports them, and holds them until its stdin is
closed (then it releases them and exits). Because the workers hold the read end of a pipe from this
process, they also exit when this process dies, so a demo interrupted in any way leaves no worker
behind (only, after a SIGKILL, its temporary directory).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

from flink_gpu.cli import UsageError
from flink_gpu.cli._output import document, emit_json, table

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from argparse import Namespace
    from typing import IO, Any

    from flink_gpu.nvml import Device, Library

# What a worker runs: what a coordinated TaskManager runs (Flink's GPU plugin, here on the NVML
# backend, with the stock script's coordination flags), then one JSON line, then hold until stdin
# closes and release.
_WORKER = """\
import json, os, sys
from flink_gpu.gpu import GPUDriverFactory
amount, path = int(sys.argv[1]), sys.argv[2]
driver = GPUDriverFactory().create_external_resource_driver({
    "discovery-mode": "nvml",
    "discovery-script.args": "--enable-coordination-mode --coordination-file " + path})
gpus = sorted(driver.retrieve_resource_info(amount), key=lambda gpu: int(gpu.index))
print(json.dumps({"pid": os.getpid(), "gpus": [gpu.index for gpu in gpus],
                  "uuids": [gpu.get_property("uuid") for gpu in gpus]}), flush=True)
sys.stdin.read()
driver.close()
"""
# What a slot's worker runs: bind GPUs of its TaskManager's set to itself, as bind_gpus does for a
# process-mode Python worker (one per slot), then one JSON line (the binding or its BindingError), then hold.
_SLOT = """\
import json, os, sys
from flink_gpu import binding
from flink_gpu.gpu import GPUInfo
gpus, share, taskmanager, path = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
try:
    bound = binding.bind([GPUInfo(index) for index in gpus], 1, share, taskmanager_pid=taskmanager, path=path)
except binding.BindingError as error:
    print(json.dumps({"pid": os.getpid(), "error": str(error)}), flush=True)
else:
    print(json.dumps({"pid": os.getpid(), "gpus": list(bound.indices), "uuids": [None] * len(bound.indices)}),
          flush=True)
sys.stdin.read()
"""
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0


def _pipe(stream: "IO[bytes] | None") -> "IO[bytes]":
    assert stream is not None  # Popen(..., stdin=PIPE, stdout=PIPE, stderr=PIPE) opens all three
    return stream


class Worker:
    def __init__(
        self,
        name: str,
        amount: int,
        path: str,
        env: "dict[str, str]",
        script: str = _WORKER,
        argv: "tuple[str, ...] | None" = None,
    ) -> None:
        self.name = name
        self.amount = amount
        self.state = "running"
        self.error: "str | None" = None  # a slot that could not bind: its BindingError
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, *(argv if argv is not None else (str(amount), path))],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Ctrl-C reaches this process only; it stops the workers in order
            start_new_session=True,
        )
        self.stdin, self.stdout, self.stderr = (
            _pipe(self.process.stdin),
            _pipe(self.process.stdout),
            _pipe(self.process.stderr),
        )
        self.pid = self.process.pid
        self.gpus: "list[str]" = []
        self.uuids: "list[str]" = []

    def wait_report(self) -> None:
        """Reads the worker's claim; raises FlinkException with its stderr when it failed."""
        import selectors

        from flink_gpu.errors import FlinkException

        with selectors.DefaultSelector() as selector:
            selector.register(self.stdout, selectors.EVENT_READ)
            ready = selector.select(_START_TIMEOUT)
        line = self.stdout.readline() if ready else b""
        if not line:
            self.stop(close_streams=False)  # its stderr is still to be read
            error = self.stderr.read().decode("utf-8", "replace").strip()
            self.stop()
            last = error.splitlines()[-1] if error else "no output"
            raise FlinkException(f"{self.name} (pid {self.pid}) could not claim {self.amount} GPU(s): {last}")
        report = json.loads(line)
        self.error = report.get("error")
        self.gpus, self.uuids = report.get("gpus", []), report.get("uuids", [])

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait()
        self.state = "killed"

    def stop(self, close_streams: bool = True) -> None:
        """Closes stdin (the worker releases and exits); kills it if it does not."""
        if self.process.poll() is None:
            try:
                self.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if close_streams:
            for stream in (self.stdin, self.stdout, self.stderr):
                stream.close()
        if self.state == "running":
            self.state = "exited"

    def row(self) -> "dict[str, object]":
        return {"worker": self.name, "pid": self.pid, "state": self.state, "gpus": self.gpus, "uuids": self.uuids}


def _bind_slots(taskmanager: Worker, shares: "list[int]", path: str, env: "dict[str, str]") -> "list[Worker]":
    """One worker per slot of ``taskmanager``, started one after the other, each binding 1 GPU of its
    set shared by at most ``shares[i]``."""
    slots = []
    for number, share in enumerate(shares, start=1):
        slot = Worker(
            f"slot-{number}",
            1,
            path,
            env,
            script=_SLOT,
            argv=(",".join(taskmanager.gpus), str(share), str(taskmanager.pid), path),
        )
        slots.append(slot)
        slot.wait_report()
    return slots


def _print_slots(slots: "list[Worker]") -> None:
    rows = [
        [
            slot.name,
            slot.pid,
            ", ".join(slot.gpus) if slot.gpus else "-",
            "refused: " + slot.error.split(". ")[0] + "." if slot.error else "bound",
        ]
        for slot in slots
    ]
    print(table(["SLOT", "PID", "GPU", ""], rows, indent="  "))


def _binding_act(taskmanager: Worker, path: str, env: "dict[str, str]", human: bool) -> "dict[str, Any]":
    """The slots of one TaskManager bind its GPUs: alone (a third slot is refused), then two per GPU."""
    from flink_gpu.bindings_file import bindings_path

    bindings_file = bindings_path(path)
    gpus = ", ".join(taskmanager.gpus)
    if human:
        print(
            f"\n{taskmanager.name} is a TaskManager: Flink gives each of its slots all its GPUs "
            f"({gpus}). bind_gpus gives\neach slot its own; here three slots' workers bind 1 GPU each "
            f"through\n{bindings_file} (`flink-gpu list` shows them under their TaskManager):\n"
        )
    exclusive = _bind_slots(taskmanager, [1, 1, 1], bindings_file, env)
    if human:
        _print_slots(exclusive)
    for slot in exclusive:
        slot.stop()
    if human:
        print(
            "\nThe slots stop (a slot's worker that dies frees its GPU too). With subtasks_per_gpu=2 "
            "four slots\nshare the two GPUs, two each:\n"
        )
    shared = _bind_slots(taskmanager, [2, 2, 2, 2], bindings_file, env)
    if human:
        _print_slots(shared)
    for slot in shared:
        slot.stop()
    return {
        "taskmanager": {"worker": taskmanager.name, "pid": taskmanager.pid, "gpus": taskmanager.gpus},
        "bindings_file": bindings_file,
        "exclusive": [{**s.row(), "error": s.error} for s in exclusive],
        "shared": [{**s.row(), "error": s.error} for s in shared],
    }


def _child_env() -> "dict[str, str]":
    import flink_gpu

    env = dict(os.environ)
    # the workers import the flink_gpu this command runs (an installation or a source tree)
    root = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _print_table(workers: "list[Worker]") -> None:
    rows = []
    for w in workers:
        if w.state == "killed":  # its GPUs are no longer its own: don't list them as if they were
            rows.append([w.name, w.pid, w.state, "-", f"(held GPU {', '.join(w.gpus)} until it died)"])
            continue
        # one line per GPU, so that the UUIDs stay whole and the table narrow
        for n, (gpu, uuid) in enumerate(zip(w.gpus, w.uuids, strict=True)):
            rows.append([w.name, w.pid, w.state, gpu, uuid] if n == 0 else ["", "", "", gpu, uuid])
    print(table(["WORKER", "PID", "STATE", "GPU", "UUID"], rows, indent="  "))


def _open_host(args: Namespace, simulated: bool) -> "tuple[Library, tuple[Device, ...]]":
    """NVML and its devices: the simulator's 4 GPUs unless --real or --simulate says otherwise; at least 3."""
    if args.real and (args.simulate is not None or args.simulate_spec is not None):
        raise UsageError(
            "--real uses this host's NVIDIA driver; it cannot be combined with --simulate or --simulate-spec."
        )
    if simulated and args.simulate is None and args.simulate_spec is None:
        from flink_gpu import simulator

        os.environ.update(simulator.environment(devices=4))  # before the first NVML use
    from flink_gpu.nvml import open_library

    nvml = open_library()
    devices = nvml.devices().devices
    if len(devices) < 3:
        from flink_gpu.errors import FlinkException

        raise FlinkException(
            f"The demo needs at least 3 GPUs; NVML ({nvml.library_path}) reports "
            f"{len(devices)}. Run it on the simulator: flink-gpu demo"
            + (" (without --real)." if args.real else " --simulate 4.")
        )
    return nvml, devices


def run(args: Namespace) -> int:
    from flink_gpu import coordination

    simulated = not args.real
    nvml, devices = _open_host(args, simulated)
    # the first worker takes all but two GPUs, so that the three of them fill the host
    amounts = [len(devices) - 2, 1, 1]
    human = not args.json
    workers: "list[Worker]" = []
    # discovery-script.args are split on whitespace (as Flink does): the path must have none
    base = None if not any(c.isspace() for c in tempfile.gettempdir()) else "/tmp"
    with tempfile.TemporaryDirectory(prefix="flink-gpu-demo-", dir=base) as scratch:
        path = os.path.join(scratch, "coordination")
        env = _child_env()
        try:
            if human:
                where = "the NVML simulator" if simulated else "this host's driver"
                print(f"A host with {len(devices)} GPUs ({where}: {nvml.library_path}).")
                print(
                    f"Workers coordinate through {path},\nas TaskManagers with "
                    f"--enable-coordination-mode do through {coordination.DEFAULT_PATH}.\n"
                )
                print(f"Three workers start one after another and claim {' + '.join(map(str, amounts))} GPUs:\n")
            for number, amount in enumerate(amounts, start=1):
                worker = Worker(f"worker-{number}", amount, path, env)
                workers.append(worker)
                worker.wait_report()
            before = [w.row() for w in workers]
            if human:
                _print_table(workers)

            victim = workers[0]
            victim.kill()
            stale = [e.index for e in coordination.snapshot(path).stale]
            killed = {"worker": victim.name, "pid": victim.pid, "gpus": victim.gpus}
            if human:
                print(
                    f"\n{victim.name} (pid {victim.pid}) is killed with SIGKILL, so it cannot "
                    f"release anything:\nthe file still lists GPU {', '.join(stale)} for a dead "
                    "pid.\n"
                )
                print(
                    f"worker-4 starts and asks for {victim.amount} GPU(s). None is free, so it "
                    "reclaims the dead\nworker's:\n"
                )
            newcomer = Worker("worker-4", victim.amount, path, env)
            workers.append(newcomer)
            newcomer.wait_report()
            after = [w.row() for w in workers]
            if human:
                _print_table(workers)
            reclaimed = [i for i in newcomer.gpus if i in victim.gpus]
            binding = _binding_act(newcomer, path, env, human)
        finally:
            for worker in workers:
                worker.stop()
        left = [e for e in coordination.snapshot(path).entries if e.alive]
    gone = all(w.process.poll() is not None for w in workers)
    cleaned_up = gone and not os.path.exists(scratch)
    bound_alone = [slot["gpus"] for slot in binding["exclusive"]]
    bound_shared = sorted(index for slot in binding["shared"] for index in slot["gpus"])
    binding_ok = (
        len({tuple(g) for g in bound_alone[:2]}) == 2
        and bound_alone[2] == []
        and bound_shared == sorted(newcomer.gpus * 2)
    )
    ok = sorted(reclaimed) == sorted(victim.gpus) and cleaned_up and not left and binding_ok
    if args.json:
        emit_json(
            document(
                "demo",
                ok=ok,
                simulated=simulated,
                devices=[{"index": d.gpu_index, "uuid": d.uuid} for d in devices],
                coordination_file=path,
                before=before,
                after=after,
                killed=killed,
                reclaimed=reclaimed,
                binding=binding,
                cleaned_up=cleaned_up,
            )
        )
    else:
        stopped = len([w for w in workers if w.state == "exited"])
        print(
            f"\nStopped the {stopped} running workers (each released its GPUs"
            f"{'' if not left else ', except ' + str(len(left)) + ' entries'})\nand removed "
            f"{scratch}."
        )
        if ok:
            print(
                "Next: `flink-gpu --simulate 4 list`, `flink-gpu doctor` on your Flink "
                "configuration,\n`python examples/run_local_cluster.py` for a real Flink cluster "
                "(docs/flink-cluster.md)."
            )
    return 0 if ok else 1
