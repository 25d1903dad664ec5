"""GPUDriverFactory / GPUDriver: options, mode selection (docs/design.md §4.1), lifecycle, framework fit."""

import logging

import pytest

import flink_gpu
from flink_gpu import (
    Configuration,
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    FlinkException,
    GPUDriver,
    GPUDriverFactory,
    GPUDriverOptions,
    GPUInfo,
    IllegalConfigurationException,
    NvmlError,
)

SCRIPT = "#!/bin/sh\necho 0,1\n"


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "discovery.sh"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return str(path)


def test_flinks_options():
    assert GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key == "discovery-script.path"
    assert (
        GPUDriverOptions.DISCOVERY_SCRIPT_PATH.default_value == "plugins/external-resource-gpu/nvidia-gpu-discovery.sh"
    )
    assert GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key == "discovery-script.args"
    assert GPUDriverOptions.DISCOVERY_SCRIPT_ARG.default_value is None
    assert not GPUDriverOptions.DISCOVERY_SCRIPT_ARG.has_default_value()


def test_our_options():
    assert GPUDriverOptions.DISCOVERY_MODE.key == "discovery-mode"
    assert GPUDriverOptions.DISCOVERY_MODE.default_value == "auto"
    assert GPUDriverOptions.NVML_LIBRARY_PATH.key == "nvml.library-path"
    assert GPUDriverOptions.NVML_LIBRARY_PATH.default_value is None
    assert GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT.key == "discovery-script.timeout"
    assert Configuration({"discovery-script.timeout": "1 min"}).get(GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT) == 60.0


def test_public_names():
    for name in ("GPUDriverFactory", "GPUDriver", "GPUInfo", "GPUDriverOptions", "cuda_visible_devices"):
        assert name in flink_gpu.__all__ and getattr(flink_gpu, name) is getattr(flink_gpu.gpu, name)


def test_factory_and_driver_implement_the_framework_abcs(script):
    factory = GPUDriverFactory()
    assert isinstance(factory, ExternalResourceDriverFactory)
    gpu_driver = factory.create_external_resource_driver(Configuration({"discovery-script.path": script}))
    assert isinstance(gpu_driver, GPUDriver) and isinstance(gpu_driver, ExternalResourceDriver)


@pytest.mark.parametrize("make_config", [dict, Configuration])
def test_config_may_be_a_dict_or_a_configuration(script, make_config):
    config = make_config({"discovery-script.path": script, "discovery-script.args": "--foo"})
    with GPUDriverFactory().create_external_resource_driver(config) as gpu_driver:
        assert gpu_driver.retrieve_resource_info(2) == {GPUInfo("0"), GPUInfo("1")}


def test_driver_sees_the_param_view_of_a_full_configuration(script):
    full = Configuration(
        {"external-resource.gpu.param.discovery-script.path": script, "external-resource.gpu.amount": 2}
    )
    gpu_driver = GPUDriver(full.prefixed("external-resource.gpu.param."))
    assert gpu_driver.mode == "script"
    assert len(gpu_driver.retrieve_resource_info(2)) == 2


def test_the_java_factory_name_loads_this_driver(script):
    from flink_gpu import load_external_resources

    config = {
        "external-resources": "gpu",
        "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "org.apache.flink.externalresource.gpu.GPUDriverFactory",
        "external-resource.gpu.param.discovery-script.path": script,
    }
    with load_external_resources(config) as provider:
        assert provider.get_external_resource_infos("gpu") == {GPUInfo("0"), GPUInfo("1")}


@pytest.mark.parametrize("value", ["Script", " script ", "SCRIPT"])
def test_mode_is_case_and_blank_insensitive(script, value):
    assert GPUDriver({"discovery-mode": value, "discovery-script.path": script}).mode == "script"


def test_unknown_mode_names_key_value_and_choices():
    with pytest.raises(IllegalConfigurationException) as error:
        GPUDriver({"discovery-mode": "cuda"})
    assert str(error.value) == ("Invalid value 'cuda' for key 'discovery-mode': expected one of auto, nvml, script.")


