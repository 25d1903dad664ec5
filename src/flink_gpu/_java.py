"""Java's string rules that Flink's behaviour depends on (Character.isWhitespace, String.trim,
StringUtils.isNullOrWhitespaceOnly). Imports nothing: GPUInfo, on every operator's hot path, uses it."""


def is_java_whitespace(ch: str) -> bool:
    """Java's ``Character.isWhitespace``: Unicode space separators except no-break spaces,
    plus the line/paragraph separators and the ASCII controls \\t \\n \\v \\f \\r and 0x1C-0x1F."""
    if ch in "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \u1680\u2028\u2029\u205f\u3000":
        return True
    return "\u2000" <= ch <= "\u200a" and ch != "\u2007"


def java_trim(text: str) -> str:
    """Java's ``String.trim``: strip every char <= U+0020 at both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def is_java_blank(text: str) -> bool:
    """Flink's ``StringUtils.isNullOrWhitespaceOnly``, with Java's notion of whitespace."""
    # Java's whitespace is a subset of Python's str.isspace(), so the common case is one C call
    return not text or (text.isspace() and all(map(is_java_whitespace, text)))
