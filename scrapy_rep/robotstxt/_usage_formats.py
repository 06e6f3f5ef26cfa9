"""The two usage-statement formats, read into ``{purpose: allowed}``. Scrapy-free.

Content-Usage (IETF AIPREF, draft-ietf-aipref-vocab-07 §4) is an RFC 9651
Structured Fields Dictionary, read strictly: any syntax error makes the whole
statement say nothing. Content-Signal (Cloudflare's Content Signals Policy) has
no written syntax and is read leniently. Which label means which purpose is
data, in :mod:`scrapy_rep.robotstxt._usage_labels`.
"""

from __future__ import annotations

import re
from typing import Final

from scrapy_rep.robotstxt import _usage_labels as labels

MAX_FIELD: Final = 16_384
"""Characters of a header's value read; a longer value states nothing."""
_SHOWN = 200  # characters of a value quoted in a reason
_CONTENT_USAGE = labels.purposes_of(labels.CONTENT_USAGE)
_CONTENT_SIGNAL = labels.purposes_of(labels.CONTENT_SIGNAL)
_SPACE = " \t"


def restrict(said: dict[str, bool], purpose: str, allowed: bool) -> None:
    """Add one purpose's value to ``said``, the most restrictive winning."""
    said[purpose] = said.get(purpose, True) and allowed


# -- RFC 9651 Structured Fields: the Dictionary, read strictly ---------------------

_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_NUMBER = re.compile(r"-?([0-9]+)(?:\.([0-9]*))?")
_STRING = re.compile(r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"')
_BYTES = re.compile(r":[A-Za-z0-9+/=]*:")
_BOOLEAN = re.compile(r"\?[01]")
_DISPLAY = re.compile(r'%"((?:[\x20\x21\x23\x24\x26-\x7e]|%[0-9a-f]{2})*)"')
_PERCENT = re.compile(r"%([0-9a-f]{2})")
_OWS = re.compile(r"[ \t]*")
_SP = re.compile(r" *")


class _Invalid(Exception):
    """The field value is not a Structured Fields Dictionary."""


def parse_dictionary(text: str) -> dict[str, str | None] | None:
    """An RFC 9651 Dictionary (§4.2.2): ``{key: Token}``, None for members that
    are no Token (inner lists, strings, numbers, booleans...); None when the
    text does not parse. Parameters are checked and dropped; a key given twice
    keeps its last value. Linear in the text, whatever it holds."""
    if not text.isascii():
        return None
    try:
        return _Dictionary(text).members()
    except _Invalid:
        return None


class _Dictionary:
    __slots__ = ("at", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = _SP.match(text).end()  # type: ignore[union-attr]  # matches any text

    def members(self) -> dict[str, str | None]:
        text = self.text
        found: dict[str, str | None] = {}
        while self.at < len(text):
            key = self._take(_KEY)
            if text.startswith("=", self.at):
                self.at += 1
                if text.startswith("(", self.at):
                    self._inner_list()
                    value = None
                else:
                    value = self._bare_item()
                    self._parameters()
            else:  # a bare key is the Boolean true
                value = None
                self._parameters()
            found[key] = value  # a duplicate keeps the last value
            self.at = _OWS.match(text, self.at).end()  # type: ignore[union-attr]
            if self.at >= len(text):
                break
            if text[self.at] != ",":
                raise _Invalid
            self.at = _OWS.match(text, self.at + 1).end()  # type: ignore[union-attr]
            if self.at >= len(text):
                raise _Invalid  # a trailing comma
        return found

    def _take(self, pattern: re.Pattern[str]) -> str:
        match = pattern.match(self.text, self.at)
        if match is None:
            raise _Invalid
        self.at = match.end()
        return match.group()

    def _bare_item(self) -> str | None:
        """The item's Token, or None for an item of another type."""
        char = self.text[self.at : self.at + 1]
        if char == "-" or char.isdigit():
            self._number()
        elif char == '"':
            self._take(_STRING)
        elif char.isalpha() or char == "*":
            return self._take(_TOKEN)
        elif char == ":":
            self._take(_BYTES)
        elif char == "?":
            self._take(_BOOLEAN)
        elif char == "@":  # a Date: an Integer
            self.at += 1
            if self._number():
                raise _Invalid
        elif char == "%":
            self._display_string()
        else:
            raise _Invalid
        return None

    def _number(self) -> bool:
        """An Integer or a Decimal (§4.2.4); True for a Decimal."""
        match = self._take(_NUMBER)
        whole, dot, fraction = match.lstrip("-").partition(".")
        if not dot:
            if len(whole) > 15:
                raise _Invalid
            return False
        if len(whole) > 12 or not 1 <= len(fraction) <= 3:
            raise _Invalid
        return True

    def _display_string(self) -> None:
        match = _DISPLAY.match(self.text, self.at)
        if match is None:
            raise _Invalid
        self.at = match.end()
        try:  # the escapes must make UTF-8
            _PERCENT.sub(lambda m: chr(int(m[1], 16)), match[1]).encode("latin-1").decode()
        except UnicodeError:
            raise _Invalid from None

    def _parameters(self) -> None:
        text = self.text
        while text.startswith(";", self.at):
            self.at = _SP.match(text, self.at + 1).end()  # type: ignore[union-attr]
            self._take(_KEY)
            if text.startswith("=", self.at):
                self.at += 1
                self._bare_item()

    def _inner_list(self) -> None:
        text = self.text
        self.at += 1  # "("
        while self.at < len(text):
            self.at = _SP.match(text, self.at).end()  # type: ignore[union-attr]
            if text.startswith(")", self.at):
                self.at += 1
                self._parameters()
                return
            self._bare_item()
            self._parameters()
            if self.at >= len(text) or text[self.at] not in " )":
                raise _Invalid
        raise _Invalid


# -- the two statement formats -----------------------------------------------------


def content_usage(value: str) -> dict[str, bool]:
    """``{purpose: allowed}`` of a Content-Usage statement (AIPREF vocab):
    empty when it does not parse or names no known label with ``y``/``n``."""
    if len(value) > MAX_FIELD:
        return {}
    members = parse_dictionary(value.strip(_SPACE))
    said: dict[str, bool] = {}
    if not members:
        return said
    for label, token in members.items():
        allowed = labels.CONTENT_USAGE_VALUES.get(token) if token is not None else None
        if allowed is not None:
            for purpose in _CONTENT_USAGE.get(label, ()):
                restrict(said, purpose, allowed)
    return said


def content_signal(value: str) -> dict[str, bool]:
    """``{purpose: allowed}`` of a Content-Signal value, read leniently: items
    split on commas, key and value trimmed and in any case, ``yes``/``no``; an
    item that cannot be read is ignored, the last readable one of a key wins."""
    if len(value) > MAX_FIELD:
        return {}
    by_label: dict[str, bool] = {}
    for item in value.split(","):
        key, equals, text = item.partition("=")
        if not equals:
            continue
        allowed = labels.CONTENT_SIGNAL_VALUES.get(text.strip(_SPACE).lower())
        if allowed is not None:
            by_label[key.strip(_SPACE).lower()] = allowed
    said: dict[str, bool] = {}
    for label, allowed in by_label.items():
        for purpose in _CONTENT_SIGNAL.get(label, ()):
            restrict(said, purpose, allowed)
    return said


def shown(value: str) -> str:
    """A value as quoted in a reason: one line, at most 200 characters."""
    value = " ".join(value.split())
    return value if len(value) <= _SHOWN else value[: _SHOWN - 1] + "…"
