"""URL paths as robots.txt rules see them (RFC 9309 §2.2.2).

Both sides of a comparison are brought to one normal form (docs/parser.md,
"Percent-encoding"); on the URL side a literal ``*`` or ``$`` becomes ``%2A`` /
``%24`` (§2.2.3). Lone surrogates from ``surrogateescape`` encode back to
their bytes, so invalid UTF-8 keeps its exact octets. :func:`decode_reserved`
gives the other reading of escaped reserved characters (see
:mod:`scrapy_rep.robotstxt`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

# RFC 3986 §2.2-2.3.
_RESERVED = ":/?#[]@" + "!$&'()*+,;="
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")

# "scheme://authority" or "//authority", then the path, params and query.
_SCHEME_AUTHORITY = r"(?:[^:/?#;]*://[^/?#;]*|//[^/?#;]*)?"
URL_PATH = re.compile(rf"{_SCHEME_AUTHORITY}([^#]*)")

# Reserved characters compared as they are. '*' and '$' are left out: they have
# a meaning in patterns (below); so are '[' and ']', reserved for hosts only and
# never raw in a path or query that Scrapy sends: they compare escaped.
_RAW_RESERVED = "".join(char for char in _RESERVED if char not in "*$[]")
# Characters compared as they are: the unreserved ones, those reserved ones, and '%'.
_AS_IS = "".join(sorted(_UNRESERVED)) + _RAW_RESERVED + "%"
# Anything else must be percent-encoded: non-ASCII (as UTF-8), controls, space
# and '"<>[\\]^`{|}'. A '*' is left alone here: in patterns it is the wildcard,
# and the URL side has already turned its own into "%2A".
_TO_ENCODE = re.compile(f"[^{re.escape(_AS_IS)}*$]+")


def _escapes_of(chars: Iterable[str]) -> str:
    """An expression for the upper-case hex digits of ``chars``' escapes, grouped
    by their first digit ("2[DE]|3[0-9]|...") so that a scan tries few branches."""
    by_first: dict[str, str] = {}
    for char in sorted(chars):
        digits = f"{ord(char):02X}"
        by_first[digits[0]] = by_first.get(digits[0], "") + digits[1]
    return "|".join(f"{first}[{seconds}]" for first, seconds in by_first.items())


# Escapes that normalising changes: lower-case hex, or an unreserved character.
_ESCAPE_TO_CHANGE = re.compile(rf"%(?:[0-9A-Fa-f][a-f]|[a-f][0-9A-F]|{_escapes_of(_UNRESERVED)})")
# The second reading (decode_reserved): escapes of the reserved characters
# compared raw, and a bare '%' (one that starts no escape). '#' is left out, as
# no side holds it raw: a rule's '#' starts a comment, a URL's its fragment.
_DECODED_RESERVED = _RAW_RESERVED.replace("#", "")
_BARE_PERCENT = r"%(?![0-9A-Fa-f]{2})"
_READ_SECOND_WAY = re.compile(rf"%(?:{_escapes_of(_DECODED_RESERVED)})|{_BARE_PERCENT}")
_HAS_BARE_PERCENT = re.compile(_BARE_PERCENT)
# For the quick test that most paths and patterns pass: bytes that need no look.
PLAIN_IN_PATH = _AS_IS.replace("%", "").encode()
# A URL whose path needs no normalising, in one match: the path (group 2) is
# there, starts with "/", and is plain up to the fragment or the end.
# (The scheme and authority are taken as URL_PATH takes them, and never given
# back: "//host" has an empty path, not the path "//host".)
PLAIN_URL = re.compile(
    rf"(?=({_SCHEME_AUTHORITY}))\1"
    rf"(/[{re.escape(_AS_IS.replace('%', '').replace('#', ''))}]*)(?=#|\Z)"
)
_PLAIN_IN_PATTERN = PLAIN_IN_PATH + b"*"
# From this length on, a path is checked for plainness with one byte-level
# pass, which costs less than the regular expression's character class.
LONG_URL = 256
_URL_HEAD = re.compile(_SCHEME_AUTHORITY)
_PLAIN_PATH_BYTES = PLAIN_IN_PATH.replace(b"#", b"")


def path_of(url: str) -> str:
    """The path, params and query of an absolute or path-absolute ``url``,
    without the fragment, "/" at least, as Google's reference matcher takes it."""
    path = URL_PATH.match(url)[1]  # type: ignore[index]  # the pattern matches any text
    return path if path[:1] == "/" else "/" + path


