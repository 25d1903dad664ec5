"""The external resource framework: resource list, amounts, driver loading, provider (docs/design.md §2.2–2.5)."""

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flink_gpu
from flink_gpu import (
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    ExternalResourceInfo,
    ExternalResourceInfoProvider,
    IllegalConfigurationException,
    load_external_resources,
    simulator,
)
from flink_gpu.errors import FlinkException
from flink_gpu.flink.framework import (
    ENTRY_POINT_GROUP,
    FactoryLoadError,
    FactoryNotFoundError,
    external_resource_amounts,
    external_resource_names,
    load_factory,
)
from support.faults import JAVA_FACTORY, child_env, run_child, write_conf

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SRC = Path(flink_gpu.__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def drivers():
    """The test drivers module (tests/fixtures, on pytest's pythonpath), importable by dotted path like a user's
    own package."""
    import flink_gpu_test_drivers

    flink_gpu_test_drivers.EVENTS.clear()
    return flink_gpu_test_drivers


def warnings_of(caplog):
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "flink_gpu.flink.framework"
    ]


def resource(name, amount=None, factory=None, **params):
    config = {}
    if amount is not None:
        config[f"external-resource.{name}.amount"] = amount
    if factory is not None:
        config[f"external-resource.{name}.driver-factory.class"] = factory
    for key, value in params.items():
        config[f"external-resource.{name}.param.{key}"] = value
    return config


# --- the ABCs ----------------------------------------------------------------------------------


def test_abcs_require_their_methods():
    for abc in (ExternalResourceInfo, ExternalResourceDriver, ExternalResourceDriverFactory):
        with pytest.raises(TypeError, match="abstract"):
            abc()


def test_driver_close_is_a_no_op_by_default_and_a_context_manager(drivers):
    class Driver(ExternalResourceDriver):
        def retrieve_resource_info(self, amount):
            return frozenset()

    driver = Driver()
    assert driver.close() is None
    with driver as entered:
        assert entered is driver
    with drivers.RecordingDriver(flink_gpu.Configuration({"offset": "3"})):
        pass
    assert drivers.EVENTS[-1] == ("close", "3")


# --- the resource list (docs/design.md §2.2) --------------------------------------------------------------


@pytest.mark.parametrize(
    "value, names",
    [
        ("gpu", ["gpu"]),
        ("gpu;fpga", ["gpu", "fpga"]),
        (" gpu ; fpga ", ["gpu", "fpga"]),
        ("'a;b';c", ["a;b", "c"]),
        ("gpu;gpu;fpga;gpu", ["gpu", "fpga"]),  # a set: duplicates collapse
        ("gpu;;fpga", ["gpu", "", "fpga"]),  # an empty name is a (useless) name, as in Flink
        (";gpu;", ["gpu"]),
        ("none", []),
        ("None", ["None"]),  # only the exact value 'none' disables
        (["gpu", "fpga", "gpu"], ["gpu", "fpga"]),  # a list is taken as is
        (["none"], []),  # Flink compares the rendered value with 'none'
        (["a;b"], ["a;b"]),
        ("", []),
    ],
)
def test_resource_names(value, names):
    assert external_resource_names({"external-resources": value}) == names


def test_no_list_means_no_resources():
    assert external_resource_names(None) == []
    assert external_resource_names({"external-resource.gpu.amount": 1}) == []


@pytest.mark.parametrize(
    "value, message",
    [
        ("'gpu'fpga", "Could not split string. Illegal quoting at position: 4"),
        ("gp'u", "Could not split string. Illegal quoting at position: 2"),
        ("'gpu;fpga", "Could not split string. Quoting was not closed properly."),
    ],
)
def test_bad_list_quoting_raises(value, message):
    with pytest.raises(IllegalConfigurationException) as error:
        external_resource_names({"external-resources": value})
    assert str(error.value) == f"Could not parse value '{value}' for key 'external-resources'. {message}"
    with pytest.raises(IllegalConfigurationException):
        load_external_resources({"external-resources": value})


# --- amounts (docs/design.md §2.3) ------------------------------------------------------------------------


