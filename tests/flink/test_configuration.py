"""Configuration, ConfigOption, Flink's list splitter and the YAML loaders (docs/design.md §2.1, 2.2)."""

import functools
import logging
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flink_gpu import ConfigOption, Configuration, IllegalConfigurationException, config_option
from flink_gpu.flink.configuration import Duration, split_escaped, to_java_string
from support.faults import write_conf
from support.files import make_odd_path

AMOUNT = ConfigOption("external-resource.gpu.amount", int)
LIST = config_option("external-resources", list, [])


# --- ConfigOption ------------------------------------------------------------------------------


def test_config_option_is_immutable_and_describes_a_key():
    option = config_option("a.b", int, 3, "doc")
    assert (option.key, option.type, option.default_value, option.description) == ("a.b", int, 3, "doc")
    assert option.has_default_value()
    assert not ConfigOption("a.b", str).has_default_value()
    with pytest.raises(AttributeError, match="immutable"):
        option.key = "c"
    described = option.with_description("new")
    assert described.description == "new" and option.description == "doc"
    assert option.with_default(None).default_value is None
    assert option == config_option("a.b", int, 3) and hash(option) == hash(config_option("a.b", int))


def test_config_option_rejects_unsupported_types_and_empty_keys():
    with pytest.raises(TypeError, match="Unsupported type .* for option 'k'"):
        ConfigOption("k", dict)
    with pytest.raises(ValueError, match="non-empty string"):
        ConfigOption("", str)


def test_duration_is_a_marker_without_instances():
    with pytest.raises(TypeError):
        Duration()


# --- Configuration basics ----------------------------------------------------------------------


def test_flat_and_nested_mappings_give_the_same_keys():
    flat = Configuration({"external-resource.gpu.amount": 2, "external-resources": "gpu"})
    nested = Configuration({"external-resource": {"gpu": {"amount": 2}}, "external-resources": "gpu"})
    assert flat == nested
    assert nested.keys() == ["external-resource.gpu.amount", "external-resources"]


def test_none_values_are_unset():
    config = Configuration({"a": None, "b": 1})
    assert "a" not in config and config.keys() == ["b"]
    assert config.set("b", None) is config
    assert "b" not in config


def test_coerce():
    config = Configuration({"a": 1})
    assert Configuration.coerce(config) is config
    assert Configuration.coerce({"a": 1}) == config
    assert Configuration.coerce(None) == Configuration()
    with pytest.raises(TypeError, match="expects a mapping of Flink keys, got list"):
        Configuration.coerce(["a"])


def test_copy_constructor_does_not_share_state():
    original = Configuration({"a": 1})
    copy = Configuration(original)
    copy.set("a", 2)
    assert original.get("a") == 1


def test_get_by_key_and_by_option():
    config = Configuration({"external-resource.gpu.amount": "2", "x": 5})
    assert config.get("external-resource.gpu.amount") == "2"  # a plain key gives the raw value
    assert config.get(AMOUNT) == 2  # an option converts
    assert config.get("missing") is None and config.get("missing", 7) == 7
    assert config.get(config_option("missing", int, 4)) == 4
    assert config.get(config_option("missing", int, 4), 9) == 9
    assert config.get(ConfigOption("missing", int)) is None


def test_set_contains_keys_to_dict_len_iter():
    config = Configuration()
    assert config.set(AMOUNT, 2).set("b", "x") is config
    assert AMOUNT in config and config.contains("b") and "c" not in config and 3 not in config
    assert config.keys() == ["external-resource.gpu.amount", "b"]
    assert list(config) == config.keys() and len(config) == 2
    assert config.to_dict() == {"external-resource.gpu.amount": 2, "b": "x"}
    assert config.remove("b") and not config.remove("b")
    with pytest.raises(TypeError, match="must be a str or ConfigOption"):
        config.get(3)


def test_list_default_is_never_shared():
    config = Configuration()
    first = config.get(LIST)
    first.append("gpu")
    assert config.get(LIST) == [] and LIST.default_value == []


# --- conversions (Flink's ConfigurationUtils) --------------------------------------------------


@pytest.mark.parametrize("raw, expected", [("2", 2), (2, 2), ("+2", 2), ("-3", -3), ("9223372036854775807", 2**63 - 1)])
def test_long_values(raw, expected):
    assert Configuration({AMOUNT.key: raw}).get(AMOUNT) == expected