def test_script_mode_uses_the_default_path(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError) as error:
        GPUDriver({"discovery-mode": "script"})
    assert str(error.value) == (
        "The gpu discovery script does not exist in path "
        f"{tmp_path}/plugins/external-resource-gpu/nvidia-gpu-discovery.sh."
    )


def test_settings_are_read_once_and_name_the_full_key_of_a_resource():
    from flink_gpu.flink.script_protocol import ScriptArgs
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config(
        {
            "discovery-mode": " NVML ",
            "discovery-script.args": "--enable-coordination-mode --coordination-file /f",
            "discovery-script.timeout": "2 s",
            "nvml.library-path": " ",
        },
        "gpu",
    )
    assert settings == GPUDriverSettings(
        mode="nvml",
        script_path="plugins/external-resource-gpu/nvidia-gpu-discovery.sh",
        script_path_set=False,
        script_args_text="--enable-coordination-mode --coordination-file /f",
        script_args=ScriptArgs(True, "/f", ()),
        timeout=2.0,
        library_path=None,
        resource_name="gpu",
    )
    assert GPUDriverSettings.from_config({"discovery-script.path": "x"}).script_path_set
    with pytest.raises(IllegalConfigurationException) as error:
        GPUDriverSettings.from_config({"discovery-mode": "cuda"}, "gpu")
    assert str(error.value) == (
        "Invalid value 'cuda' for key 'external-resource.gpu.param.discovery-mode': expected one of auto, nvml, script."
    )
    with pytest.raises(
        IllegalConfigurationException,
        match="'external-resource.gpu.param.discovery-script.timeout': the timeout must be positive",
    ):
        GPUDriverSettings.from_config({"discovery-script.timeout": "0"}, "gpu")


def test_settings_name_their_resource_and_read_a_number_as_milliseconds():
    from flink_gpu.gpu.settings import GPUDriverSettings

    text = {"discovery-mode": "nvml", "discovery-script.args": "--enable-coordination-mode"}
    assert GPUDriverSettings.from_config(dict(text), "other").resource_name == "other"
    assert GPUDriverSettings.from_config({"discovery-script.timeout": 1}).timeout == 0.001  # ms


def test_a_driver_takes_its_settings_as_read(script):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config({"discovery-script.path": script})
    with GPUDriver(settings) as gpu_driver:
        assert gpu_driver.settings is settings and gpu_driver.mode == "script"


def test_auto_with_explicit_path_logs_its_reason_once(script, caplog):
    with caplog.at_level(logging.INFO, "flink_gpu.gpu.driver"):
        gpu_driver = GPUDriver({"discovery-script.path": script})
        gpu_driver.retrieve_resource_info(1)
        gpu_driver.retrieve_resource_info(1)
    assert gpu_driver.mode == "script"
    assert [r.getMessage() for r in caplog.records] == [
        "GPU discovery uses the script backend: discovery-script.path is set."
    ]


def test_auto_with_a_blank_explicit_path_is_flinks_error():
    with pytest.raises(IllegalConfigurationException, match="is not configured"):
        GPUDriver({"discovery-script.path": "  "})


def test_auto_falls_back_to_the_default_script_when_nvml_cannot_load(tmp_path, monkeypatch, caplog):
    plugin = tmp_path / "plugins" / "external-resource-gpu"
    plugin.mkdir(parents=True)
    (plugin / "nvidia-gpu-discovery.sh").write_text("#!/bin/sh\necho 3\n")
    (plugin / "nvidia-gpu-discovery.sh").chmod(0o755)
    monkeypatch.setenv("FLINK_HOME", str(tmp_path))
    missing = str(tmp_path / "no-libnvidia-ml.so.1")
    with caplog.at_level(logging.INFO, "flink_gpu.gpu.driver"):
        gpu_driver = GPUDriver({"nvml.library-path": missing})
    assert gpu_driver.mode == "script"
    assert gpu_driver.retrieve_resource_info(1) == {GPUInfo("3")}
    [record] = caplog.records
    assert record.getMessage().startswith(
        "GPU discovery uses the script backend: discovery-script.path is not set and NVML is not usable ("
    )
    assert missing in record.getMessage()