def test_amounts(caplog):
    config = {
        "external-resources": "gpu;fpga;asic;tpu",
        **resource("gpu", 2),
        **resource("fpga", "3"),
        **resource("asic", 0),
        **resource("tpu", -1),
    }
    assert external_resource_amounts(config) == {"gpu": 2, "fpga": 3}
    assert warnings_of(caplog) == [
        "The amount of the external resource asic should be positive, but "
        "external-resource.asic.amount is 0. Will ignore that resource.",
        "The amount of the external resource tpu should be positive, but "
        "external-resource.tpu.amount is -1. Will ignore that resource.",
    ]


def test_missing_amount_warns_with_flinks_text(caplog):
    assert external_resource_amounts({"external-resources": "gpu"}) == {}
    assert warnings_of(caplog) == ["The amount of the gpu should be configured. Will ignore that resource."]


@pytest.mark.parametrize("raw", ["two", "2.0", 2.5])
def test_amount_that_is_not_a_whole_number_raises(raw):
    config = {"external-resources": "gpu", **resource("gpu", raw, "flink_gpu_test_drivers.RecordingFactory")}
    with pytest.raises(IllegalConfigurationException) as error:
        load_external_resources(config)
    assert str(error.value).startswith(f"Could not parse value '{raw}' for key 'external-resource.gpu.amount'.")


# --- loading drivers and retrieving infos (docs/design.md §2.4, 2.5) --------------------------------------


def test_driver_gets_its_params_and_retrieve_is_called_once(drivers, caplog):
    caplog.set_level(logging.INFO, logger="flink_gpu.flink.framework")
    config = {
        "external-resources": "gpu",
        **resource("gpu", 2, "flink_gpu_test_drivers.RecordingFactory", offset="4", **{"discovery-script.args": "--x"}),
        "external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu",
    }
    with load_external_resources(config) as provider:
        infos = provider.get_external_resource_infos("gpu")
        assert infos == frozenset({drivers.SlotInfo("4"), drivers.SlotInfo("5")})
        assert isinstance(infos, frozenset)
        assert provider.missing_reason("gpu") is None
        assert provider.resource_names == ("gpu",)
        assert dict(provider.missing_reasons) == {}
    assert drivers.EVENTS == [
        ("create", {"offset": "4", "discovery-script.args": "--x"}),
        ("retrieve", 2),
        ("close", "4"),
    ]
    assert "Enabled external resources: ['gpu']" in caplog.messages
    assert "Add external resources driver for gpu." in caplog.messages
    assert warnings_of(caplog) == []


@pytest.mark.parametrize(
    "factory",
    [
        "flink_gpu_test_drivers.RecordingFactory",
        "flink_gpu_test_drivers:RecordingFactory",
        "flink_gpu_test_drivers:Outer.InnerFactory",
        "flink_gpu_test_drivers.Outer.InnerFactory",
        "flink_gpu_test_drivers:FACTORY_INSTANCE",
    ],
)
def test_factory_by_import_path(factory, drivers):
    provider = load_external_resources({"external-resources": "gpu", **resource("gpu", 1, factory)})
    assert provider.get_external_resource_infos("gpu") == {drivers.SlotInfo("0")}


@pytest.mark.parametrize("factory", ["RecordingFactory", "FalsyRecordingFactory"])
def test_a_factory_is_instantiated_once_for_several_resources(drivers, factory):
    cls = getattr(drivers, factory)
    cls.instances = 0
    config = {
        "external-resources": "a;b",
        **resource("a", 1, f"flink_gpu_test_drivers.{factory}"),
        **resource("b", 2, f"flink_gpu_test_drivers.{factory}", offset="10"),
    }
    provider = load_external_resources(config)
    assert cls.instances == 1
    assert provider.get_external_resource_infos("b") == {drivers.SlotInfo("10"), drivers.SlotInfo("11")}


def test_unknown_names_give_an_empty_set_and_a_reason():
    provider = load_external_resources(
        {"external-resources": "gpu", **resource("gpu", 1, "flink_gpu_test_drivers.RecordingFactory")}
    )
    for name in ("fpga", "", "GPU", None, 3, ["gpu"]):
        assert provider.get_external_resource_infos(name) == frozenset()
    assert provider.missing_reason("fpga") == (
        "external resource 'fpga' is not listed in external-resources (listed: gpu)"
    )
    assert provider.missing_reason("GPU") is not None  # names are case-sensitive
    empty = load_external_resources({})
    assert empty.get_external_resource_infos("gpu") == frozenset()
    assert empty.missing_reason("gpu") == (
        "external resource 'gpu' is not listed in external-resources, which lists no resource"
    )