@pytest.mark.parametrize("raw", ["two", "2.0", 2.0, " 2", "2_000", "0x10", "", True])
def test_non_long_values_raise_flinks_message(raw):
    config = Configuration({AMOUNT.key: raw})
    with pytest.raises(IllegalConfigurationException) as error:
        config.get(AMOUNT)
    assert str(error.value) == (
        f"Could not parse value '{to_java_string(raw)}' for key 'external-resource.gpu.amount'. "
        "Expected a whole number such as 2 (Flink reads it as a Java long)."
    )


def test_spec_example_amount_two():
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration({"external-resource.gpu.amount": "two"}).get(AMOUNT)
    assert str(error.value).startswith("Could not parse value 'two' for key 'external-resource.gpu.amount'.")
    assert isinstance(error.value, ValueError)


def test_long_out_of_range():
    with pytest.raises(IllegalConfigurationException, match="out of the range of a 64-bit long"):
        Configuration({AMOUNT.key: str(2**63)}).get(AMOUNT)


@pytest.mark.parametrize("raw, expected", [("true", True), ("FALSE", False), (True, True), ("True", True)])
def test_booleans(raw, expected):
    assert Configuration({"b": raw}).get(config_option("b", bool)) is expected


def test_bad_boolean():
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration({"b": "yes"}).get(config_option("b", bool))
    assert str(error.value) == (
        "Could not parse value 'yes' for key 'b'. "
        "Unrecognized option for boolean: yes. Expected either true or "
        "false(case insensitive)"
    )


@pytest.mark.parametrize("raw, expected", [("1.5", 1.5), (" 2 ", 2.0), ("1e3", 1000.0), (3, 3.0), ("2.5f", 2.5)])
def test_floats(raw, expected):
    assert Configuration({"f": raw}).get(config_option("f", float)) == expected


def test_bad_float():
    with pytest.raises(
        IllegalConfigurationException, match=r"^Could not parse value '1,5' for key 'f'\. Expected a number"
    ):
        Configuration({"f": "1,5"}).get(config_option("f", float))


@pytest.mark.parametrize(
    "raw, seconds",
    [
        ("10 s", 10.0),
        ("500ms", 0.5),
        ("1 min", 60.0),
        ("2 h", 7200.0),
        ("3 secs", 3.0),
        ("10", 0.01),
        (10, 0.01),
        (timedelta(seconds=4), 4.0),
        ("1 d", 86400.0),
        ("7 ns", 7e-9),
    ],
)
def test_durations_follow_flinks_time_utils(raw, seconds):
    assert Configuration({"t": raw}).get(config_option("t", Duration)) == pytest.approx(seconds)


def test_duration_default_is_seconds():
    assert Configuration().get(config_option("t", Duration, 10.0)) == 10.0


@pytest.mark.parametrize(
    "raw, cause",
    [
        ("1.5 s", "Time interval unit label '.5 s'"),
        ("10 parsecs", "Time interval unit label 'parsecs'"),
        ("s", "text does not start with a number"),
        (1.5, "Time interval unit label '.5'"),
        (True, "text does not start with a number"),
        (" ", "argument is an empty- or whitespace-only string"),
    ],
)
def test_bad_durations(raw, cause):
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration({"t": raw}).get(config_option("t", Duration))
    assert str(error.value).startswith(f"Could not parse value '{to_java_string(raw)}' for key 't'. {cause}")


def test_string_option_renders_values_as_flink():
    config = Configuration(
        {"i": 2, "b": False, "f": 2.0, "big": 1e20, "l": ["gpu", "a;b", "it's"], "d": timedelta(seconds=90)}
    )
    assert config.get_string("i") == "2"
    assert config.get(config_option("i", str)) == "2"
    assert config.get_string("b") == "false"
    assert config.get_string("f") == "2.0"
    assert config.get_string("big") == "1.0E20"
    assert config.get_string("l") == "gpu;'a;b';'it''s'"
    assert config.get_string("d") == "90 s"
    assert config.get_string("missing") is None and config.get_string("missing", "x") == "x"


def test_list_option_from_string_and_from_list():
    assert Configuration({"external-resources": "gpu;fpga"}).get(LIST) == ["gpu", "fpga"]
    assert Configuration({"external-resources": ["gpu", "a;b"]}).get(LIST) == ["gpu", "a;b"]