def test_nvml_mode_fails_clearly_without_nvml(tmp_path):
    missing = str(tmp_path / "libnvidia-ml.so.1")
    with pytest.raises(NvmlError) as error:
        GPUDriver({"discovery-mode": "nvml", "nvml.library-path": missing})
    assert missing in str(error.value)
    assert isinstance(error.value, FlinkException)


@pytest.mark.parametrize("timeout", ["0 ms", "0"])
def test_timeout_must_be_positive(script, timeout):
    with pytest.raises(IllegalConfigurationException, match="discovery-script.timeout"):
        GPUDriver({"discovery-script.path": script, "discovery-script.timeout": timeout})


def test_unparsable_timeout_names_the_key(script):
    with pytest.raises(
        IllegalConfigurationException, match="Could not parse value 'soon' for key 'discovery-script.timeout'"
    ):
        GPUDriver({"discovery-script.path": script, "discovery-script.timeout": "soon"})


@pytest.mark.parametrize("interval", ["999 ms", "0 s", "500"])
def test_a_metrics_interval_below_one_second_names_the_key_and_the_minimum(script, interval):
    from flink_gpu.gpu.settings import GPUDriverSettings

    with pytest.raises(IllegalConfigurationException) as caught:
        GPUDriverSettings.from_config({"metrics.interval": interval}, "gpu")
    message = str(caught.value)
    assert "'external-resource.gpu.param.metrics.interval'" in message and "at least 1 s" in message
    with pytest.raises(IllegalConfigurationException, match="metrics.interval"):
        GPUDriver({"discovery-script.path": script, "metrics.interval": interval})


def test_the_metrics_interval_is_a_flink_duration_of_five_seconds_by_default():
    from flink_gpu.gpu.settings import GPUDriverSettings

    assert GPUDriverSettings.from_config({}).metrics_interval == 5.0
    assert GPUDriverSettings.from_config({"metrics.interval": "1 min"}).metrics_interval == 60.0
    assert GPUDriverSettings.from_config({"metrics.interval": "1 s"}).metrics_interval == 1.0
    # as Flink's Java plugin, which never reads it, a lenient reading keeps the default
    assert GPUDriverSettings.from_config_lenient({"metrics.interval": "10 ms"}).metrics_interval == 5.0


def test_amount_must_be_a_whole_number(script):
    gpu_driver = GPUDriver({"discovery-script.path": script})
    with pytest.raises(TypeError):
        gpu_driver.retrieve_resource_info(1.5)


def test_close_is_idempotent_and_final(script):
    gpu_driver = GPUDriver({"discovery-script.path": script})
    with gpu_driver as entered:
        assert entered is gpu_driver
        assert len(gpu_driver.retrieve_resource_info(2)) == 2
    gpu_driver.close()
    with pytest.raises(FlinkException, match="closed"):
        gpu_driver.retrieve_resource_info(2)
    assert "closed" in repr(gpu_driver)


def test_repr_says_backend_and_reason(script):
    assert repr(GPUDriver({"discovery-script.path": script})) == "<GPUDriver script: discovery-script.path is set>"


# --- auto mode: when NVML fails and the default script is missing, the error says NVML failed ----