@pytest.mark.parametrize("factory", [None, "", "   "])
def test_blank_factory_class(factory, caplog):
    provider = load_external_resources({"external-resources": "gpu", **resource("gpu", 1, factory)})
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert warnings_of(caplog) == [
        "Could not find driver class name for gpu. Please make sure "
        "external-resource.gpu.driver-factory.class is configured."
    ]
    assert provider.missing_reason("gpu") == "external-resource.gpu.driver-factory.class is not set"


@pytest.mark.parametrize(
    "factory, detail",
    [
        (
            "no.such.Factory",
            "no module of 'no.such.Factory' is installed; "
            f"no entry point 'no.such.Factory' in group {ENTRY_POINT_GROUP}",
        ),
        ("fpga", f"no entry point 'fpga' in group {ENTRY_POINT_GROUP}"),
        (
            "flink_gpu_test_drivers.Missing",
            "module 'flink_gpu_test_drivers' has no 'Missing'; "
            f"no entry point 'flink_gpu_test_drivers.Missing' in group "
            f"{ENTRY_POINT_GROUP}",
        ),
        ("flink_gpu_test_drivers:Missing", "module 'flink_gpu_test_drivers' has no 'Missing'"),
        ("no_such_module:Factory", "module 'no_such_module' is not installed"),
    ],
)
def test_unknown_factory(factory, detail, caplog):
    provider = load_external_resources({"external-resources": "gpu", **resource("gpu", 1, factory)})
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert warnings_of(caplog) == [f"Could not find factory class {factory} for gpu."]
    assert provider.missing_reason("gpu") == f"factory class {factory} was not found ({detail})"


def test_factory_module_that_fails_to_import(caplog):
    provider = load_external_resources(
        {"external-resources": "gpu", **resource("gpu", 1, "flink_gpu_test_broken_driver.Factory")}
    )
    detail = (
        "importing 'flink_gpu_test_broken_driver' failed: ModuleNotFoundError: No module "
        "named 'flink_gpu_test_dependency_that_is_not_installed'"
    )
    assert warnings_of(caplog) == [
        f"Could not find factory class flink_gpu_test_broken_driver.Factory for gpu. {detail}."
    ]
    assert provider.missing_reason("gpu") == (
        f"factory class flink_gpu_test_broken_driver.Factory could not be loaded: {detail}"
    )


def test_object_that_is_not_a_factory(caplog):
    provider = load_external_resources(
        {"external-resources": "gpu", **resource("gpu", 1, "flink_gpu_test_drivers.NOT_A_FACTORY")}
    )
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert warnings_of(caplog) == [
        "Could not find factory class flink_gpu_test_drivers.NOT_A_FACTORY for gpu. "
        "flink_gpu_test_drivers.NOT_A_FACTORY is not an ExternalResourceDriverFactory "
        "(it has no create_external_resource_driver method)."
    ]


def test_a_raising_factory_never_stops_the_others(drivers, caplog):
    config = {
        "external-resources": "bad;ctor;good;junk",
        **resource("bad", 1, "flink_gpu_test_drivers.RaisingFactory"),
        **resource("ctor", 1, "flink_gpu_test_drivers.ConstructorRaisingFactory"),
        **resource("good", 1, "flink_gpu_test_drivers.RecordingFactory"),
        **resource("junk", 1, "flink_gpu_test_drivers.NotADriverFactory"),
    }
    provider = load_external_resources(config)
    assert provider.get_external_resource_infos("good") == {drivers.SlotInfo("0")}
    assert provider.get_external_resource_infos("bad") == frozenset()
    assert warnings_of(caplog) == [
        "Could not instantiate driver with factory flink_gpu_test_drivers.RaisingFactory for bad. "
        "FlinkException: the device is not there",
        "Could not instantiate driver with factory flink_gpu_test_drivers.ConstructorRaisingFactory "
        "for ctor. RuntimeError: cannot construct",
        "Could not instantiate driver with factory flink_gpu_test_drivers.NotADriverFactory for "
        "junk. It returned 'not a driver', which is not an ExternalResourceDriver.",
    ]
    assert provider.missing_reason("bad") == (
        "factory flink_gpu_test_drivers.RaisingFactory raised FlinkException: the device is not there"
    )
    assert provider.missing_reason("ctor") == (
        "factory flink_gpu_test_drivers.ConstructorRaisingFactory raised RuntimeError: cannot construct"
    )