def test_list_option_quoting_error_names_value_and_key():
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration({"external-resources": "'a'b"}).get(LIST)
    assert str(error.value) == (
        "Could not parse value ''a'b' for key 'external-resources'. "
        "Could not split string. Illegal quoting at position: 2"
    )


# --- prefixed views (DelegatingConfiguration) --------------------------------------------------


def test_prefixed_view_strips_the_prefix_and_writes_through():
    config = Configuration(
        {
            "external-resource.gpu.param.discovery-script.path": "/x.sh",
            "external-resource.gpu.param.discovery-script.args": "--a",
            "external-resource.gpu.amount": 2,
            "external-resource.fpga.param.vendor": "y",
        }
    )
    view = config.prefixed("external-resource.gpu.param.")
    assert view.keys() == ["discovery-script.path", "discovery-script.args"]
    assert view.get("discovery-script.path") == "/x.sh"
    assert "amount" not in view and view.get("vendor") is None
    view.set("discovery-mode", "script")
    assert config.get("external-resource.gpu.param.discovery-mode") == "script"
    config.set("external-resource.gpu.param.late", "1")
    assert view.get("late") == "1"  # a live view
    assert config.prefixed("external-resource.").prefixed("gpu.param.") == view
    assert "prefix='external-resource.gpu.param.'" in repr(view)


def test_prefixed_view_errors_name_the_full_key():
    view = Configuration({"external-resource.gpu.param.n": "x"}).prefixed("external-resource.gpu.param.")
    with pytest.raises(IllegalConfigurationException, match="for key 'external-resource.gpu.param.n'"):
        view.get(config_option("n", int))


# --- StructuredOptionsSplitter -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("'a;b';c", ["a;b", "c"]),  # docs/design.md §2.2
        ('"AB\'D";B;C', ["AB'D", "B", "C"]),  # Flink's javadoc examples
        ('"AB\'""D;B";C', ["AB'\"D;B", "C"]),
        ("'it''s';x", ["it's", "x"]),  # doubled quote escapes
        (" gpu ; fpga ", ["gpu", "fpga"]),  # unquoted tokens trimmed
        ("gpu;;fpga", ["gpu", "", "fpga"]),  # consecutive delimiters: empty name
        ("gpu; ;fpga", ["gpu", "", "fpga"]),
        (";gpu;", ["gpu"]),  # leading/trailing delimiters dropped
        ("gpu;;", ["gpu", ""]),
        (";;gpu", ["", "gpu"]),
        ("", []),
        ("   ", []),
        ("''", [""]),
        ("' a ' ;b", [" a ", "b"]),  # quoted text kept verbatim
        ("a b;c", ["a b", "c"]),
        ("\u00a0gpu", ["\u00a0gpu"]),  # no-break space is not Java whitespace
        ("\u2003gpu\u2003", ["gpu\u2003"]),  # an em space is skipped, not trimmed
    ],
)
def test_split_escaped(text, expected):
    assert split_escaped(text, ";") == expected


@pytest.mark.parametrize("text, position", [("'a'b", 2), ("a'b", 1), ("'a' b;c", 3), ('gpu;fp"ga', 6), ("\"x\"'y'", 2)])
def test_split_illegal_quoting(text, position):
    with pytest.raises(IllegalConfigurationException) as error:
        split_escaped(text, ";")
    assert str(error.value) == f"Could not split string. Illegal quoting at position: {position}"


@pytest.mark.parametrize("text", ["'abc", 'a;"b', "'it''"])
def test_split_unclosed_quote(text):
    with pytest.raises(IllegalConfigurationException) as error:
        split_escaped(text, ";")
    assert str(error.value) == "Could not split string. Quoting was not closed properly."


_element = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(
    lambda s: (
        s[0] > " "
        and s[-1] > " "
        and s[0] not in "\u1680\u2028\u2029\u205f\u3000"
        and not ("\u2000" <= s[0] <= "\u200a")
    )
)


@given(st.lists(_element, min_size=1))
def test_rendering_a_list_and_splitting_it_gives_it_back(elements):
    assert split_escaped(to_java_string(elements), ";") == elements


