"""The discovery script's interface: Flink's tokenising, the stock script's argument grammar
(flink_gpu.flink.script_protocol)."""

import logging

from flink_gpu import coordination
from flink_gpu.flink.script_protocol import (
    BUSY_GPUS_FLAG,
    COORDINATION_FILE_FLAG,
    ENABLE_COORDINATION_FLAG,
    SCRIPT_FLAGS,
    ScriptArgs,
    exec_tokens,
    parse_script_args,
    with_coordination_file,
)

DEFAULT = coordination.DEFAULT_PATH
LOGGER = "flink_gpu.flink.script_protocol"


def test_the_flags_are_the_stock_scripts():
    assert (
        SCRIPT_FLAGS[:2]
        == (ENABLE_COORDINATION_FLAG, COORDINATION_FILE_FLAG)
        == ("--enable-coordination-mode", "--coordination-file")
    )
    assert SCRIPT_FLAGS[2] == BUSY_GPUS_FLAG == "--busy-gpus"  # ours; the stock script ignores it
    assert DEFAULT == "/var/tmp/flink-gpu-coordination"


def test_exec_tokens_split_like_javas_runtime_exec():
    assert exec_tokens(None) == ["null"]  # Java's "" + null
    assert exec_tokens(" a\tb\n\nc\r\fd  ") == ["a", "b", "c", "d"]
    assert exec_tokens("'a b'") == ["'a", "b'"]  # quotes mean nothing
    assert exec_tokens("a\u00a0b\x0bc") == ["a\u00a0b\x0bc"]  # only StringTokenizer's delimiters


def test_args_grammar(caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        assert parse_script_args(None) == ScriptArgs(False, DEFAULT, ())
        assert parse_script_args("null") == ScriptArgs(False, DEFAULT, ())
        assert parse_script_args("") == ScriptArgs(False, DEFAULT, ())
        assert parse_script_args("--enable-coordination-mode\t--coordination-file /x/f") == ScriptArgs(True, "/x/f", ())
        # like the stock script, the token after --coordination-file is the path, whatever it is
        assert parse_script_args("--coordination-file --enable-coordination-mode") == ScriptArgs(
            False, "--enable-coordination-mode", ()
        )
    assert caplog.records == []


def test_docs_typo_gets_a_warn_naming_the_right_flag(caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        parsed = parse_script_args("--enable-coordination --coordination-file /f")
    assert parsed == ScriptArgs(False, "/f", ("--enable-coordination",), ("--enable-coordination-mode",))
    [record] = caplog.records
    assert "'--enable-coordination'" in record.getMessage()
    assert "Did you mean '--enable-coordination-mode'?" in record.getMessage()


def test_an_abbreviated_or_extended_flag_is_suggested(caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        parsed = parse_script_args("--enable-coord --coordination-file=/f --busy --enable")
    assert parsed.unknown == ("--enable-coord", "--coordination-file=/f", "--busy", "--enable")
    assert parsed.suggestions == (
        ENABLE_COORDINATION_FLAG,
        COORDINATION_FILE_FLAG,
        BUSY_GPUS_FLAG,
        None,
    )  # --enable keeps under half the flag: too little to tell
    assert "Did you mean '--enable-coordination-mode'?" in caplog.records[0].getMessage()


def test_unrelated_token_gets_a_warn_listing_the_flags(caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        parsed = parse_script_args("--verbose")
    assert parsed == ScriptArgs(False, DEFAULT, ("--verbose",), (None,))
    [record] = caplog.records
    assert "'--verbose'" in record.getMessage()
    assert "--enable-coordination-mode and --coordination-file PATH" in record.getMessage()


def test_coordination_file_without_a_path_is_the_default_file_with_a_warn(caplog):
    # the stock script keeps its default file; flink-gpu-discovery does the same (one behaviour)
    with caplog.at_level(logging.WARNING, LOGGER):
        parsed = parse_script_args("--enable-coordination-mode --coordination-file", "my.key")
    assert parsed == ScriptArgs(True, DEFAULT, (), (), True)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "'--coordination-file' in 'my.key' ('--enable-coordination-mode --coordination-file') has no "
        f"file path after it; using the default coordination file {DEFAULT}, as the stock script does."
    )


def test_warn_false_parses_silently(caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        parsed = parse_script_args("--verbose --coordination-file", warn=False)
    assert parsed == ScriptArgs(False, DEFAULT, ("--verbose",), (None,), True)
    assert caplog.records == []


def test_with_coordination_file_replaces_the_file_as_the_grammar_reads_it():
    assert with_coordination_file([], "/s") == ["--coordination-file", "/s"]
    assert with_coordination_file(["null"], "/s") == ["null", "--coordination-file", "/s"]
    assert with_coordination_file(["--enable-coordination-mode", "--coordination-file", "/x", "--foo"], "/s") == [
        "--enable-coordination-mode",
        "--foo",
        "--coordination-file",
        "/s",
    ]
    # a trailing --coordination-file without a value
    assert with_coordination_file(["--enable-coordination-mode", "--coordination-file"], "/s") == [
        "--enable-coordination-mode",
        "--coordination-file",
        "/s",
    ]
    # the flag after --coordination-file is its path, as the stock script takes it: mode stays off
    tokens = with_coordination_file(["--coordination-file", "--enable-coordination-mode"], "/s")
    assert tokens == ["--coordination-file", "/s"]
    assert parse_script_args(" ".join(tokens)) == ScriptArgs(False, "/s", ())
    # --busy-gpus takes the next token, even --coordination-file, so that one is no flag
    assert with_coordination_file(["--busy-gpus", "--coordination-file", "/x"], "/s") == [
        "--busy-gpus",
        "--coordination-file",
        "/x",
        "--coordination-file",
        "/s",
    ]