def test_failed_retrieval_is_a_warn_with_the_error(caplog):
    config = {
        "external-resources": "gpu;none-set",
        **resource("gpu", 2, "flink_gpu_test_drivers.FailingRetrieveFactory"),
        **resource("none-set", 1, "flink_gpu_test_drivers.NoneFactory"),
    }
    provider = load_external_resources(config)
    assert provider.get_external_resource_infos("gpu") == frozenset()
    records = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in records] == [
        "Failed to retrieve information of external resource gpu.",
        "Failed to retrieve information of external resource none-set.",
    ]
    assert str(records[0].exc_info[1]) == "Discovery script exit with non-zero return code: 2."
    assert provider.missing_reason("gpu") == (
        "retrieve_resource_info(2) failed with FlinkException: Discovery script exit with non-zero return code: 2."
    )
    assert provider.missing_reason("none-set") == (
        "retrieve_resource_info(1) failed with TypeError: retrieve_resource_info returned None, "
        "not a set of ExternalResourceInfo"
    )


def test_an_empty_result_is_explained():
    provider = load_external_resources(
        {"external-resources": "gpu", **resource("gpu", 2, "flink_gpu_test_drivers.EmptyFactory")}
    )
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert provider.missing_reason("gpu") == "the driver of gpu returned no information for amount 2"


def test_a_driver_without_a_legal_amount_is_built_but_not_asked(drivers, caplog):
    # as Flink: the driver is instantiated (so its configuration errors show), then skipped
    config = {
        "external-resources": "gpu;fpga",
        **resource("gpu", None, "flink_gpu_test_drivers.RecordingFactory", offset="1"),
        **resource("fpga", 0, "no.such.Factory"),
    }
    provider = load_external_resources(config)
    assert drivers.EVENTS == [("create", {"offset": "1"}), ("close", "1")]
    assert warnings_of(caplog) == [
        "The amount of the gpu should be configured. Will ignore that resource.",
        "The amount of the external resource fpga should be positive, but "
        "external-resource.fpga.amount is 0. Will ignore that resource.",
        "Could not find factory class no.such.Factory for fpga.",
        "Could not find a legal amount configuration for gpu.",
    ]
    assert dict(provider.missing_reasons) == {
        "gpu": "external-resource.gpu.amount is not set",
        "fpga": "external-resource.fpga.amount is 0; it must be positive; factory class "
        "no.such.Factory was not found (no module of 'no.such.Factory' is installed; "
        f"no entry point 'no.such.Factory' in group {ENTRY_POINT_GROUP})",
    }


def test_close_closes_every_driver_once_even_if_one_fails(drivers, caplog):
    config = {
        "external-resources": "a;b;c",
        **resource("a", 1, "flink_gpu_test_drivers.RecordingFactory", offset="1"),
        **resource("b", 1, "flink_gpu_test_drivers.BadCloseFactory", offset="2"),
        **resource("c", 1, "flink_gpu_test_drivers.RecordingFactory", offset="3"),
    }
    provider = load_external_resources(config)
    drivers.EVENTS.clear()
    provider.close()
    provider.close()
    assert drivers.EVENTS == [("close", "1"), ("close-failed", None), ("close", "3")]
    assert warnings_of(caplog) == ["Failed to close the driver of external resource b."]


def test_entry_points_are_only_scanned_when_needed(monkeypatch):
    import importlib.metadata

    calls = []
    real = importlib.metadata.entry_points

    def counting(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    load_external_resources(
        {"external-resources": "gpu", **resource("gpu", 1, "flink_gpu_test_drivers.RecordingFactory")}
    )
    assert calls == []
    load_external_resources({"external-resources": "a;b", **resource("a", 1, "fpga"), **resource("b", 1, "other")})
    assert calls == [{"group": ENTRY_POINT_GROUP}]  # once per load, for all names


def test_provider_from_a_config_file(tmp_path, drivers):
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent("""\
        external-resources: [gpu]
        external-resource:
          gpu:
            amount: 2
            driver-factory.class: flink_gpu_test_drivers.RecordingFactory
            param:
              offset: 6
        """)
    )
    provider = load_external_resources(tmp_path)
    assert provider.get_external_resource_infos("gpu") == {drivers.SlotInfo("6"), drivers.SlotInfo("7")}


