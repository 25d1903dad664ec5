"""`flink-gpu resources` (flink_gpu.cli.resources_command): what Kubernetes or YARN must give a TaskManager."""

import textwrap

from support.cli import RESOURCES_CONF, cli, cli_json, write_file


def test_resources_kubernetes_and_yarn(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    doc = cli_json("resources", conf)
    assert doc["kubernetes"] == {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}, "pod": None}
    assert doc["yarn"] == {"yarn.io/gpu": 2}
    assert "yarn" not in cli_json("resources", conf, "--kubernetes")
    assert "kubernetes" not in cli_json("resources", conf, "--yarn")

    import yaml

    proc = cli("resources", conf)
    assert proc.returncode == 0
    kubernetes, yarn = proc.stdout.split("\n\n")
    assert "flink-main-container" in kubernetes.splitlines()[0]
    assert yaml.safe_load("\n".join(kubernetes.splitlines()[1:])) == {
        "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    }
    assert yaml.safe_load("\n".join(yarn.splitlines()[1:])) == {"yarn.io/gpu": 2}


def test_resources_pod_template_is_merged(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    template = tmp_path / "pod.yaml"
    template.write_text(
        textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        spec:
          containers:
            - name: flink-main-container
              resources:
                limits: {memory: 4Gi, nvidia.com/gpu: "8"}
            - name: sidecar
              image: busybox
    """)
    )
    doc = cli_json("resources", conf, "--pod-template", template)
    containers = doc["kubernetes"]["pod"]["spec"]["containers"]
    assert containers[0]["resources"] == {
        "limits": {"memory": "4Gi", "nvidia.com/gpu": "2"},
        "requests": {"nvidia.com/gpu": "2"},
    }
    assert containers[1] == {"name": "sidecar", "image": "busybox"}
    import yaml

    proc = cli("resources", conf, "--pod-template", template)
    assert proc.returncode == 0
    assert yaml.safe_load(proc.stdout) == doc["kubernetes"]["pod"]


def test_resources_yarn_cluster_maximum_and_errors(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    proc = cli("resources", conf, "--yarn", "--yarn-max", "yarn.io/gpu=1")
    assert proc.returncode == 1
    assert (
        "Configured value for external resource yarn.io/gpu (2) exceeds the max limitation of the Yarn cluster (1)."
    ) in proc.stderr
    assert cli_json("resources", conf, "--yarn", "--yarn-max", "yarn.io/gpu=4")["yarn"] == {"yarn.io/gpu": 2}
    assert cli("resources", conf, "--yarn-max", "gpu").returncode == 2
    assert cli("resources", tmp_path / "missing.yaml").returncode == 2
    assert cli("resources", conf, "--pod-template", tmp_path / "missing.yaml").returncode == 2
    empty = tmp_path / "empty.yaml"
    empty.write_text("external-resources: gpu\nexternal-resource.gpu.amount: 1\n")
    proc = cli("resources", empty)
    assert proc.returncode == 0 and "requests none" in proc.stdout


# `resources` and `doctor` agree: a conf directory without a configuration file is exit 2


def test_resources_on_a_conf_directory_without_a_file_is_a_usage_error(tmp_path, capsys):
    from flink_gpu.cli import main

    assert main(["doctor", str(tmp_path)]) == 2
    assert main(["resources", str(tmp_path)]) == 2
    assert "expected config.yaml or flink-conf.yaml" in capsys.readouterr().err


def test_yarn_max_with_a_second_equals_sign_is_a_usage_error(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    proc = cli("resources", conf, "--yarn", "--yarn-max", "yarn.io/gpu=3=4")
    assert proc.returncode == 2
    assert "--yarn-max 'yarn.io/gpu=3=4': expected TYPE=N, e.g. yarn.io/gpu=4." in proc.stderr


def test_json_resources_with_a_self_referencing_pod_template_names_the_file(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    template = write_file(tmp_path / "pod.yaml", "spec: &s\n  containers:\n    - name: x\n      extra: *s\n")
    doc = cli_json("resources", conf, "--pod-template", template, expect=1)
    assert doc["error"]["type"] == "IllegalConfigurationException"
    assert doc["error"]["message"].startswith(f"The pod template file {template} has a recursive alias *s")


def test_resources_refuses_a_pod_template_nested_too_deep(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    template = tmp_path / "pod.yaml"
    template.write_text("metadata:\n  " + "{a: " * 989 + "1" + "}" * 989 + "\n")
    proc = cli("resources", conf, "--pod-template", template)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        f"flink-gpu resources: error: The pod template file {template} nests mappings or "
        "lists more than 100 levels deep (at line 2, column 399)"
    ) in proc.stderr
    doc = cli_json("resources", conf, "--pod-template", template, expect=1)
    assert doc["error"]["type"] == "IllegalConfigurationException"
