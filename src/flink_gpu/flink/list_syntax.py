"""Flink's ``StructuredOptionsSplitter``: the list syntax of string-valued list options
(``gpu;fpga``, ``'a;b';c``)."""

from __future__ import annotations

from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.flink.grammars import is_java_whitespace, java_trim

__all__ = ["split_escaped"]


def split_escaped(text: str, delimiter: str = ";") -> list[str]:
    """Split ``text`` on ``delimiter`` as Flink's ``StructuredOptionsSplitter.splitEscaped`` does.

    Single or double quotes group text (a doubled quote inside is an escape); unquoted parts are
    trimmed; blanks between tokens are skipped; two delimiters in a row give an empty string;
    leading and trailing delimiters give nothing. Raises ``IllegalConfigurationException`` with
    Flink's messages on bad quoting.
    """
    # tokens: (kind, text, position); kind is "q" (quoted), "u" (unquoted) or "d" (delimiter)
    tokens: list[tuple[str, str, int]] = []
    cursor, length = 0, len(text)
    while cursor < length:
        ch = text[cursor]
        if ch in "'\"":
            parts: list[str] = []
            i = cursor + 1
            while True:
                if i >= length:
                    raise IllegalConfigurationException("Could not split string. Quoting was not closed properly.")
                if text[i] == ch:
                    if i + 1 < length and text[i + 1] == ch:
                        parts.append(ch)
                        i += 2
                        continue
                    break
                parts.append(text[i])
                i += 1
            tokens.append(("q", "".join(parts), cursor))
            cursor = i + 1
        elif ch == delimiter:
            tokens.append(("d", ch, cursor))
            cursor += 1
        elif not is_java_whitespace(ch):
            i = cursor
            while i < length and text[i] != delimiter:
                if text[i] in "'\"":
                    raise IllegalConfigurationException(f"Could not split string. Illegal quoting at position: {i}")
                i += 1
            tokens.append(("u", java_trim(text[cursor:i]), cursor))
            cursor = i
        else:
            cursor += 1

    splits: list[str] = []
    for n, (kind, value, _position) in enumerate(tokens):
        following = tokens[n + 1] if n + 1 < len(tokens) else None
        if kind == "q":
            if following is not None and following[0] != "d":
                raise IllegalConfigurationException(
                    f"Could not split string. Illegal quoting at position: {following[2] - 1}"
                )
            splits.append(value)
        elif kind == "u":
            splits.append(value)
        elif following is not None and following[0] == "d":
            splits.append("")
    return splits