def test_provider_can_be_built_directly(drivers):
    provider = ExternalResourceInfoProvider({"gpu": [drivers.SlotInfo("0")]})
    assert provider.get_external_resource_infos("gpu") == frozenset({drivers.SlotInfo("0")})
    assert provider.enabled_resources == ("gpu",)
    assert repr(provider) == "ExternalResourceInfoProvider(gpu=1)"


# --- Flink's GPU factory name ------------------------------------------------------------------

JAVA_GPU_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"


def test_load_factory_resolves_dotted_and_colon_paths(drivers):
    assert type(load_factory("flink_gpu_test_drivers.RecordingFactory")) is drivers.RecordingFactory
    assert type(load_factory("flink_gpu_test_drivers:Outer.InnerFactory")) is drivers.Outer.InnerFactory
    assert load_factory("flink_gpu_test_drivers.FACTORY_INSTANCE") is drivers.FACTORY_INSTANCE
    assert load_factory("flink_gpu_test_drivers.RecordingFactory") is not load_factory(
        "flink_gpu_test_drivers.RecordingFactory"
    )  # a new instance per call


@pytest.mark.parametrize(
    "name, detail",
    [
        (
            "no.such.Factory",
            "no module of 'no.such.Factory' is installed; no entry point 'no.such.Factory' "
            f"in group {ENTRY_POINT_GROUP}",
        ),
        (
            "flink_gpu_test_drivers.Missing",
            "module 'flink_gpu_test_drivers' has no 'Missing'; no entry point "
            f"'flink_gpu_test_drivers.Missing' in group {ENTRY_POINT_GROUP}",
        ),
        ("no_such_module:Factory", "module 'no_such_module' is not installed"),
        ("fpga", f"no entry point 'fpga' in group {ENTRY_POINT_GROUP}"),
    ],
)
def test_load_factory_not_found_says_what_was_tried(name, detail):
    with pytest.raises(FactoryNotFoundError) as info:
        load_factory(name)
    assert info.value.detail == detail == str(info.value)
    assert isinstance(info.value, FlinkException)


@pytest.mark.parametrize(
    "name, detail",
    [
        (
            "flink_gpu_test_broken_driver.Factory",
            "importing 'flink_gpu_test_broken_driver' failed: ModuleNotFoundError: No module named "
            "'flink_gpu_test_dependency_that_is_not_installed'",
        ),
        (
            "flink_gpu_test_drivers.NOT_A_FACTORY",
            "flink_gpu_test_drivers.NOT_A_FACTORY is not an ExternalResourceDriverFactory (it has no "
            "create_external_resource_driver method)",
        ),
    ],
)
def test_load_factory_load_error_says_why(name, detail):
    with pytest.raises(FactoryLoadError) as info:
        load_factory(name)
    assert info.value.detail == detail == str(info.value)
    assert isinstance(info.value, FlinkException)


def test_load_factory_lets_the_constructor_error_through():
    with pytest.raises(RuntimeError, match="cannot construct"):
        load_factory("flink_gpu_test_drivers.ConstructorRaisingFactory")


def test_flinks_java_gpu_factory_name_maps_to_ours():
    from flink_gpu.gpu.driver import GPUDriverFactory

    assert type(load_factory(JAVA_GPU_FACTORY)) is GPUDriverFactory
    assert type(load_factory("flink_gpu.GPUDriverFactory")) is GPUDriverFactory


def test_an_unchanged_flink_configuration_runs_the_gpu_driver(tmp_path):
    script = tmp_path / "nvidia-gpu-discovery.sh"
    script.write_text('#!/bin/sh\necho "$1 $2" > "$(dirname "$0")/argv"\necho 0,1\n')
    script.chmod(0o755)
    config = tmp_path / "flink-conf.yaml"
    config.write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 2\n"
        f"external-resource.gpu.driver-factory.class: {JAVA_GPU_FACTORY}\n"
        f"external-resource.gpu.param.discovery-script.path: {script}\n"
    )
    with load_external_resources(config) as provider:
        infos = provider.get_external_resource_infos("gpu")
    assert sorted(info.get_property("index") for info in infos) == ["0", "1"]
    assert (tmp_path / "argv").read_text() == "2 null\n"  # Flink's argv: amount, then 'null'