def test_auto_fallback_to_a_missing_default_script_says_nvml_was_not_usable(tmp_path, monkeypatch):
    from flink_gpu import GPUDriver

    monkeypatch.setenv("FLINK_HOME", str(tmp_path))  # no plugins/ there
    missing_library = str(tmp_path / "no-libnvidia-ml.so.1")
    with pytest.raises(FileNotFoundError) as error:
        GPUDriver({"nvml.library-path": missing_library})
    message = str(error.value)
    # Flink's sentence stays first, so log scrapers and users of script mode see the same text
    assert message.startswith(
        "The gpu discovery script does not exist in path "
        f"{tmp_path}/plugins/external-resource-gpu/nvidia-gpu-discovery.sh."
    )
    assert "discovery-mode is 'auto'" in message and "NVML is not usable" in message
    assert missing_library in message
    # a host without a GPU: how to get simulated ones, and one exception rather than a chain of three
    assert 'eval "$(flink-gpu --simulate 4 taskmanager-env)"' in message and "simulator" in message
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_a_bad_timeout_is_an_error_whichever_backend_is_chosen():
    # the settings are validated once, before the backend is chosen (NVML is not even loaded)
    with pytest.raises(
        IllegalConfigurationException, match="Could not parse value 'soon' for key 'discovery-script.timeout'"
    ):
        GPUDriver({"discovery-mode": "nvml", "discovery-script.timeout": "soon"})


@pytest.mark.parametrize(
    "value, match",
    [
        (
            "soon",
            "Invalid value 'soon' for key 'external-resource.gpu.param.nvml-timeout': expected a positive duration "
            "such as '5 s' or '500 ms' (text does not start with a number).",
        ),
        (
            "0 s",
            "Invalid value '0 s' for key 'external-resource.gpu.param.nvml-timeout': expected a positive duration "
            "such as '5 s' or '500 ms' (it is not positive).",
        ),
    ],
)
def test_a_bad_nvml_timeout_names_the_key(value, match):
    from flink_gpu.gpu.settings import GPUDriverSettings

    with pytest.raises(IllegalConfigurationException) as error:
        GPUDriverSettings.from_config({"discovery-mode": "nvml", "nvml-timeout": value}, "gpu")
    assert str(error.value) == match


def test_nvml_timeout_is_a_flink_duration_defaulting_to_5_s():
    from flink_gpu.gpu.settings import GPUDriverSettings

    assert GPUDriverSettings.from_config({}).nvml_timeout == 5.0
    assert GPUDriverSettings.from_config({"nvml-timeout": "250 ms"}).nvml_timeout == 0.25
    assert GPUDriverSettings.from_config({"nvml-timeout": "2 min"}).nvml_timeout == 120.0


def test_nvml_timeout_in_the_script_args_is_read_as_flink_gpu_discovery_reads_it_and_the_parameter_wins():
    from flink_gpu.gpu.settings import GPUDriverSettings

    args = {"discovery-script.args": "--enable-coordination-mode --nvml-timeout 2s"}
    assert GPUDriverSettings.from_config(args).nvml_timeout_seconds() == 2.0
    assert GPUDriverSettings.from_config({**args, "nvml-timeout": "1 s"}).nvml_timeout_seconds() == 1.0
    with pytest.raises(
        IllegalConfigurationException,
        match="Invalid value 'later' for --nvml-timeout in key 'external-resource.gpu.param.discovery-script.args': "
        "expected a positive duration such as '5 s' or '500 ms' \\(text does not start",
    ):
        GPUDriverSettings.from_config({"discovery-script.args": "--nvml-timeout later"}, "gpu").nvml_timeout_seconds()
    # the flag is read by flink-gpu-discovery's rule, set parameter or not: a bad one is never passed over
    with pytest.raises(IllegalConfigurationException, match="Invalid value 'later' for --nvml-timeout"):
        GPUDriverSettings.from_config(
            {"discovery-script.args": "--nvml-timeout later", "nvml-timeout": "1 s"}, "gpu"
        ).nvml_timeout_seconds()


# -- the amount: the coordination's check, one rule for both ----------------------------------------


