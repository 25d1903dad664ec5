"""Kubernetes and YARN mapping of the external resources (docs/design.md §2.6).

The Kubernetes output is checked against the official ``kubernetes`` client's models, which
validate types the way the API server's schema does (quantities are strings, a container needs a
name, ...).
"""

import copy
import logging
import textwrap

import pytest
from kubernetes.client import ApiClient, V1Pod, V1ResourceRequirements
from kubernetes.utils import parse_quantity

from flink_gpu import (
    IllegalConfigurationException,
    kubernetes_resource_requirements,
    merge_into_pod_template,
    yarn_resources,
)

GPU = {
    "external-resources": "gpu",
    "external-resource.gpu.amount": 2,
    "external-resource.gpu.driver-factory.class": "org.apache.flink.externalresource.gpu.GPUDriverFactory",
    "external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu",
    "external-resource.gpu.yarn.config-key": "yarn.io/gpu",
}


def as_pod(pod: dict) -> V1Pod:
    """Deserialize like the client does for API responses (validates every field)."""
    return ApiClient()._ApiClient__deserialize(pod, "V1Pod")


def main_container(pod: V1Pod):
    return next(c for c in pod.spec.containers if c.name == "flink-main-container")


def deployment_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("flink_gpu.")]


# --- Kubernetes --------------------------------------------------------------------------------


def test_spec_example_gpu_amount_two():
    requirements = kubernetes_resource_requirements(GPU)
    assert requirements == {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    model = V1ResourceRequirements(**requirements)
    assert parse_quantity(model.limits["nvidia.com/gpu"]) == 2
    assert ApiClient().sanitize_for_serialization(model) == requirements


def test_several_resources_and_skipped_ones(caplog):
    config = {
        "external-resources": "gpu;fpga;blank;nokey;noamount;zero",
        "external-resource.gpu.amount": "4",
        "external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu",
        "external-resource.fpga.amount": 1,
        "external-resource.fpga.kubernetes.config-key": "xilinx.com/fpga",
        "external-resource.blank.amount": 1,
        "external-resource.blank.kubernetes.config-key": "  ",
        "external-resource.nokey.amount": 1,
        "external-resource.noamount.kubernetes.config-key": "example.com/a",
        "external-resource.zero.amount": 0,
        "external-resource.zero.kubernetes.config-key": "example.com/b",
    }
    assert kubernetes_resource_requirements(config) == {
        "requests": {"nvidia.com/gpu": "4", "xilinx.com/fpga": "1"},
        "limits": {"nvidia.com/gpu": "4", "xilinx.com/fpga": "1"},
    }
    assert deployment_warnings(caplog) == [
        "The amount of the noamount should be configured. Will ignore that resource.",
        "The amount of the external resource zero should be positive, but "
        "external-resource.zero.amount is 0. Will ignore that resource.",
        "Could not find valid external-resource.blank.kubernetes.config-key for blank. Will ignore that resource.",
        "Could not find valid external-resource.nokey.kubernetes.config-key for nokey. Will ignore that resource.",
    ]


def test_duplicate_key_later_resource_wins(caplog):
    config = {
        "external-resources": "a;b",
        "external-resource.a.amount": 1,
        "external-resource.a.kubernetes.config-key": "nvidia.com/gpu",
        "external-resource.b.amount": 3,
        "external-resource.b.kubernetes.config-key": "nvidia.com/gpu",
    }
    assert kubernetes_resource_requirements(config)["limits"] == {"nvidia.com/gpu": "3"}
    assert deployment_warnings(caplog) == [
        "Duplicate config key nvidia.com/gpu occurred for external resources, the one named b will overwrite the value."
    ]


@pytest.mark.parametrize(
    "config", [{}, {"external-resources": "none", **{k: v for k, v in GPU.items() if k != "external-resources"}}]
)
def test_no_resources_no_requirements(config):
    assert kubernetes_resource_requirements(config) == {"requests": {}, "limits": {}}


def test_not_an_integer_amount_raises():
    with pytest.raises(
        IllegalConfigurationException,
        match=r"^Could not parse value 'two' for "
        r"key 'external-resource\.gpu\.amount'\.",
    ):
        kubernetes_resource_requirements({**GPU, "external-resource.gpu.amount": "two"})


TEMPLATE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "taskmanager-pod-template", "labels": {"app": "flink"}},
    "spec": {
        "nodeSelector": {"gpu": "true"},
        "containers": [
            {"name": "sidecar", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}},
            {
                "name": "flink-main-container",
                "env": [{"name": "A", "value": "b"}],
                "resources": {
                    "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                    "limits": {"memory": "4Gi", "nvidia.com/gpu": "1"},
                },
            },
        ],
    },
}