# --- YAML files --------------------------------------------------------------------------------


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_legacy_flink_conf_yaml(tmp_path, caplog):
    conf = write(
        tmp_path / "flink-conf.yaml",
        (
            "# Flink's legacy format\n"
            "external-resources: 'a;b';gpu\n"
            "external-resource.gpu.amount: 2   # trailing comment\n"
            "external-resource.gpu.driver-factory.class: org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
            "external-resource.gpu.param.discovery-script.args: --coordination-file /tmp/a: b\n"
            "no-space-after-colon:2\n"
            "empty-value: \n"
            "   \n"
            "url: http://host/#anchor\n"
        ),
    )
    caplog.set_level(logging.WARNING, logger="flink_gpu.flink.configuration")
    config = Configuration.from_yaml(conf)
    assert config.to_dict() == {
        "external-resources": "'a;b';gpu",
        "external-resource.gpu.amount": "2",
        "external-resource.gpu.driver-factory.class": "org.apache.flink.externalresource.gpu.GPUDriverFactory",
        "external-resource.gpu.param.discovery-script.args": "--coordination-file /tmp/a: b",
        "url": "http://host/",  # Flink's legacy parser cuts at any '#'
    }
    assert config.get(LIST) == ["a;b", "gpu"]
    assert config.get(AMOUNT) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"Error while trying to split key and value in configuration file {conf}:6: "
        "Line is not a key-value pair (missing space after ':'?)",
        f"Error while trying to split key and value in configuration file {conf}:7: "
        "Line is not a key-value pair (missing space after ':'?)",
    ]


def test_legacy_parser_handles_crlf_and_empty_key(tmp_path, caplog):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_bytes(b"a: 1\r\n: 2\r\nb: 3\rc: 4")
    config = Configuration.from_yaml(conf)
    assert config.to_dict() == {"a": "1", "b": "3", "c": "4"}
    assert [r.getMessage() for r in caplog.records] == [
        f"Error after splitting key and value in configuration file {conf}:2: Key or value was empty"
    ]


def test_standard_config_yaml_nested_equals_flat(tmp_path):
    nested = write(
        tmp_path / "config.yaml",
        (
            "external-resources: [gpu, fpga]\n"
            "external-resource:\n"
            "  gpu:\n"
            "    amount: 2\n"
            "    driver-factory.class: org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
            "    param:\n"
            "      discovery-script:\n"
            "        args: --enable-coordination-mode\n"
            "  fpga.amount: 1\n"
        ),
    )
    flat = write(
        tmp_path / "flat.yaml",
        (
            "external-resources: [gpu, fpga]\n"
            "external-resource.gpu.amount: 2\n"
            "external-resource.gpu.driver-factory.class: org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
            "external-resource.gpu.param.discovery-script.args: --enable-coordination-mode\n"
            "external-resource.fpga.amount: 1\n"
        ),
    )
    config = Configuration.from_yaml(nested)
    assert config == Configuration.from_yaml(flat)
    assert config.get(LIST) == ["gpu", "fpga"]  # a YAML list is the list itself
    assert config.get("external-resource.gpu.amount") == 2
    assert config.prefixed("external-resource.gpu.param.").to_dict() == {
        "discovery-script.args": "--enable-coordination-mode"
    }


def test_standard_yaml_uses_yaml_1_2_core_scalars_like_flink(tmp_path):
    conf = write(
        tmp_path / "config.yaml",
        (
            "octal-looking: 010\n"
            "octal: 0o17\n"
            "hex: 0x1F\n"
            "yes-word: yes\n"
            "on-word: on\n"
            "date: 2024-01-02\n"
            "underscored: 1_000\n"
            "float: 1e3\n"
            "flag: TRUE\n"
            "nothing: ~\n"
            "quoted: 'a;b'\n"
        ),
    )
    config = Configuration.from_yaml(conf)
    assert config.to_dict() == {
        "octal-looking": 10,
        "octal": 15,
        "hex": 31,
        "yes-word": "yes",
        "on-word": "on",
        "date": "2024-01-02",
        "underscored": "1_000",
        "float": 1000.0,
        "flag": True,
        "quoted": "a;b",
    }
    # a quoted YAML string is just a string: Flink's list syntax then applies to its content
    assert config.get(config_option("quoted", list)) == ["a", "b"]


def test_conf_directory_prefers_config_yaml(tmp_path):
    write(tmp_path / "flink-conf.yaml", "external-resource.gpu.amount: 1\n")
    assert Configuration.from_yaml(tmp_path).get(AMOUNT) == 1
    write(tmp_path / "config.yaml", "external-resource:\n  gpu:\n    amount: 3\n")
    assert Configuration.from_yaml(tmp_path).get(AMOUNT) == 3
    assert Configuration.from_yaml(str(tmp_path)).get(AMOUNT) == 3


