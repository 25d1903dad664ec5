"""doctor's check of coordination between a host's TaskManagers (flink_gpu.cli.doctor_command.coordination)."""

import json
import os
import subprocess
from pathlib import Path

from conftest import child_env, dead_pid, run_python
from flink_gpu import simulator
from support.cli import cli, cli_json, findings, gpu_conf, only, run_doctor, write_script
from support.interop import find_discovery_executable


def test_doctor_coordination_off_with_several_taskmanagers(tmp_path):
    good_script = find_discovery_executable()  # the stock script's arguments
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "workers").write_text("# two TaskManagers here\nnode-a\nnode-a\nnode-b\n")
    (conf_dir / "flink-conf.yaml").write_text(gpu_conf(discovery_script_path=good_script))
    proc = cli("doctor", conf_dir, "--simulate", "4", "--json", env=child_env())
    assert proc.returncode == 1
    error = only(json.loads(proc.stdout), "coordination", "error")
    assert "2 TaskManagers share host node-a" in error["message"]
    assert "--enable-coordination-mode" in error["fix"]

    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script), "--taskmanagers-per-host", "3", expect=1)
    assert "3 TaskManagers share a host" in only(doc, "coordination", "error")["message"]
    # unknown: a note, not a failure
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script), expect=0)
    assert "cannot tell how many TaskManagers" in only(doc, "coordination", "note")["message"]
    # Kubernetes isolates the GPUs of each TaskManager pod
    text = gpu_conf(discovery_script_path=good_script) + "external-resource.gpu.kubernetes.config-key: nvidia.com/gpu\n"
    doc = run_doctor(tmp_path, text, expect=0)
    assert "Kubernetes/YARN" in only(doc, "coordination", "note")["message"]
    # a custom script may coordinate by itself: doctor says it cannot tell
    custom = write_script(tmp_path / "custom.sh", 'echo "0"\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=custom), "--taskmanagers-per-host", "2", expect=0)
    assert "cannot tell whether the custom discovery script" in only(doc, "coordination", "note")["message"]


def test_doctor_coordination_on_runs_the_script_without_claiming(tmp_path, holder):
    exe = find_discovery_executable()
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "1", "--owner", holder.pid, "--file", coord)
    with open(coord, "a") as handle:
        handle.write(f"3 {dead_pid()}\nbroken line\n")
    before = coord.read_text()
    doc = run_doctor(
        tmp_path,
        gpu_conf(
            amount=2,
            discovery_script_path=exe,
            discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
        ),
        "--taskmanagers-per-host",
        "2",
        expect=0,
    )
    assert coord.read_text() == before  # nothing claimed, nothing cleaned
    ok = only(doc, "script-run", "ok")["message"]
    assert "gave GPU 0" in ok and "nothing was claimed" in ok
    warnings = findings(doc, "coordination-file", "warning")
    assert any("'broken line'" in w["message"] for w in warnings)
    # 3 TaskManagers of 2 GPUs each do not fit 4 GPUs
    doc = run_doctor(
        tmp_path,
        gpu_conf(
            amount=2,
            discovery_script_path=exe,
            discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
        ),
        "--taskmanagers-per-host",
        "3",
        expect=1,
    )
    assert "3 TaskManagers per host" in only(doc, "gpu-count", "error")["message"]


