"""Parsing of token counts and byte sizes, and GiB/GB formatting. Exact ints in, exact ints out.

Token counts use binary suffixes, as context lengths are quoted: ``128k`` = 131,072 tokens,
``1m`` = 1,048,576. Byte sizes distinguish decimal and binary units: ``80GB`` = 80 × 10⁹ B,
``80GiB`` = 80 × 2³⁰ B, ``81559MiB`` = 81,559 × 2²⁰ B.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from kvplan.errors import UsageError

GIB = 1 << 30
GB = 10**9
MIB = 1 << 20

_TOKEN_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20}
MAX_TOKENS = 1 << 40  # 1.1 trillion tokens: no context or pool reaches it
MAX_BATCH = 10**9  # concurrent requests: no deployment reaches it
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def shorten(text, keep: int = 24, quote: bool = False) -> str:
    """``text`` as a message echoes it: whole up to ``2 × keep`` characters, else its two ends and its length
    (``99999999999999999999…9999 (5,000 digits)``), so that an error stays one short line whatever was typed
    or read. With ``quote``, the text is quoted as ``repr`` quotes it (``'128q'``)."""
    quote = quote and isinstance(text, str)  # a number (from the Python API) is echoed bare, as repr writes it
    try:
        text = str(text)
    except ValueError:  # an int over Python's 4,300-digit limit on str()
        return f"an integer of {text.bit_length():,} bits"
    if len(text) <= 2 * keep:
        return repr(text) if quote else text
    cut = f"{text[: keep - 4]}…{text[-4:]}"
    unit = "digits" if text.isdigit() else "characters"
    return f"{repr(cut) if quote else cut} ({len(text):,} {unit})"


def check_ascii_number(flag: str, value: str) -> str:
    """``value`` when it is written in ASCII: a number is ASCII digits for every flag and field. Python's
    ``int()`` and ``float()`` (which click calls for integer and float flags) read other scripts' digits
    (``int("٤") == 4``, fullwidth ``４``); :func:`parse_tokens` and :func:`parse_bytes` match ``[0-9]``. One
    rule: ASCII only (:func:`kvplan.aliases.rewrite` checks every number flag with this).

    Raises:
        UsageError: a character outside ASCII.
    """
    if not str(value).isascii():
        raise UsageError(f"{flag}: {shorten(value, quote=True)}: numbers are written in ASCII digits (0-9) here")
    return value


def parse_tokens(text: str | int, flag: str = "--seq", allow_zero: bool = False) -> int:
    """Parse a token count: ``4096``, ``128k`` (131,072), ``1m`` (1,048,576), ``32_768``; with ``allow_zero``
    also ``0`` (``--shared-prefix``).

    Raises:
        UsageError: not a whole number >= 1 (>= 0 with ``allow_zero``; the message names the flag).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        check_ascii_number(flag, text)
        m = re.fullmatch(r"\s*([0-9]{1,40}|[0-9]{1,3}(?:_[0-9]{3})+)\s*([kKmM]?)\s*", str(text))
        if not m and "," in str(text):  # commas separate --seq values; 32,768 would be ambiguous
            raise UsageError(
                f"{flag}: {shorten(text, quote=True)}: a comma is not a thousands separator here; write 32768 or 32_768"
            )
        if not m:
            raise UsageError(
                f"{flag}: {shorten(text, quote=True)} is not a token count; use e.g. 4096, 32k or 128k (k = 1024)"
            )
        value = int(m.group(1).replace("_", "")) * _TOKEN_SUFFIX[m.group(2).lower()]
    if value < 1 and not (allow_zero and value == 0):
        raise UsageError(
            f"{flag}: {shorten(text, quote=True)} must be at least "
            f"{0 if allow_zero else 1} token{'s' if allow_zero else ''}"
        )
    if value > MAX_TOKENS:
        raise UsageError(
            f"{flag}: {shorten(text, quote=True)} is beyond kvplan's bound of {MAX_TOKENS:,} tokens (2^40)"
        )
    return value