def test_conf_directory_without_a_file(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        Configuration.from_yaml(tmp_path)
    assert str(error.value) == (
        f"No Flink configuration file in directory {tmp_path}: expected config.yaml or flink-conf.yaml."
    )


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        Configuration.from_yaml(tmp_path / "config.yaml")
    assert str(error.value) == f"The Flink configuration file {tmp_path / 'config.yaml'} does not exist."


def test_invalid_yaml_names_file_and_line(tmp_path):
    conf = write(tmp_path / "config.yaml", "a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration.from_yaml(conf)
    assert str(error.value).startswith(f"Invalid YAML in Flink configuration file {conf} at line 3")


def test_top_level_must_be_a_mapping(tmp_path):
    conf = write(tmp_path / "config.yaml", "- gpu\n- fpga\n")
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration.from_yaml(conf)
    assert str(error.value) == (
        f"The Flink configuration file {conf} must hold a mapping of configuration keys at the top level, not a list."
    )
    write(conf, "just text\n")
    with pytest.raises(IllegalConfigurationException, match="not a string"):
        Configuration.from_yaml(conf)


def test_empty_file_is_an_empty_configuration(tmp_path):
    assert Configuration.from_yaml(write(tmp_path / "config.yaml", "# nothing\n")) == Configuration()
    assert Configuration.from_yaml(write(tmp_path / "flink-conf.yaml", "")) == Configuration()


def test_parser_choice_can_be_forced(tmp_path):
    conf = write(tmp_path / "worker.yaml", "external-resources: 'a;b';c\n")
    with pytest.raises(IllegalConfigurationException, match="Invalid YAML"):
        Configuration.from_yaml(conf)
    assert Configuration.from_yaml(conf, legacy=True).get(LIST) == ["a;b", "c"]
    legacy_named = write(tmp_path / "flink-conf.yaml", "a:\n  b: 1\n")
    assert Configuration.from_yaml(legacy_named, legacy=False).to_dict() == {"a.b": 1}


# --- hostile YAML and paths that are not regular files -------------------------------------------


def returns_within(seconds, function, fifo=None):
    """``function()``'s result or exception, failing the test if it takes longer than ``seconds``
    (a reader blocked on ``fifo`` is then released with an EOF, so the test run goes on)."""
    import threading

    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as error:  # noqa: B036 - handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if fifo is not None:
            import os

            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"did not return within {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def test_recursive_yaml_alias_is_refused_naming_the_file_and_the_alias(tmp_path):
    conf = write(tmp_path / "config.yaml", "x: 1\na: &x {b: 1, c: *x}\n")
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration.from_yaml(conf)
    assert str(error.value) == (
        f"The Flink configuration file {conf} has a recursive alias *x at line 2, column 17: the "
        "value anchored &x would contain itself. Write the values out instead of the alias."
    )
    write(conf, "a: &l [1, [*l]]\n")  # a list too
    with pytest.raises(IllegalConfigurationException, match=r"recursive alias \*l"):
        Configuration.from_yaml(conf)


def test_a_mapping_that_contains_itself_is_refused_naming_the_key():
    data = {"b": 1}
    data["c"] = data
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration({"a": data})
    assert str(error.value) == (
        "The configuration value at key 'a.c' contains itself; a configuration must be a tree of mappings."
    )


def alias_bomb(levels):
    lines = ["m0: &m0 {k: v}"]
    lines += [f"m{n}: &m{n} {{a: *m{n - 1}, b: *m{n - 1}}}" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_at_once_naming_the_limit(tmp_path):
    import time

    conf = write(tmp_path / "config.yaml", alias_bomb(30))
    start = time.monotonic()
    with pytest.raises(IllegalConfigurationException) as error:
        returns_within(10, lambda: Configuration.from_yaml(conf))
    assert time.monotonic() - start < 0.5
    assert str(error.value).startswith(
        f"The aliases of the Flink configuration file {conf} expand to more than 100000 values"
    )


def test_more_aliases_of_collections_than_flink_allows_are_refused(tmp_path):
    from flink_gpu.flink.config_files import MAX_COLLECTION_ALIASES

    assert MAX_COLLECTION_ALIASES == 50  # snakeyaml-engine's maxAliasesForCollections
    aliases = "\n".join(f"k{n}: *base" for n in range(50))
    conf = write(tmp_path / "config.yaml", f"base: &base {{a: 1}}\n{aliases}\n")
    assert Configuration.from_yaml(conf).get("k49.a") == 1  # 50 are fine
    write(conf, f"base: &base {{a: 1}}\n{aliases}\nk50: *base\n")
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration.from_yaml(conf)
    assert str(error.value) == (
        f"The Flink configuration file {conf} has more than 50 aliases of mappings or lists (at "
        "line 52, column 6), the limit of Flink's YAML loader. Write the values out instead of the "
        "aliases."
    )
    scalars = "\n".join(f"s{n}: *one" for n in range(200))  # aliases of scalars are not limited
    write(conf, f"one: &one 1\n{scalars}\n")
    assert Configuration.from_yaml(conf).get("s199") == 1


def test_a_badly_tagged_yaml_value_names_the_file(tmp_path):
    conf = write(tmp_path / "config.yaml", "a: !!float abc\n")
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration.from_yaml(conf)
    assert str(error.value).startswith(f"Invalid YAML in Flink configuration file {conf}: ")


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
@pytest.mark.parametrize("legacy", [False, True])
def test_a_configuration_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind, legacy):

    name = "flink-conf.yaml" if legacy else "config.yaml"
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    path, what = make_odd_path(conf_dir / name, kind)
    # the file itself (a directory given is a conf directory), or the conf directory it is in
    for named in ([path] if kind != "directory" else []) + [conf_dir]:
        with pytest.raises(OSError) as error:
            returns_within(10, functools.partial(Configuration.from_yaml, named), fifo=path)
        assert str(error.value) == (
            f"The Flink configuration file {path} is {what}, not a regular file; give the path of a file."
        )


def test_a_configuration_larger_than_the_read_limit_is_refused(tmp_path):
    from flink_gpu.base.regular_files import MAX_FILE_SIZE, FileTooLargeError

    for name in ("config.yaml", "flink-conf.yaml"):
        conf = tmp_path / name
        with open(conf, "wb") as handle:
            handle.truncate(MAX_FILE_SIZE + 1)  # sparse: nothing is written
        with pytest.raises(FileTooLargeError) as error:
            Configuration.from_yaml(conf)
        assert str(error.value) == (
            f"The Flink configuration file {conf} is larger than 16 MiB, the most flink-gpu reads from one file."
        )


def test_load_configuration_file_returns_the_skipped_lines(tmp_path):
    from flink_gpu.flink.config_files import SkippedLine, load_configuration_file

    conf = write(tmp_path / "flink-conf.yaml", "a: 1\nb:2\n: 3\n")
    loaded = load_configuration_file(tmp_path)
    assert loaded.path == str(conf) and loaded.data == {"a": "1"}
    assert loaded.skipped == (
        SkippedLine(str(conf), 2, "b:2", "Line is not a key-value pair (missing space after ':'?)"),
        SkippedLine(str(conf), 3, ": 3", "Key or value was empty"),
    )
    assert [line.message for line in loaded.skipped] == [
        f"Error while trying to split key and value in configuration file {conf}:2: Line is not a "
        "key-value pair (missing space after ':'?)",
        f"Error after splitting key and value in configuration file {conf}:3: Key or value was empty",
    ]
    assert load_configuration_file(write(tmp_path / "config.yaml", "a: {b: 1}\n")).skipped == ()


# keys set more than once, as Flink 2.3's GlobalConfiguration treats them (checked against
# flink-dist 2.3.0): one mapping holding a key twice is refused ("found duplicate key"); a nested and
# a flat spelling of one key, or a repeated line of a legacy file, silently take the last value


@pytest.mark.parametrize(
    "text, key, lines",
    [
        (
            "taskmanager.numberOfTaskSlots: 1\ntaskmanager.numberOfTaskSlots: 2\n",
            "taskmanager.numberOfTaskSlots",
            (1, 2),
        ),
        (
            "taskmanager:\n  numberOfTaskSlots: 1\nrest.port: 1\ntaskmanager:\n  numberOfTaskSlots: 3\n",
            "taskmanager",
            (1, 4),
        ),
        ("taskmanager:\n  numberOfTaskSlots: 1\n  memory: {a: 1, a: 2}\n", "taskmanager.memory.a", (3, 3)),
    ],
)
def test_a_key_twice_in_one_mapping_is_refused_as_flink_refuses_the_file(tmp_path, text, key, lines):
    conf = write(tmp_path / "config.yaml", text)
    with pytest.raises(IllegalConfigurationException) as error:
        Configuration.from_yaml(conf)
    where = f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]} and {lines[1]}"
    assert str(error.value) == (
        f"The Flink configuration file {conf} sets the key '{key}' twice in one mapping ({where}): Flink "
        'refuses such a file ("found duplicate key") and does not start. Keep one of the two.'
    )


