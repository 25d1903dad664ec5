"""doctor's check of how TaskManagers share a host and slots share a GPU (flink_gpu.cli.doctor_command.taskmanagers)."""

import json

import pytest

from support.cli import cli, gpu_conf, only, run_doctor
from support.files import make_odd_path
from support.interop import find_discovery_executable


def test_doctor_task_slots_note_points_to_bind_gpus_not_the_subtask_index(tmp_path, good_script):
    doc = run_doctor(
        tmp_path, gpu_conf(discovery_script_path=good_script) + "taskmanager.numberOfTaskSlots: 2\n", expect=0
    )
    note = only(doc, "task-slots", "note")
    assert "collides" in note["message"] and "bind_gpus" in note["fix"]


# doctor reads conf/workers as every user-named file: an odd one is a warning naming it


@pytest.mark.parametrize("kind", ["fifo", "directory", "too large"])
def test_doctor_says_when_the_workers_file_is_not_a_readable_regular_file(tmp_path, kind):
    from flink_gpu.base.regular_files import MAX_FILE_SIZE

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "flink-conf.yaml").write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    (conf_dir / "slaves").write_text("node-a\nnode-a\n")  # not read: Flink reads workers
    workers = conf_dir / "workers"
    if kind == "too large":
        with open(workers, "wb") as handle:
            handle.truncate(MAX_FILE_SIZE + 1)  # sparse
        reason = f"The workers file {workers} is larger than 16 MiB, the most flink-gpu reads from one file."
    else:
        _, what = make_odd_path(workers, kind)
        reason = f"The workers file {workers} is {what}, not a regular file; give the path of a file."
    proc = cli("doctor", conf_dir, "--simulate", "4", "--json", timeout=30)  # a FIFO read blocks
    doc = json.loads(proc.stdout)
    warning = only(doc, "taskmanagers", "warning")
    assert warning["message"] == f"{reason} So doctor cannot tell how many TaskManagers share a host."
    assert warning["fix"] == (
        f"Make {workers} a regular file with one TaskManager host per line, or pass --taskmanagers-per-host N."
    )
    assert "cannot tell how many TaskManagers" in only(doc, "coordination", "note")["message"]