def parse_bytes(text: str | int, flag: str) -> int:
    """Parse a byte size: ``17179869184``, ``16GiB``, ``80GB``, ``81559MiB``, ``3.5GiB`` (floored to a byte).

    Raises:
        UsageError: not a size >= 1 B in a known unit.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        check_ascii_number(flag, text)
        m = re.fullmatch(r"\s*([0-9]{1,18}(?:\.[0-9]{1,18})?)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else ""
        if not m or unit not in _BYTE_UNITS:
            raise UsageError(
                f"{flag}: {shorten(text, quote=True)} is not a size; use bytes or a unit: GB (10^9), GiB (2^30), MB, "
                "MiB, TB, TiB"
            )
        try:
            value = int(Decimal(m.group(1)) * _BYTE_UNITS[unit])
        except InvalidOperation:  # pragma: no cover - the regex admits only plain decimals
            raise UsageError(f"{flag}: {shorten(text, quote=True)} is not a number") from None
    if value < 1:
        raise UsageError(f"{flag}: {shorten(text, quote=True)} must be at least 1 byte")
    return value


def gib(n: int) -> float:
    """Bytes to GiB (2³⁰), for display and JSON only (text goes through :func:`fmt_gib`)."""
    return n / GIB


def gb(n: int) -> float:
    """Bytes to GB (10⁹), for display and JSON only (text goes through :func:`fmt_gb`)."""
    return n / GB


def _ratio(n: int, unit: int):
    """``n / unit`` as an exact Decimal (both are ints; 2³⁰ and 10⁹ divide a power of ten exactly)."""
    from decimal import Context

    return Context(prec=max(60, len(str(abs(n))) + 40)).divide(Decimal(n), Decimal(unit))


def fmt_gib(n: int) -> str:
    """``0.5 GiB``-style text with up to 4 significant decimals, trailing zeros dropped; exact for any int."""
    return f"{_trim(_ratio(n, GIB))} GiB"


def fmt_mib(n: int) -> str:
    """Bytes as MiB (2^20) with two decimals: ``1.50 MiB``."""
    return f"{n / MIB:.2f} MiB"


def fmt_gb(n: int) -> str:
    """``0.537 GB``-style text: three decimals, or four significant digits below 0.01 GB; exact for any int."""
    x = _ratio(n, GB)
    if 0 < x < Decimal("0.01"):
        return f"{_sig(x, 4)} GB"
    return f"{_round(x, 3):,.3f} GB"


def fmt_tokens(n: int) -> str:
    """``1 token``, ``4,096 tokens``: a token count in words, singular for one."""
    return f"{n:,} token" if n == 1 else f"{n:,} tokens"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 block``, ``2 blocks``, ``1,024 padding layers``: a count with its noun, singular for one.

    ``words`` is the plural when it is not ``word + "s"``.
    """
    return f"{n:,} {word}" if n == 1 else f"{n:,} {words or word + 's'}"


def fmt_ratio_floor(x: float, places: int = 2) -> str:
    """A ratio cut (not rounded) to ``places`` decimals, with thousands separators: ``6.9966`` → ``6.99``,
    so a count of whole things is never rounded up (``f"{6.9966:.2f}"`` prints ``7.00``).

    The float's shortest repr is cut, so a ratio that is exactly ``0.29`` stays ``0.29`` (its binary value
    is a little below).
    """
    from decimal import ROUND_DOWN, Context

    d = Decimal(repr(float(x)))
    if not d.is_finite():
        return str(x)
    cut = d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_DOWN, context=Context(prec=len(str(d)) + places + 40))
    return f"{cut:,.{places}f}"


def check_batch(n: int, flag: str = "--batch") -> int:
    """``n`` when it is within kvplan's bound of :data:`MAX_BATCH` concurrent requests.

    Raises:
        UsageError: above the bound (the message ``kvplan estimate`` gives).
    """
    if n > MAX_BATCH:
        raise UsageError(f"{flag}: {n:,} is beyond kvplan's bound of {MAX_BATCH:,} concurrent requests")
    return n


def printable(text: str) -> str:
    """``text`` with every character that is not printable (newline, tab, ESC, other control characters)
    written as Python escapes it (``\\n``, ``\\x1b``): printed, it is one plain line and moves no cursor."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def fmt_bytes(n: int) -> str:
    """``536,870,912 B``."""
    return f"{n:,} B"


def _round(x: Decimal, places: int) -> Decimal:
    from decimal import ROUND_HALF_EVEN, Context

    return x.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN, context=Context(prec=len(str(x)) + 10))


def _sig(x: Decimal, digits: int) -> str:
    """``x`` (below 1) to ``digits`` significant digits, as ``%g`` writes a float (``8.192e-05``)."""
    return f"{float(x):.{digits}g}"


def _trim(x: Decimal) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        s = f"{_round(x, 2):,.2f}"
    elif abs(x) >= 1:
        s = f"{_round(x, 4):,.4f}"
    else:
        s = _sig(x, 4) if abs(x) >= Decimal("1e-4") else f"{float(x):.3e}"
    if "." in s and "e" not in s.lower():
        s = s.rstrip("0").rstrip(".")
    return s


def parse_size_default_gib(text: str | float, flag: str) -> int:
    """A size where a bare number means GiB (``--activation-gib 1.5``); units are accepted too.

    Zero is allowed (an overhead of nothing). Raises UsageError on anything else.
    """
    s = str(text).strip()
    if re.fullmatch(r"[0-9]{1,12}(?:\.[0-9]{1,12})?", s):
        return int(Decimal(s) * GIB)
    m = re.fullmatch(r"0+(?:\.0+)?\s*([a-zA-Z]*)", s)
    if m and m.group(1).lower() in _BYTE_UNITS:
        return 0
    return parse_bytes(s, flag)