def test_a_key_set_nested_and_flat_takes_the_last_value_and_is_named_with_both_lines(tmp_path):
    from flink_gpu.flink.config_files import RepeatedKey, load_configuration_file

    # Flink's stock config.yaml sets the slots nested; a user appends the flat key
    stock = "jobmanager:\n  rpc:\n    port: 6123\ntaskmanager:\n  numberOfTaskSlots: 1\n"
    conf = write(tmp_path / "config.yaml", stock + "rest.port: 8081\ntaskmanager.numberOfTaskSlots: 2\n")
    loaded = load_configuration_file(conf)
    assert loaded.data["taskmanager.numberOfTaskSlots"] == 2  # the last, as Flink takes it
    assert loaded.repeated == (
        RepeatedKey(
            str(conf),
            "taskmanager.numberOfTaskSlots",
            (5, 7),
            ("numberOfTaskSlots: 1", "taskmanager.numberOfTaskSlots: 2"),
        ),
    )
    assert loaded.repeated[0].message == (
        f"taskmanager.numberOfTaskSlots is set 2 times in {conf}: line 5 (`numberOfTaskSlots: 1`), "
        "line 7 (`taskmanager.numberOfTaskSlots: 2`). Flink takes the last one (line 7) without a word."
    )
    # the other order: the nested one is the last, and wins
    write(conf, "taskmanager.numberOfTaskSlots: 2\ntaskmanager:\n  numberOfTaskSlots: 5\n")
    loaded = load_configuration_file(conf)
    assert loaded.data["taskmanager.numberOfTaskSlots"] == 5
    assert [(r.key, r.line_numbers) for r in loaded.repeated] == [("taskmanager.numberOfTaskSlots", (1, 3))]
    # keys set once, and a null (unset) next to a value, are no repeats
    write(conf, "a: 1\nb: {c: 2}\nb.d: 3\nx: ~\n")
    assert load_configuration_file(conf).repeated == ()


