"""Flink's memory size grammar (flink_gpu.flink.grammars, csrc/flink/memory_size.*): MemorySize.parseBytes,
and the short form of a size for messages."""

import pytest

from flink_gpu.flink import grammars
from flink_gpu.flink.grammars import format_memory_size, parse_memory_size

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
LONG_MAX = (1 << 63) - 1
UNITS = "b, bytes, k, kb, kibibytes, m, mb, mebibytes, g, gb, gibibytes, t, tb, tebibytes"
ACCEPTED = "(Flink's MemorySize, e.g. '10 gb', '512 mb', or a number of bytes)"


@pytest.mark.parametrize(
    "text, size",
    [
        ("7 b", 7),
        ("7 bytes", 7),
        ("3 k", 3 * KiB),
        ("3 kb", 3 * KiB),
        ("3 kibibytes", 3 * KiB),
        ("512 m", 512 * MiB),
        ("512 mb", 512 * MiB),
        ("512 mebibytes", 512 * MiB),
        ("10 g", 10 * GiB),
        ("10 gb", 10 * GiB),
        ("10 gibibytes", 10 * GiB),
        ("2 t", 2 * TiB),
        ("2 tb", 2 * TiB),
        ("2 tebibytes", 2 * TiB),
    ],
)
def test_every_unit_and_its_long_name_is_a_power_of_1024(text, size):
    assert parse_memory_size(text) == size


@pytest.mark.parametrize(
    "text, size",
    [
        ("10 GB", 10 * GiB),
        (" 512mb ", 512 * MiB),
        ("1 kibibytes", KiB),
        ("1 KiBiBytes", KiB),
        ("\t4\n  Mb\r", 4 * MiB),
        ("\x018 g\x1f", 8 * GiB),  # Java's trim: every char <= U+0020
        ("007 kb", 7 * KiB),
        ("5 \u212ab", 5 * KiB),  # KELVIN SIGN: Java lower-cases it to "k"
    ],
)
def test_case_and_blanks_are_ignored_as_flink_ignores_them(text, size):
    assert parse_memory_size(text) == size


def test_a_bare_number_is_bytes_and_zero_is_a_size():
    assert parse_memory_size("1048576") == MiB
    assert parse_memory_size("0") == 0
    assert parse_memory_size("0 b") == 0
    assert type(parse_memory_size("1 tb")) is int


def test_the_largest_size_is_a_java_long():
    assert parse_memory_size(str(LONG_MAX)) == LONG_MAX
    assert parse_memory_size("8388607 tb") == 8388607 * TiB


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "argument is an empty- or whitespace-only string"),
        (" \t ", "argument is an empty- or whitespace-only string"),
        ("gb", "text does not start with a number"),
        ("-1", "text does not start with a number: a memory size has no sign"),
        ("10 gigs", f"the unit 'gigs' is none of {UNITS}"),
        ("1.5 gb", f"the unit '.5 gb' is none of {UNITS}"),
        ("10 GiB", f"the unit 'gib' is none of {UNITS}"),
        (
            "9223372036854775808",
            "numeric overflow: the number 9223372036854775808 is more than 9223372036854775807, "
            "the most a 64bit number holds",
        ),
        (
            "8589934592 gb",
            "numeric overflow: 8589934592 gb is more than 9223372036854775807 bytes, the most a 64bit number holds",
        ),
    ],
)
def test_a_bad_size_is_named_with_flinks_reason_and_what_is_accepted(text, reason):
    with pytest.raises(ValueError) as error:
        parse_memory_size(text)
    assert str(error.value) == f"'{text}' is not a memory size: {reason} {ACCEPTED}"


def test_the_text_is_named_as_given_non_ascii_included():
    with pytest.raises(ValueError, match="^'10 Gigs é' is not a memory size: the unit 'gigs é' is none of b, "):
        parse_memory_size("10 Gigs é")
    with pytest.raises(ValueError, match="the unit '\udcff'"):  # a lone surrogate survives the round trip
        parse_memory_size("1\udcff")


def test_parse_memory_size_takes_text_only():
    with pytest.raises(TypeError):
        parse_memory_size(10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse_memory_size(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "size, text",
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (17, "17 bytes"),
        (1023, "1023 bytes"),
        (3 * KiB, "3 KiB"),
        (512 * MiB, "512 MiB"),
        (10 * GiB, "10 GiB"),
        (2 * TiB, "2 TiB"),
        (1023 * TiB, "1023 TiB"),
        (4096 * TiB, "4 PiB"),
        (10 * GiB + GiB // 2, "10.5 GiB"),
        (1536 * MiB, "1.5 GiB"),
        (1025, "1.0 KiB"),
        (GiB - 1, "1.0 GiB"),  # rounded up into the next unit: never "1024.0 MiB"
        (MiB - KiB // 10 - 1, "1023.9 KiB"),
        (1536 * TiB, "1.5 PiB"),
        (LONG_MAX, "8.0 EiB"),  # the largest request: not "8388608.0 TiB"
        ((1 << 64) - 1, "16.0 EiB"),
    ],
)
def test_format_memory_size_is_short_and_exact_where_it_can_be(size, text):
    assert format_memory_size(size) == text


def test_format_memory_size_reads_back_what_it_writes():
    for size in (17, 3 * KiB, 512 * MiB, 10 * GiB, 2 * TiB):
        number, unit = format_memory_size(size).split()
        assert parse_memory_size(f"{number} {unit.removesuffix('iB')}") == size


@pytest.mark.parametrize("size, error", [(-1, ValueError), (1 << 64, ValueError), (1.5, TypeError), (True, TypeError)])
def test_format_memory_size_takes_an_int_of_bytes(size, error):
    with pytest.raises(error):
        format_memory_size(size)


def test_the_face_exports_the_three_grammars():
    assert sorted(grammars.__all__) == [
        "format_memory_size",
        "is_java_blank",
        "is_java_whitespace",
        "java_trim",
        "parse_duration",
        "parse_memory_size",
    ]