def url_path(url: str) -> str:
    """The path, params and query of ``url`` in normal form: what rules match."""
    if len(url) < LONG_URL:
        plain = PLAIN_URL.match(url)
        if plain is not None:
            return plain[2]
    else:
        path = url[_URL_HEAD.match(url).end() :]  # type: ignore[union-attr]  # always matches
        if (
            path[:1] == "/"
            and path.isascii()
            and not path.encode().translate(None, _PLAIN_PATH_BYTES)
        ):
            return path
    return normalize_path(path_of(url))


def _percent_encode(run: str) -> str:
    try:
        octets = run.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        octets = run.encode("utf-8", "surrogatepass")
    return "%" + octets.hex("%").upper()


def _normalize_escape(match: re.Match[str]) -> str:
    hex_digits = match[0][1:].upper()
    char = chr(int(hex_digits, 16))
    return char if char in _UNRESERVED else "%" + hex_digits


def _needs_work(text: str, plain: bytes) -> bool:
    """Whether normalising may change ``text`` (a few C-level passes)."""
    if not text.isascii():
        return True
    odd = text.encode().translate(None, plain)  # the characters that are not plain
    if not odd:
        return False
    return bool(odd.strip(b"%")) or _ESCAPE_TO_CHANGE.search(text) is not None


def _normalize(text: str) -> str:
    """Escapes in one form, and percent-encoding where it is due ('$' excepted)."""
    if "%" in text:
        if _HAS_BARE_PERCENT.search(text) is None:
            text = _ESCAPE_TO_CHANGE.sub(_normalize_escape, text)
        else:
            text = _normalize_escapes_as_they_form(text)
    if _TO_ENCODE.search(text) is not None:
        text = _TO_ENCODE.sub(lambda run: _percent_encode(run[0]), text)
    return text


def _normalize_escapes_as_they_form(text: str) -> str:
    """Escapes normalised left to right, in one pass: a decoded escape can
    complete a bare '%' before it into an escape of its own ("%%30a" is "%0A",
    as "%0a" is), which is normalised in turn, so that normal form is one."""
    out: list[str] = []
    for char in text:
        out.append(char)
        while len(out) >= 3 and out[-3] == "%":
            escape = _ESCAPE_TO_CHANGE.fullmatch("".join(out[-3:]))
            if escape is None:
                break
            out[-3:] = _normalize_escape(escape)
    return "".join(out)


def normalize_path(path: str) -> str:
    """Normalise a URL path for comparison with rule patterns."""
    if not _needs_work(path, PLAIN_IN_PATH):
        return path
    if "*" in path:
        path = path.replace("*", "%2A")
    if "$" in path:
        path = path.replace("$", "%24")
    return _normalize(path)


def is_plain_pattern(pattern: str) -> bool:
    """Whether normalising leaves ``pattern`` as it is (the common case, at C speed)."""
    if not pattern.isascii():
        return False
    odd = pattern.encode().translate(None, _PLAIN_IN_PATTERN)
    return not odd or (odd == b"$" and pattern[-1] == "$")


def normalize_pattern(pattern: str) -> str:
    """Normalise a rule pattern; ``*`` stays a wildcard and a final ``$`` an anchor."""
    if is_plain_pattern(pattern):
        return pattern
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    if not _needs_work(body, _PLAIN_IN_PATTERN):
        return pattern
    if "$" in body:
        body = body.replace("$", "%24")
    body = _normalize(body)
    return body + "$" if anchored else body


def _decode_escape(match: re.Match[str]) -> str:
    escape = match[0]
    return "%25" if len(escape) == 1 else chr(int(escape[1:], 16))


def decode_reserved(text: str) -> str:
    """A path or pattern in normal form, read the other way RFC 9309 §2.2.2 can be
    read: an escaped reserved character is that character ("%3D" is "="), and a
    '%' that starts no escape is "%25". Only ``* $ [ ] #`` keep their escapes."""
    if "%" not in text:
        return text
    return _READ_SECOND_WAY.sub(_decode_escape, text)


def reads_one_way(text: str) -> bool:
    """Whether ``text`` (in normal form) is the same in both readings of
    §2.2.2 (:func:`decode_reserved` would leave it as it is): one scan."""
    return "%" not in text or _READ_SECOND_WAY.search(text) is None


def has_bare_percent(text: str) -> bool:
    """Whether ``text`` holds a '%' that starts no escape."""
    return "%" in text and _HAS_BARE_PERCENT.search(text) is not None