def test_a_repeated_line_of_a_legacy_file_takes_the_last_value_and_is_named(tmp_path):
    from flink_gpu.flink.config_files import load_configuration_file

    conf = write(
        tmp_path / "flink-conf.yaml", "a: 1\ntaskmanager.numberOfTaskSlots: 1\nb: 2\ntaskmanager.numberOfTaskSlots: 4\n"
    )
    loaded = load_configuration_file(conf)
    assert loaded.data["taskmanager.numberOfTaskSlots"] == "4"
    assert [(r.key, r.line_numbers, r.texts) for r in loaded.repeated] == [
        (
            "taskmanager.numberOfTaskSlots",
            (2, 4),
            ("taskmanager.numberOfTaskSlots: 1", "taskmanager.numberOfTaskSlots: 4"),
        )
    ]


_scalar = st.sampled_from(["1", "x", "'q'", "true", "~", "2.5", "[]", "{}"])


def nested(levels, innermost="1"):
    """A flow value of ``levels`` mappings and lists around ``innermost``."""
    return (
        "".join("{n: " if level % 2 == 0 else "[" for level in range(levels))
        + innermost
        + "".join("}" if level % 2 == 0 else "]" for level in reversed(range(levels)))
    )


@st.composite
def yaml_with_aliases(draw):
    """A document of nested flow collections whose values include aliases of earlier, enclosing
    or later anchors (so: recursion, undefined aliases, re-defined anchors, bombs), some of them
    nested around the flink-gpu limit, or libyaml's own of 1000 levels.

    Returns the text and the levels of its deepest key's nesting, aliases left out."""
    anchors = draw(st.lists(st.sampled_from("abcd"), max_size=4))

    def value(depth):
        options = [_scalar, st.sampled_from(["*a", "*b", "*c", "*d"])]
        if depth < 3:
            options.append(
                st.lists(st.deferred(lambda: value(depth + 1)), max_size=3).map(
                    lambda items: "[" + ", ".join(items) + "]"
                )
            )
            options.append(
                st.lists(st.deferred(lambda: value(depth + 1)), max_size=3).map(
                    lambda items: "{" + ", ".join(f"k{i}: {v}" for i, v in enumerate(items)) + "}"
                )
            )
        item = draw(st.one_of(options))
        if anchors and draw(st.booleans()):
            item = f"&{draw(st.sampled_from(anchors))} {item}"
        return st.just(item)

    lines, deepest = [], 0
    for n in range(draw(st.integers(1, 6))):
        levels = draw(st.one_of(st.just(0), st.integers(95, 105), st.integers(990, 1010)))
        deepest = max(deepest, levels)
        lines.append(f"key{n}: {nested(levels, draw(value(0)))}\n")
    return "".join(lines), deepest