@pytest.mark.parametrize("amount", [True, False, 2.0, "2", None])
def test_an_amount_that_is_no_int_is_refused_naming_it_as_coordination_claim_does(script, tmp_path, amount):
    from flink_gpu import coordination

    gpu_driver = GPUDriver({"discovery-script.path": script})
    with pytest.raises(TypeError) as driver_error:
        gpu_driver.retrieve_resource_info(amount)
    with pytest.raises(TypeError) as claim_error:
        coordination.claim(amount, ["0"], path=tmp_path / "coordination")
    assert str(driver_error.value) == str(claim_error.value)
    assert str(driver_error.value).startswith("The amount of GPUs must be a whole number (an int), got ")
    assert repr(amount) in str(driver_error.value)


def test_an_int_like_amount_is_still_an_amount(script):
    class Two:
        def __index__(self):
            return 2

    assert len(GPUDriver({"discovery-script.path": script}).retrieve_resource_info(Two())) == 2


NVML_DRIVER = """
import json, sys
from flink_gpu import FlinkException, GPUDriver
args = sys.argv[1]
out = []
with GPUDriver({"discovery-mode": "nvml", "discovery-script.args": args}) as driver:
    for amount in (2**64, 10**30, 2**63, 5):
        try:
            driver.retrieve_resource_info(amount)
            out.append("no error")
        except FlinkException as error:
            out.append(str(error))
print(json.dumps(out))
"""


@pytest.mark.parametrize("coordinated", [False, True])
def test_a_huge_amount_is_not_enough_gpus_in_nvml_mode(tmp_path, coordinated):
    import json

    from conftest import run_python, simulated_env

    args = f"--enable-coordination-mode --coordination-file {tmp_path / 'c'}" if coordinated else ""
    proc = run_python(NVML_DRIVER.replace("sys.argv[1]", repr(args)), env=simulated_env(devices=4))
    messages = json.loads(proc.stdout)
    for amount, message in zip((2**64, 10**30, 2**63, 5), messages, strict=True):
        assert message.startswith("Could not get enough GPU resources"), message
        assert str(amount) in message


@pytest.mark.parametrize("amount", [2**63, 2**64 + 1, 2**70])
def test_an_amount_beyond_a_java_long_is_not_enough_gpus_and_runs_no_script(tmp_path, amount):
    """The stock script's bash wraps such an amount around (2**64 + 1 gave GPU 0, 2**70 none)."""
    ran = tmp_path / "ran"
    path = tmp_path / "discovery.sh"
    path.write_text(f"#!/bin/sh\ntouch {ran}\necho 0,1\n")
    path.chmod(0o755)
    with pytest.raises(FlinkException) as info:
        GPUDriver({"discovery-script.path": str(path)}).retrieve_resource_info(amount)
    assert str(info.value) == (
        f"Could not get enough GPU resources: {amount} requested, more than any "
        f"host has (Flink's amounts are at most {2**63 - 1})."
    )
    assert not ran.exists()


def test_the_largest_java_long_reaches_the_script(tmp_path):
    path = tmp_path / "discovery.sh"
    path.write_text('#!/bin/sh\n[ "$1" = 9223372036854775807 ] && echo 0,1\n')
    path.chmod(0o755)
    assert GPUDriver({"discovery-script.path": str(path)}).retrieve_resource_info(2**63 - 1) == {
        GPUInfo("0"),
        GPUInfo("1"),
    }