def test_doctor_counts_the_lines_a_stopped_java_plugin_taskmanager_left_in_one_note_and_warns_of_the_rest(tmp_path):
    """After stop-cluster.sh every line of its TaskManagers stays (Flink's GPU plugin never releases): normal,
    one note with the count. A holder with a lease (flink_gpu's own claims) releases when it ends normally: its
    lines left behind are a warning."""
    coord = tmp_path / "coord"
    # two TaskManagers' discovery (flink-gpu-discovery claims for its parent, here a shell that ends)
    for _ in range(2):
        run = subprocess.run(
            [
                "sh",
                "-c",
                f'"$0" 2 --enable-coordination-mode --coordination-file {coord}; true',
                find_discovery_executable(),
            ],
            env=child_env(**simulator.environment(devices=4)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
    conf = gpu_conf(
        amount=2,
        discovery_script_path=find_discovery_executable(),
        discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
    )
    doc = run_doctor(tmp_path, conf, "--taskmanagers-per-host", "2", expect=0)
    [note] = [f for f in findings(doc, "coordination-file", "note") if "never release" in f["message"]]
    assert note["message"].startswith(
        f"4 entries of {coord} (GPU 0, 1, 2, 3) are of ended holders that never release"
    ), note
    assert findings(doc, "coordination-file", "warning") == []
    # a claim of flink_gpu's that its process never released
    run_python(f"from flink_gpu import coordination; coordination.claim(1, ['4', '5'], path={str(coord)!r})")
    doc = run_doctor(tmp_path, conf, "--taskmanagers-per-host", "2", expect=0)
    warning = only(doc, "coordination-file", "warning")
    assert "ended without releasing (GPU 4)" in warning["message"]
    assert warning["fix"] == f"flink-gpu coordination clean --file {coord}"


def test_doctor_names_a_file_beside_the_coordination_file_that_another_user_put_there(tmp_path):
    """A lease or bindings file another user created (here: one writable by every user) is refused by every
    claim and bind; doctor says which and what to do, before any claim warns of it."""
    exe = find_discovery_executable()
    coord = tmp_path / "coord"
    coord.write_text("")
    squatted = tmp_path / "coord.bindings.lease"
    squatted.write_text("")
    squatted.chmod(0o666)
    args = f"--enable-coordination-mode --coordination-file {coord}"
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=exe, discovery_script_args=args), expect=1)
    (error,) = [f for f in findings(doc, "coordination-file", "error") if str(squatted) in f["message"]]
    assert error["message"].startswith(
        f"Refusing to use the lease file {squatted}: it is writable by every user (mode 0666)"
    ), error
    assert "Remove that file" in error["fix"] and "docs/SECURITY.md" in error["fix"]


def test_doctor_warns_of_a_holder_whose_gpus_are_joined_worse_than_a_free_set(tmp_path, holder):
    """On a host whose bridges join 0-2 and 1-3, a holder of 0, 1 (joined by PHB) could have had 0, 2 (NV4)."""
    from flink_gpu import simulator

    spec = simulator.profile_path("rtx3090-bridged-4")
    coord = tmp_path / "coord"
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        gpu_conf(
            amount=2,
            discovery_script_path=find_discovery_executable(),
            discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
        )
    )

    def warnings():
        proc = cli("doctor", conf, "--simulate-spec", spec, "--taskmanagers-per-host", "2", "--json")
        doc = json.loads(proc.stdout)
        return [f for f in findings(doc, "coordination-file", "warning") if "joined by" in f["message"]]

    coord.write_text(f"0 {holder.pid}\n1 {holder.pid}\n")
    (warning,) = warnings()
    assert warning["message"] == (
        f"pid {holder.pid} holds GPU 0, 1, joined by PHB, while GPU 0, 2, free to it, are joined by NV4."
    )
    assert "topology: prefer" in warning["fix"]
    # a holder of the bridged pair, or one whose better sets another live holder has: nothing to say
    coord.write_text(f"0 {holder.pid}\n2 {holder.pid}\n")
    assert warnings() == []
    coord.write_text(f"0 {holder.pid}\n1 {holder.pid}\n2 {os.getpid()}\n3 {os.getpid()}\n")
    assert warnings() == []
    # nor one whose better sets are of a worse class: a claim never trades health for a link
    degraded = json.loads(Path(spec).read_text())
    for gpu in (2, 3):
        degraded["devices"][gpu]["health"] = {"row_remap_pending": True}
    spec = tmp_path / "degraded.json"
    spec.write_text(json.dumps(degraded))
    coord.write_text(f"0 {holder.pid}\n1 {holder.pid}\n")
    assert warnings() == []