@given(yaml_with_aliases())
def test_yaml_with_aliases_gives_a_configuration_or_a_clear_error(tmp_path_factory, document):
    import time

    from flink_gpu.flink.config_files import MAX_NESTING_DEPTH

    text, levels = document
    conf = tmp_path_factory.mktemp("alias") / "config.yaml"
    write(conf, text)
    start = time.monotonic()
    try:
        config = Configuration.from_yaml(conf)
    except IllegalConfigurationException as error:
        assert str(conf) in str(error)
    else:
        assert 1 + levels <= MAX_NESTING_DEPTH  # the top-level mapping is a level too
        assert isinstance(config, Configuration)
        for key in config:
            try:
                config.get_string(key)  # every value renders, or is refused naming its key
            except IllegalConfigurationException as error:
                assert f"Could not read key '{key}'" in str(error)
    assert time.monotonic() - start < 2


def test_a_configuration_nested_deeper_than_the_limit_is_refused_naming_it(tmp_path):
    from flink_gpu.flink.config_files import MAX_NESTING_DEPTH

    assert MAX_NESTING_DEPTH == 100
    mappings = "a: " + "{a: " * 99 + "1" + "}" * 99 + "\n"  # 100 levels with the top level
    conf = write(tmp_path / "config.yaml", mappings)
    assert Configuration.from_yaml(conf).get("a" + ".a" * 99) == 1
    for text, where in (
        (f"a: {nested(100)}\n", "line 1, column 253"),
        ("a: " + "{a: " * 994 + "1" + "}" * 994 + "\n", "line 1, column 400"),
        # an alias nests as deep as the value it names
        (f"x: &x {nested(60)}\ny: {nested(40, '*x')}\n", "line 2, column 104"),
    ):
        write(conf, text)
        with pytest.raises(IllegalConfigurationException) as error:
            Configuration.from_yaml(conf)
        assert str(error.value) == (
            f"The Flink configuration file {conf} nests mappings or lists more than 100 levels "
            f"deep (at {where}), the most flink-gpu reads. Nest fewer levels."
        )


def test_a_mapping_nested_any_depth_is_flattened():
    data = value = {}
    for _ in range(5000):  # far deeper than Python's recursion limit
        value["a"] = value = {}
    value["b"] = 1
    assert Configuration(data).to_dict() == {"a." * 5000 + "b": 1}


# --- a value whose rendering Flink's quoting would blow up -------------------------------------


def test_a_value_that_renders_beyond_the_limit_is_refused_naming_its_key(tmp_path):
    # each level of list nesting doubles the quotes: 60 levels would render to 2**60 characters
    from flink_gpu.flink.options import MAX_RENDERED_LENGTH

    conf = tmp_path / "config.yaml"
    write(conf, "external-resources: " + "[" * 60 + '"\'"' + "]" * 60 + "\n")
    config = Configuration.from_yaml(conf)
    with pytest.raises(IllegalConfigurationException) as error:
        config.get_string("external-resources")
    assert str(error.value).startswith(
        f"Could not read key 'external-resources': The value renders to more than {MAX_RENDERED_LENGTH} characters"
    )
    from flink_gpu.flink.framework import EXTERNAL_RESOURCE_LIST

    with pytest.raises(IllegalConfigurationException, match="Could not read key 'external-resources'"):
        config.get(EXTERNAL_RESOURCE_LIST)


# ---- binary configuration files ------------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    "content",
    [
        b"external-resources: gpu\n\xff\xfe: 1\n",
        b"external-resources: \x00gpu\n",
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    ],
)
def test_binary_config_files_are_clear_errors(tmp_path, content):
    conf = write_conf(tmp_path, content)
    with pytest.raises(IllegalConfigurationException) as info:
        Configuration.from_yaml(conf)
    assert str(conf) in str(info.value)