def test_gpu_factory_failure_is_a_warn(tmp_path, caplog):
    missing = tmp_path / "nope.sh"
    provider = load_external_resources(
        {
            "external-resources": "gpu",
            **resource(
                "gpu", 1, JAVA_GPU_FACTORY, **{"discovery-mode": "script", "discovery-script.path": str(missing)}
            ),
        }
    )
    assert provider.get_external_resource_infos("gpu") == frozenset()
    assert warnings_of(caplog) == [
        f"Could not instantiate driver with factory {JAVA_GPU_FACTORY} for gpu. "
        f"DiscoveryScriptNotFound: The gpu discovery script does not exist in path {missing}."
    ]


# --- a third-party driver found by entry point, for real ---------------------------------------


@pytest.fixture(scope="session")
def fake_fpga_site(tmp_path_factory):
    """``tests/fixtures/fake_fpga`` installed with pip into a plain directory (its dist-info
    carries the entry points)."""
    base = tmp_path_factory.mktemp("fake_fpga")
    source = base / "source"
    shutil.copytree(FIXTURES / "fake_fpga", source)  # keep build droppings out of the tree
    target = base / "site"
    # offline: the build backend (setuptools) comes from the test environment
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        pytest.fail(
            f"pip could not install tests/fixtures/fake_fpga (is setuptools installed?):\n{done.stdout}{done.stderr}"
        )
    return target


PROBE = textwrap.dedent("""\
    import json, logging, sys
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from flink_gpu import load_external_resources
    config = json.loads(sys.argv[1])
    with load_external_resources(config) as provider:
        print(json.dumps({
            name: {"infos": sorted(({k: i.get_property(k) for k in i.get_keys()}
                                    for i in provider.get_external_resource_infos(name)),
                                   key=lambda p: p["slot"]),
                   "reason": provider.missing_reason(name)}
            for name in config["external-resources"].split(";")}))
    """)


def run_probe(config, site):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), str(SRC)])))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout), done.stderr


def test_driver_registered_as_entry_point_is_loaded_by_name(fake_fpga_site):
    config = {
        "external-resources": "fpga;java-style",
        **resource("fpga", 2, "fpga", vendor="Xilinx"),
        **resource("java-style", 1, "com.example.flink.FPGADriverFactory"),
    }
    result, stderr = run_probe(config, fake_fpga_site)
    assert result == {
        "fpga": {
            "infos": [
                {"slot": "0", "vendor": "Xilinx", "serial": "FPGA-0000"},
                {"slot": "1", "vendor": "Xilinx", "serial": "FPGA-0001"},
            ],
            "reason": None,
        },
        "java-style": {"infos": [{"slot": "0", "vendor": "unknown", "serial": "FPGA-0000"}], "reason": None},
    }
    assert stderr == ""


def test_without_the_distribution_the_entry_point_is_unknown():
    result, stderr = run_probe({"external-resources": "fpga", **resource("fpga", 2, "fpga")}, "")
    assert result == {
        "fpga": {
            "infos": [],
            "reason": f"factory class fpga was not found (no entry point 'fpga' in group {ENTRY_POINT_GROUP})",
        }
    }
    assert stderr == "WARNING Could not find factory class fpga for fpga.\n"


