"""doctor's check of age-based cleaners (flink_gpu.cli.doctor_command.cleaners): a systemd-tmpfiles rule that ages
out the coordination file's directory, read from tmpfiles.d directories the test writes."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import child_env
from flink_gpu.cli.doctor_command.cleaners import cleaning, read_rules


def tmpfiles(tmp_path, **files):
    """tmpfiles.d directories: /etc's (``etc_<name>``) over /usr/lib's (``lib_<name>``)."""
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    for d in (etc, lib):
        d.mkdir(parents=True, exist_ok=True)
    for key, text in files.items():
        where, _, name = key.partition("_")
        ((etc if where == "etc" else lib) / f"{name}.conf").write_text(text)
    return [str(etc), str(lib)]


def test_an_aged_directory_exposes_the_coordination_file_and_its_companions(tmp_path):
    rules = read_rules(tmpfiles(tmp_path, lib_tmp="q /var/tmp 1777 root root 30d\nD /tmp 1777 root root -\n"))
    rule, exposed = cleaning("/var/tmp/flink-gpu-coordination", rules)
    assert (rule.path, rule.age) == ("/var/tmp", "30d") and rule.where.endswith("tmp.conf:1")
    assert exposed == [
        "/var/tmp/flink-gpu-coordination",
        "/var/tmp/flink-gpu-coordination.lease",
        "/var/tmp/flink-gpu-coordination.bindings",
        "/var/tmp/flink-gpu-coordination.bindings.lease",
    ]
    # /tmp is emptied at boot only (no age): no cleaner of running TaskManagers' files
    assert cleaning("/tmp/c", rules) == (None, [])


def test_an_x_rule_excludes_them_and_etc_overrides_a_file_of_the_same_name(tmp_path):
    dirs = tmpfiles(
        tmp_path, lib_tmp="q /var/tmp 1777 root root 30d\n", etc_flinkgpu="x /var/tmp/flink-gpu-coordination*\n"
    )
    assert cleaning("/var/tmp/flink-gpu-coordination", read_rules(dirs))[1] == []
    # an administrator's /etc/tmpfiles.d/tmp.conf without the age replaces the distribution's
    dirs = tmpfiles(
        tmp_path / "other", lib_tmp="q /var/tmp 1777 root root 30d\n", etc_tmp="#q /var/tmp 1777 root root 30d\n"
    )
    assert cleaning("/var/tmp/flink-gpu-coordination", read_rules(dirs)) == (None, [])


def test_an_x_rule_for_a_directory_excludes_what_is_below_it_and_X_only_the_path(tmp_path):
    rules = read_rules(
        tmpfiles(
            tmp_path, lib_tmp="q /var/tmp 1777 root root 30d\n", etc_flinkgpu="x /var/tmp/flink\nX /var/tmp/other\n"
        )
    )
    assert cleaning("/var/tmp/flink/coord", rules)[1] == []
    assert len(cleaning("/var/tmp/other/coord", rules)[1]) == 4


def test_a_tilde_age_spares_the_files_directly_in_the_directory(tmp_path):
    rules = read_rules(tmpfiles(tmp_path, lib_tmp="d /srv/gpu - - - ~10d\ne /srv - - - 5d\n"))
    rule, exposed = cleaning("/srv/gpu/c", rules)
    assert rule.path == "/srv" and len(exposed) == 4  # /srv's rule ages out what is below it
    assert (
        cleaning("/srv/gpu/deeper/c", read_rules(tmpfiles(tmp_path / "t", lib_a="d /srv/gpu - - - ~10d\n")))[0]
        is not None
    )
    assert cleaning("/srv/gpu/c", read_rules(tmpfiles(tmp_path / "u", lib_a="d /srv/gpu - - - ~10d\n"))) == (None, [])


def test_doctor_warns_with_a_fix_that_runs_as_printed(tmp_path):
    """On this machine's real tmpfiles.d: doctor's warning (or its absence) matches what read_rules finds."""
    path = tmp_path / "coord"
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        "external-resources: gpu\nexternal-resource.gpu.amount: 1\n"
        "external-resource.gpu.driver-factory.class: flink_gpu.GPUDriverFactory\n"
        "external-resource.gpu.param.discovery-mode: nvml\n"
        f"external-resource.gpu.param.discovery-script.args: --enable-coordination-mode "
        f"--coordination-file {path}\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flink_gpu.cli",
            "--simulate",
            "2",
            "doctor",
            str(conf),
            "--json",
            "--taskmanagers-per-host",
            "1",
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = [
        f
        for f in json.loads(done.stdout)["findings"]
        if f["check"] == "coordination-file" and "tmpfiles" in f["message"]
    ]
    rule, exposed = cleaning(str(path), read_rules())
    assert bool(findings) == (rule is not None)


def test_the_warning_names_the_rule_and_its_fix_writes_the_x_rule_that_silences_it(tmp_path):
    from flink_gpu.cli.doctor_command.cleaners import check_age_cleaners
    from flink_gpu.cli.doctor_command.findings import Checkup

    dirs = tmpfiles(tmp_path, lib_tmp="q /var/tmp 1777 root root 30d\n")
    checkup = Checkup(None, "conf", str(tmp_path), None, None)
    check_age_cleaners(checkup, "gpu", "/var/tmp/flink-gpu-coordination", dirs)
    (finding,) = checkup.findings
    assert finding.level == "warning" and "/var/tmp untouched for 30d" in finding.message
    assert "tmp.conf:1" in finding.message and "/var/tmp/flink-gpu-coordination.lease" in finding.message
    # the fix as printed, run with /etc/tmpfiles.d pointed at the test's directory, silences the warning
    command = finding.fix.split(": ", 1)[1].replace("/etc/tmpfiles.d", dirs[0])
    (Path(dirs[0]) / "flink-gpu.conf").write_text("x /srv/another-coordination*\n")  # a second resource's
    subprocess.run(["sh", "-c", command], check=True)
    assert "x /srv/another-coordination*" in (Path(dirs[0]) / "flink-gpu.conf").read_text()  # appended
    again = Checkup(None, "conf", str(tmp_path), None, None)
    check_age_cleaners(again, "gpu", "/var/tmp/flink-gpu-coordination", dirs)
    assert [f.level for f in again.findings] == ["ok"]
