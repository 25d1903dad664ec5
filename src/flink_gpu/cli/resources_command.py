"""``flink-gpu resources``: what Kubernetes or YARN must give a TaskManager (docs/design.md §2.6)."""

from __future__ import annotations

import os

from flink_gpu.base.regular_files import check_regular_file
from flink_gpu.cli import UsageError
from flink_gpu.cli._output import document, emit_json
from flink_gpu.errors import NotARegularFileError

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from argparse import Namespace


def _yarn_max(values: "list[str] | None") -> "dict[str, int] | None":
    if not values:
        return None
    maximum: "dict[str, int]" = {}
    for value in values:
        key, sep, number = value.partition("=")  # a resource type has no '=': `a=3=4` is no TYPE=N
        if not sep or not key.strip() or not number.strip().isdigit():
            raise UsageError(f"--yarn-max {value!r}: expected TYPE=N, e.g. yarn.io/gpu=4.")
        maximum[key.strip()] = int(number)
    return maximum


def _dump(data: object) -> str:
    import yaml

    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False).rstrip("\n")


def run(args: Namespace) -> int:
    from flink_gpu.deploy.requests import (
        TASK_MANAGER_MAIN_CONTAINER_NAME,
        kubernetes_resource_requirements,
        merge_into_pod_template,
        yarn_resources,
    )
    from flink_gpu.flink.configuration import Configuration

    if not os.path.exists(args.conf):
        raise UsageError(f"The configuration {args.conf} does not exist.")
    if args.pod_template is not None:
        try:
            check_regular_file(args.pod_template, "pod template file")
        except FileNotFoundError:
            raise UsageError(f"--pod-template: the file {args.pod_template} does not exist.") from None
        except OSError as error:  # a directory or FIFO: say what it is
            raise UsageError(f"--pod-template: {error}") from None
    if args.pod_template is not None and args.yarn:
        raise UsageError("--pod-template is for Kubernetes; it cannot be combined with --yarn.")
    yarn_max = _yarn_max(args.yarn_max)
    try:
        config = Configuration.from_yaml(args.conf)
    except (FileNotFoundError, NotARegularFileError) as error:  # e.g. a conf directory without a
        raise UsageError(str(error)) from None  # configuration file: exit 2
    show_kubernetes = not args.yarn
    show_yarn = not args.kubernetes and args.pod_template is None

    fields = {"configuration": os.path.abspath(args.conf)}
    if show_kubernetes:
        requirements = kubernetes_resource_requirements(config)
        pod = merge_into_pod_template(args.pod_template, config) if args.pod_template is not None else None
        fields["kubernetes"] = {**requirements, "pod": pod}
    if show_yarn:
        fields["yarn"] = yarn_resources(config, yarn_max)
    if args.json:
        emit_json(document("resources", **fields))
        return 0

    if show_kubernetes:
        kubernetes = fields["kubernetes"]
        if kubernetes["pod"] is not None:
            print(f"# {args.pod_template} with the external resources of {args.conf}")
            print(_dump(kubernetes["pod"]))
        elif kubernetes["requests"]:
            print(f"Kubernetes: the TaskManager container ({TASK_MANAGER_MAIN_CONTAINER_NAME}) gets")
            print(_indent(_dump({"resources": {"requests": kubernetes["requests"], "limits": kubernetes["limits"]}})))
        else:
            print(
                "Kubernetes: no external resource has a positive amount and a "
                "kubernetes.config-key (e.g. external-resource.gpu.kubernetes.config-key: "
                "nvidia.com/gpu); the TaskManager requests none."
            )
    if show_yarn:
        if show_kubernetes:
            print()
        if fields["yarn"]:
            print("YARN: the TaskManager container gets")
            print(_indent(_dump(fields["yarn"])))
        else:
            print(
                "YARN: no external resource has a positive amount and a yarn.config-key "
                "(e.g. external-resource.gpu.yarn.config-key: yarn.io/gpu); the TaskManager "
                "requests none."
            )
    return 0


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