def test_every_bad_amount_gives_the_documented_error_naming_it(tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ran = tmp_path / "ran"
    path = tmp_path / "discovery.sh"
    path.write_text(f"#!/bin/sh\ntouch {ran}\necho 0,1\n")
    path.chmod(0o755)
    gpu_driver = GPUDriver({"discovery-script.path": str(path)})

    @settings(max_examples=150, deadline=None)
    @given(
        st.one_of(
            st.integers(min_value=2**63),
            st.integers(max_value=0),
            st.booleans(),
            st.floats(allow_nan=True),
            st.text(max_size=30),
            st.none(),
        )
    )
    def check(amount):
        with pytest.raises((FlinkException, ValueError, TypeError)) as info:
            gpu_driver.retrieve_resource_info(amount)
        error = info.value
        if isinstance(amount, bool) or not isinstance(amount, int):
            assert type(error) is TypeError and repr(amount) in str(error)
            assert str(error).startswith("The amount of GPUs must be a whole number")
        elif amount <= 0:
            assert type(error) is ValueError and "gpuAmount should be positive" in str(error)
        else:
            assert isinstance(error, FlinkException) and f": {amount} requested" in str(error)

    check()
    assert not ran.exists()  # no bad amount reached the script


# --- health-checks: which checks decide health (docs/design.md §9.1) -------------------------------

ALL_CHECKS = ("inforom", "remapped-rows", "ecc", "recovery-action", "fabric", "retired-pages", "nvlink")


@pytest.mark.parametrize(
    "value, enforced",
    [
        (None, ALL_CHECKS),
        ("all", ALL_CHECKS),
        ("all,-inforom", tuple(c for c in ALL_CHECKS if c != "inforom")),
        (" ALL , -Fabric, -ecc ", ("inforom", "remapped-rows", "recovery-action", "retired-pages", "nvlink")),
        ("ecc,fabric", ("ecc", "fabric")),
        ("-all", ()),
        ("-all,recovery-action", ("recovery-action",)),
    ],
)
def test_health_checks_are_read_left_to_right(value, enforced):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config({} if value is None else {"health-checks": value})
    assert settings.health_checks == enforced


@pytest.mark.parametrize("value, bad", [("all,-inform", "'-inform'"), ("", "''"), ("ecc,,fabric", "''")])
def test_an_unknown_health_check_names_the_full_key_and_the_names(value, bad):
    from flink_gpu.gpu.settings import GPUDriverSettings

    with pytest.raises(IllegalConfigurationException) as error:
        GPUDriverSettings.from_config({"health-checks": value}, "gpu")
    assert str(error.value) == (
        f"Invalid value '{value}' for key 'external-resource.gpu.param.health-checks': {bad} is not a health "
        "check; use all, inforom, remapped-rows, ecc, recovery-action, fabric, retired-pages, nvlink, each optionally "
        "prefixed with '-' to leave it out (e.g. 'all,-inforom')."
    )


# --- busy-gpus: what the NVML backend does with GPUs that run other processes ---------------------


def test_busy_gpus_option():
    assert GPUDriverOptions.BUSY_GPUS.key == "busy-gpus"
    assert GPUDriverOptions.BUSY_GPUS.default_value == "avoid"


@pytest.mark.parametrize(
    "value, policy",
    [("avoid", "avoid"), ("exclude", "exclude"), ("ignore", "ignore"), (" Exclude ", "exclude"), ("IGNORE", "ignore")],
)
def test_busy_gpus_each_value_is_read_once_into_the_settings(value, policy):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config({"busy-gpus": value, "discovery-script.args": "--busy-gpus avoid"})
    assert settings.busy_gpus == policy


def test_busy_gpus_defaults_to_avoid():
    from flink_gpu.gpu.settings import GPUDriverSettings

    assert GPUDriverSettings.from_config({}).busy_gpus == "avoid"


def test_an_unknown_busy_gpus_names_the_full_key_and_the_allowed_values():
    from flink_gpu.gpu.settings import GPUDriverSettings

    with pytest.raises(IllegalConfigurationException) as error:
        GPUDriverSettings.from_config({"busy-gpus": "never"}, "gpu")
    assert str(error.value) == (
        "Invalid value 'never' for key 'external-resource.gpu.param.busy-gpus': expected one of avoid, exclude, ignore."
    )


def test_an_unknown_busy_gpus_fails_the_driver_before_a_backend_is_chosen(script):
    # validated with the other options, whichever backend would have been chosen
    with pytest.raises(IllegalConfigurationException, match="'busy-gpus': expected one of avoid"):
        GPUDriver({"discovery-script.path": script, "busy-gpus": ""})


@pytest.mark.parametrize(
    "params, policy",
    [
        ({}, "avoid"),
        ({"discovery-script.args": "--busy-gpus exclude"}, "exclude"),
        ({"busy-gpus": "ignore"}, "ignore"),
        ({"busy-gpus": "ignore", "discovery-script.args": "--busy-gpus ignore"}, "ignore"),
    ],
)
def test_the_nvml_policy_is_the_parameter_else_the_flag_in_the_args(params, policy, caplog):
    from flink_gpu.gpu.settings import GPUDriverSettings

    with caplog.at_level(logging.WARNING):
        assert GPUDriverSettings.from_config(params).busy_policy() == policy
    assert not caplog.records


def test_the_busy_gpus_parameter_wins_over_a_different_flag_with_a_warn(caplog):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config(
        {"busy-gpus": "Avoid", "discovery-script.args": "--busy-gpus exclude"}, "gpu"
    )
    with caplog.at_level(logging.WARNING):
        assert settings.busy_policy() == "avoid"
        assert settings.busy_policy(warn=False) == "avoid"
    assert [r.getMessage() for r in caplog.records] == [
        "'external-resource.gpu.param.busy-gpus' is 'avoid' but "
        "'external-resource.gpu.param.discovery-script.args' has --busy-gpus exclude; using 'avoid'."
    ]


def test_the_nvml_timeout_parameter_wins_over_a_different_flag_with_a_warn(caplog):
    from flink_gpu.gpu.settings import GPUDriverSettings

    same = GPUDriverSettings.from_config({"nvml-timeout": "2000 ms", "discovery-script.args": "--nvml-timeout 2s"})
    assert same.overrides == ()  # one duration written two ways is no conflict
    settings = GPUDriverSettings.from_config(
        {"nvml-timeout": "300 ms", "discovery-script.args": "--nvml-timeout 2s"}, "gpu"
    )
    with caplog.at_level(logging.WARNING):
        assert (settings.busy_policy(), settings.nvml_timeout_seconds()) == ("avoid", 0.3)
    assert [r.getMessage() for r in caplog.records] == [
        "'external-resource.gpu.param.nvml-timeout' is '300 ms' but "
        "'external-resource.gpu.param.discovery-script.args' has --nvml-timeout 2s; using '300 ms'."
    ]


def test_a_duration_given_as_a_timedelta_is_read_as_flink_renders_it():
    from datetime import timedelta

    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config(
        {"nvml-timeout": timedelta(milliseconds=300), "metrics.interval": timedelta(minutes=2)}
    )
    assert (settings.nvml_timeout, settings.metrics_interval) == (0.3, 120.0)


@pytest.mark.parametrize("args, value", [("--busy-gpus never", "never"), ("--busy-gpus", "")])
def test_a_bad_busy_gpus_flag_names_the_args_key_and_the_allowed_values(args, value):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config({"discovery-script.args": args}, "gpu")
    with pytest.raises(IllegalConfigurationException) as error:
        settings.busy_policy()
    assert str(error.value) == (
        f"Invalid value '{value}' for --busy-gpus in key 'external-resource.gpu.param.discovery-script.args': "
        "expected one of avoid, exclude, ignore."
    )


# --- topology: how the NVML backend picks two or more GPUs within a class (the busy-gpus grammar) ---------


def test_topology_option():
    assert GPUDriverOptions.TOPOLOGY.key == "topology"
    assert GPUDriverOptions.TOPOLOGY.default_value == "prefer"


@pytest.mark.parametrize(
    "params, policy",
    [
        ({}, "prefer"),
        ({"topology": " Ignore "}, "ignore"),
        ({"discovery-script.args": "--topology IGNORE"}, "ignore"),
        ({"topology": "prefer", "discovery-script.args": "--topology prefer"}, "prefer"),
    ],
)
def test_the_topology_policy_is_the_parameter_else_the_flag_in_the_args(params, policy, caplog):
    from flink_gpu.gpu.settings import GPUDriverSettings

    with caplog.at_level(logging.WARNING):
        settings = GPUDriverSettings.from_config(params)
        assert (settings.topology, settings.topology_policy()) == (policy, policy)
    assert not caplog.records


def test_an_unknown_topology_names_the_full_key_and_the_allowed_values(script):
    from flink_gpu.gpu.settings import GPUDriverSettings

    with pytest.raises(IllegalConfigurationException) as error:
        GPUDriverSettings.from_config({"topology": "nvlink"}, "gpu")
    assert str(error.value) == (
        "Invalid value 'nvlink' for key 'external-resource.gpu.param.topology': expected one of prefer, ignore."
    )
    with pytest.raises(IllegalConfigurationException, match="'topology': expected one of prefer, ignore"):
        GPUDriver({"discovery-script.path": script, "topology": ""})


@pytest.mark.parametrize("args, value", [("--topology best", "best"), ("--topology", "")])
def test_a_bad_topology_flag_names_the_args_key_and_the_allowed_values(args, value):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config({"discovery-script.args": args}, "gpu")
    with pytest.raises(IllegalConfigurationException) as error:
        settings.topology_policy()
    assert str(error.value) == (
        f"Invalid value '{value}' for --topology in key 'external-resource.gpu.param.discovery-script.args': "
        "expected one of prefer, ignore."
    )


def test_the_topology_parameter_wins_over_a_different_flag_with_a_warn(caplog):
    from flink_gpu.gpu.settings import GPUDriverSettings

    settings = GPUDriverSettings.from_config(
        {"topology": "ignore", "discovery-script.args": "--topology prefer"}, "gpu"
    )
    with caplog.at_level(logging.WARNING):
        assert (settings.busy_policy(), settings.topology_policy()) == ("avoid", "ignore")
    assert [r.getMessage() for r in caplog.records] == [
        "'external-resource.gpu.param.topology' is 'ignore' but "
        "'external-resource.gpu.param.discovery-script.args' has --topology prefer; using 'ignore'."
    ]


def test_a_lenient_reading_of_a_bad_topology_takes_prefer_or_the_flag():
    from flink_gpu.gpu.settings import GPUDriverSettings

    assert GPUDriverSettings.from_config_lenient({"topology": "never"}, "gpu").topology == "prefer"
    flagged = GPUDriverSettings.from_config_lenient(
        {"topology": "never", "discovery-script.args": "--topology ignore"}, "gpu"
    )
    assert flagged.topology_policy() == "ignore"


def test_a_lenient_reading_takes_the_default_of_each_invalid_option_and_keeps_the_valid_ones():
    from flink_gpu.gpu.settings import GPUDriverSettings

    invalid = {
        "discovery-mode": "gpu",
        "discovery-script.timeout": "-1 s",
        "busy-gpus": "sometimes",
        "health-checks": "all,-nothing",
        "metrics.interval": "10 ms",
        "nvml-timeout": "0 s",
    }
    defaults = GPUDriverSettings.from_config({})
    every_one = GPUDriverSettings.from_config_lenient(invalid, "gpu")
    for field in ("mode", "timeout", "busy_gpus", "health_checks", "metrics_interval", "nvml_timeout"):
        assert getattr(every_one, field) == getattr(defaults, field), field
    # an option left at its default because it was invalid overrides nothing: its flag in the args applies
    with_flags = GPUDriverSettings.from_config_lenient(
        {**invalid, "discovery-script.args": "--busy-gpus exclude --nvml-timeout 2s"}, "gpu"
    )
    assert (with_flags.busy_policy(), with_flags.nvml_timeout_seconds()) == ("exclude", 2.0)
    mixed = GPUDriverSettings.from_config_lenient(
        {**invalid, "busy-gpus": "exclude", "health-checks": "all,-inforom", "nvml-timeout": "300 ms"}, "gpu"
    )
    assert (mixed.busy_gpus, mixed.nvml_timeout) == ("exclude", 0.3)
    assert "inforom" not in mixed.health_checks and mixed.mode == defaults.mode