def test_an_unchanged_flink_configuration_finds_simulated_gpus_through_nvml(tmp_path):
    """The whole path of a TaskManager start: Flink's flat file with the Java factory name and no
    script path → our GPU factory → auto mode → NVML (the bundled simulator, 4 devices)."""
    from flink_gpu import simulator

    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 2\n"
        f"external-resource.gpu.driver-factory.class: {JAVA_GPU_FACTORY}\n"
    )
    code = textwrap.dedent("""\
        import json, sys
        from flink_gpu import load_external_resources
        with load_external_resources(sys.argv[1]) as provider:
            infos = provider.get_external_resource_infos("gpu")
            print(json.dumps(sorted(({k: i.get_property(k) for k in i.get_keys()} for i in infos),
                                    key=lambda p: p["index"])))
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    env.update(simulator.environment(devices=4))
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run(
        [sys.executable, "-c", code, str(conf)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    infos = json.loads(done.stdout)
    assert [info["index"] for info in infos] == ["0", "1"]
    assert infos[0]["uuid"] == "GPU-00000000-0000-4000-8000-000000000000"
    assert infos[1]["pci.bus-id"] == "00000000:02:00.0"
    assert infos[1]["name"] == "NVIDIA Simulated GPU"


# ---- a worker whose GPU or configuration fails still starts --------------------------------------


NVML_PROVIDER = """
import json, os
from flink_gpu.flink.framework import load_external_resources
script = os.environ["TEST_SCRIPT"]
config = {
    "external-resources": "gpu;fpga",
    "external-resource.gpu.amount": 1,
    "external-resource.gpu.driver-factory.class": "%s",
    "external-resource.gpu.param.discovery-mode": "nvml",
    "external-resource.fpga.amount": 1,
    "external-resource.fpga.driver-factory.class": "%s",
    "external-resource.fpga.param.discovery-script.path": script,
}
before = sorted(os.listdir("/proc/self/fd"))
for _ in range(20):
    with load_external_resources(config) as provider:
        result = {
            "gpu": sorted(map(str, provider.get_external_resource_infos("gpu"))),
            "gpu_reason": provider.missing_reason("gpu"),
            "fpga": sorted(map(str, provider.get_external_resource_infos("fpga"))),
        }
result["fd_leak"] = sorted(set(os.listdir("/proc/self/fd")) - set(before))
print(json.dumps(result))
""" % (JAVA_FACTORY, JAVA_FACTORY)  # noqa: UP031 (the template's own braces are Python dicts)


@pytest.mark.usefixtures("no_leaks")
def test_nvml_init_failure_never_stops_a_worker_and_leaks_nothing(tmp_path):
    script = tmp_path / "fpga.sh"
    script.write_text("#!/bin/sh\necho 7\n")
    script.chmod(0o755)
    env = child_env(init_error=9)
    env["TEST_SCRIPT"] = str(script)
    result = json.loads(run_child(NVML_PROVIDER, env=env))
    assert result["gpu"] == []  # Flink's contract: an empty set, the worker starts
    assert "kernel driver is not loaded" in result["gpu_reason"]
    assert simulator.library_path() in result["gpu_reason"]
    assert result["fpga"] == ["GPU Device(7)"]  # the other resource is unaffected
    assert result["fd_leak"] == []  # 20 failed NVML initialisations, no descriptor left open


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("value", ["two", "2.5", "true", "[1, 2]", "'2 GPUs'"])
def test_wrong_amount_types_name_the_key_and_value(tmp_path, value):
    conf = write_conf(tmp_path, f"external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: {value}\n")
    with pytest.raises(IllegalConfigurationException) as info:
        load_external_resources(conf)
    assert "for key 'external-resource.gpu.amount'" in str(info.value)
    assert str(info.value).startswith("Could not parse value '")


@pytest.mark.usefixtures("no_leaks")
def test_wrong_types_of_gpu_options_are_reasons_not_crashes(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu;tpu
external-resource:
  gpu:
    amount: 1
    driver-factory.class: {JAVA_FACTORY}
    param:
      discovery-mode: 2
  tpu:
    amount: 1
    driver-factory.class: {JAVA_FACTORY}
    param:
      discovery-mode: script
      discovery-script.path: /bin/true
      discovery-script.timeout: soon
""",
    )
    provider = load_external_resources(conf)
    assert provider.get_external_resource_infos("gpu") == frozenset()
    reason = provider.missing_reason("gpu")
    assert "'discovery-mode'" in reason and "auto, nvml, script" in reason
    assert provider.get_external_resource_infos("tpu") == frozenset()
    assert "soon" in provider.missing_reason("tpu") and "discovery-script.timeout" in provider.missing_reason("tpu")


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    "text, reason",
    [
        ("external-resources: gpu\n", "external-resource.gpu.amount is not set"),
        (
            "external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n",
            "external-resource.gpu.driver-factory.class is not set",
        ),
        (f"external-resource:\n  gpu:\n    amount: 1\n    driver-factory.class: {JAVA_FACTORY}\n", None),
    ],
)
def test_missing_sections_leave_an_empty_set_and_a_reason(tmp_path, text, reason):
    provider = load_external_resources(write_conf(tmp_path, text))
    assert provider.get_external_resource_infos("gpu") == frozenset()
    if reason is None:  # no external-resources list at all: nothing is enabled
        assert provider.resource_names == ()
    else:
        assert reason in provider.missing_reason("gpu")