def test_merge_sets_the_main_container_and_keeps_everything_else():
    original = copy.deepcopy(TEMPLATE)
    merged = merge_into_pod_template(TEMPLATE, GPU)
    assert TEMPLATE == original  # the input is untouched
    pod = as_pod(merged)
    main = main_container(pod)
    assert main.resources.requests == {"cpu": "1", "nvidia.com/gpu": "2"}  # overridden
    assert main.resources.limits == {"memory": "4Gi", "nvidia.com/gpu": "2"}
    assert main.env[0].value == "b"
    sidecar = pod.spec.containers[0]
    assert sidecar.name == "sidecar" and sidecar.resources.limits == {"cpu": "100m"}
    assert pod.spec.node_selector == {"gpu": "true"} and pod.metadata.labels == {"app": "flink"}
    assert ApiClient().sanitize_for_serialization(pod) == merged
    expected = copy.deepcopy(TEMPLATE)
    expected["spec"]["containers"][1]["resources"] = {
        "requests": {"cpu": "1", "nvidia.com/gpu": "2"},
        "limits": {"memory": "4Gi", "nvidia.com/gpu": "2"},
    }
    assert merged == expected


def test_merge_adds_the_main_container_when_missing():
    template = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}}
    merged = merge_into_pod_template(template, GPU)
    assert merged["spec"]["containers"] == [
        {"name": "sidecar", "image": "busybox"},
        {
            "name": "flink-main-container",
            "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
        },
    ]
    assert main_container(as_pod(merged)).resources.limits == {"nvidia.com/gpu": "2"}


@pytest.mark.parametrize(
    "template",
    [
        None,
        {},
        {"spec": None},
        {"spec": {"containers": None}},
        {"spec": {"containers": [{"name": "flink-main-container", "resources": None}]}},
    ],
)
def test_merge_into_empty_or_null_parts(template):
    merged = merge_into_pod_template(template, GPU)
    assert merged["spec"]["containers"] == [
        {
            "name": "flink-main-container",
            "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
        }
    ]
    as_pod(merged)


def test_merge_without_resources_returns_the_template_unchanged():
    assert merge_into_pod_template(TEMPLATE, {"external-resources": "none"}) == TEMPLATE


def test_merge_from_a_pod_template_file(tmp_path):
    path = tmp_path / "taskmanager-pod-template.yaml"
    path.write_text(
        textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: taskmanager-pod-template
        spec:
          containers:
            # Flink's main container
            - name: flink-main-container
              resources:
                limits:
                  nvidia.com/gpu: "8"
                  memory: 2Gi
        """)
    )
    for template in (path, str(path)):
        pod = as_pod(merge_into_pod_template(template, GPU))
        assert main_container(pod).resources.limits == {"nvidia.com/gpu": "2", "memory": "2Gi"}
        assert main_container(pod).resources.requests == {"nvidia.com/gpu": "2"}


def test_pod_template_file_errors(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(FileNotFoundError) as error:
        merge_into_pod_template(missing, GPU)
    assert str(error.value) == f"The pod template file {missing} does not exist."
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec:\n  containers: [\n")
    with pytest.raises(IllegalConfigurationException, match=rf"^Invalid YAML in pod template file {bad} at line 3"):
        merge_into_pod_template(bad, GPU)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n")
    with pytest.raises(IllegalConfigurationException) as error:
        merge_into_pod_template(listed, GPU)
    assert str(error.value) == f"The pod template file {listed} must hold a Pod (a mapping), not a list."


@pytest.mark.parametrize(
    "template, message",
    [
        ({"spec": {"containers": {"name": "x"}}}, "The pod template's spec.containers must be a list, not a dict."),
        ({"spec": []}, "The pod template's spec must be a mapping, not a list."),
        (
            {"spec": {"containers": [{"name": "flink-main-container", "resources": {"limits": ["x"]}}]}},
            "The pod template's container 'flink-main-container' resources.limits must be a mapping, not a list.",
        ),
    ],
)
def test_malformed_templates(template, message):
    with pytest.raises(IllegalConfigurationException) as error:
        merge_into_pod_template(template, GPU)
    assert str(error.value) == message


def test_template_of_a_wrong_type():
    with pytest.raises(TypeError, match="must be a mapping or a path, got int"):
        merge_into_pod_template(3, GPU)


# --- YARN --------------------------------------------------------------------------------------


def test_yarn_resources():
    assert yarn_resources(GPU) == {"yarn.io/gpu": 2}
    assert yarn_resources(GPU, {"yarn.io/gpu": 2, "yarn.io/fpga": 1}) == {"yarn.io/gpu": 2}


def test_yarn_resource_unsupported_by_the_cluster():
    with pytest.raises(IllegalConfigurationException) as error:
        yarn_resources(GPU, {"yarn.io/fpga": 4})
    assert str(error.value) == "External resource yarn.io/gpu is not supported by the Yarn cluster."


def test_yarn_amount_above_the_cluster_maximum():
    with pytest.raises(IllegalConfigurationException) as error:
        yarn_resources({**GPU, "external-resource.gpu.amount": "5"}, {"yarn.io/gpu": 4})
    assert str(error.value) == (
        "Configured value for external resource yarn.io/gpu (5) exceeds the max limitation of the Yarn cluster (4)."
    )


def test_yarn_blank_and_duplicate_keys(caplog):
    config = {
        "external-resources": "a;b;c",
        "external-resource.a.amount": 1,
        "external-resource.a.yarn.config-key": "yarn.io/gpu",
        "external-resource.b.amount": 2,
        "external-resource.b.yarn.config-key": "",
        "external-resource.c.amount": 3,
        "external-resource.c.yarn.config-key": "yarn.io/gpu",
    }
    assert yarn_resources(config) == {"yarn.io/gpu": 3}
    assert deployment_warnings(caplog) == [
        "Could not find valid external-resource.b.yarn.config-key for b. Will ignore that resource.",
        "Duplicate config key yarn.io/gpu occurred for external resources, the one named c will overwrite the value.",
    ]


def test_deployment_reads_flink_config_files(tmp_path):
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent("""\
        external-resources: [gpu]
        external-resource:
          gpu:
            amount: 1
            kubernetes.config-key: nvidia.com/gpu
            yarn:
              config-key: yarn.io/gpu
        """)
    )
    from flink_gpu import Configuration

    config = Configuration.from_yaml(tmp_path)
    assert kubernetes_resource_requirements(config)["limits"] == {"nvidia.com/gpu": "1"}
    assert yarn_resources(config) == {"yarn.io/gpu": 1}


def test_a_pod_template_with_a_recursive_alias_names_the_file(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text("spec: &s\n  containers:\n    - name: flink-main-container\n      extra: *s\n")
    with pytest.raises(IllegalConfigurationException) as error:
        merge_into_pod_template(path, GPU)
    assert str(error.value).startswith(f"The pod template file {path} has a recursive alias *s at line 4, column 14")


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda path: __import__("os").mkfifo(path), "a FIFO (named pipe)"),
        (lambda path: path.mkdir(), "a directory"),
    ],
)
def test_a_pod_template_path_that_is_not_a_regular_file_is_refused(tmp_path, make, what):
    from flink_gpu.base.regular_files import NotARegularFileError

    path = tmp_path / "pod.yaml"
    make(path)
    with pytest.raises(NotARegularFileError) as error:
        merge_into_pod_template(path, GPU)  # returns at once: a FIFO is not opened
    assert str(error.value) == (f"The pod template file {path} is {what}, not a regular file; give the path of a file.")
