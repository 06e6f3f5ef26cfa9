"""Stop signals: an answer that says "not you", read from definitive markers only. No Scrapy.

A challenge page, a block or a price (HTTP 402) is neither content nor
permission (docs/stop-signals.md). :class:`Detector` reads headers first, a few
dict lookups: the whole cost on a plain answer; body markers only for the
statuses their rule names, in the first :data:`BODY_WINDOW` bytes, as literal
bytes (no decoding, no regex).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

__all__ = [
    "BODY_WINDOW",
    "KINDS",
    "RULES",
    "Detector",
    "Kind",
    "Rule",
    "StopSignal",
    "described",
    "user_rules",
]

Kind = Literal["challenge", "block", "payment"]
"""What the answer says: prove you are a browser / never / pay."""
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)
BODY_WINDOW: Final = 16 * 1024
"""Bytes of a body searched for a body marker."""
_MAX_PRICE = 64  # a longer crawler-price is not recorded
_MAX_X402 = 8 * 1024  # a longer PAYMENT-REQUIRED header is not decoded
Headers = Mapping[bytes, Any]
"""Scrapy's ``Headers`` (any case), or a dict with lowercase names."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One marker: all its parts must hold."""

    provider: str
    """Who sends it, as the log and the report name it ("Cloudflare")."""
    kind: Kind
    header: bytes | None = None
    """A header name, lowercase; None: no header part."""
    values: frozenset[bytes] | None = None
    """The header's values that count (compared stripped and lowercased); None: any value."""
    statuses: frozenset[int] | None = None
    """Statuses the rule applies to; None: any (header rules only)."""
    body: bytes | None = None
    """Literal bytes in the body's first BODY_WINDOW bytes."""
    source: str = ""
    """Where the marker is documented (docs/stop-signals.md)."""

    @property
    def marker(self) -> str:
        """The marker as a log line shows it: ``cf-mitigated: challenge``."""
        parts = []
        if self.statuses is not None and len(self.statuses) <= 3:
            parts.append("HTTP " + "/".join(str(status) for status in sorted(self.statuses)))
        if self.header is not None:
            name = self.header.decode("latin-1")
            if self.values is None:
                parts.append(name)
            else:
                shown = "|".join(sorted(value.decode("latin-1") for value in self.values))
                parts.append(f"{name}: {shown}")
        if self.body is not None:
            parts.append(f"body {self.body.decode('latin-1')!r}")
        return " + ".join(parts)


@dataclass(frozen=True, slots=True)
class StopSignal:
    """A response found to be a stop signal."""

    kind: Kind
    provider: str
    marker: str
    """What was seen: ``cf-mitigated: challenge``, ``HTTP 402 + crawler-price``..."""
    price: str | None = None
    """The offer's price as the site wrote it (``USD 0.01``), for a payment."""
    scheme: str | None = None
    """How to pay: ``crawler-price`` (Cloudflare pay per crawl), ``x402``; None if unknown."""


def _values(*values: str) -> frozenset[bytes]:
    return frozenset(value.encode("ascii") for value in values)


def _page(provider: str, kind: Kind, statuses: set[int], body: bytes, source: str) -> Rule:
    """A rule for a page that carries ``body`` in one of ``statuses``."""
    return Rule(provider, kind, statuses=frozenset(statuses), body=body, source=source)


_CF = (
    "https://developers.cloudflare.com/cloudflare-challenges/challenge-types/"
    "challenge-pages/detect-response/"
)
_AWS = (
    "https://docs.aws.amazon.com/waf/latest/developerguide/waf-captcha-and-challenge-actions.html"
)
_PPC = (
    "https://developers.cloudflare.com/ai-crawl-control/features/pay-per-crawl/"
    "use-pay-per-crawl-as-ai-owner/"
)
_X402 = "https://github.com/x402-foundation/x402 specs/transports-v2/http.md"
_PX = "HUMAN/PerimeterX block page (wafw00f's plugin)"
_VERCEL = "Vercel's firewall header, seen on 403 and 429 (rover-fetch, metascraper)"

RULES: Final[tuple[Rule, ...]] = (
    Rule("Cloudflare", "challenge", b"cf-mitigated", _values("challenge"), source=_CF),
    Rule("Vercel", "challenge", b"x-vercel-mitigated", _values("challenge"), source=_VERCEL),
    Rule("Vercel", "block", b"x-vercel-mitigated", _values("deny"), source=_VERCEL),
    Rule(
        "AWS WAF", "challenge", b"x-amzn-waf-action", _values("challenge", "captcha"), source=_AWS
    ),
    Rule(
        "Cloudflare pay per crawl",
        "block",
        b"crawler-error",
        _values("crawlerforbidden"),
        frozenset({403}),
        source=_PPC + "error-codes/",
    ),
    Rule(
        "DataDome",
        "challenge",
        b"x-datadome",
        None,
        frozenset({401, 403}),
        source="DataDome's header on its captcha/block answers (third-party detectors' tests)",
    ),
    _page("PerimeterX", "challenge", {403}, b"px-captcha", _PX),
    _page("PerimeterX", "challenge", {403}, b"perimeterx.net/whywasiblocked", _PX),
    _page(
        "Imperva",
        "block",
        {403},
        b"Incapsula incident ID",
        "Imperva (Incapsula) block page (crawlee's blocked-page markers, wafw00f)",
    ),
    # The interstitial loads the resource in a script tag; ordinary pages of
    # Imperva's sites load it from their analytics snippet, and robots.txt
    # files disallow it: neither is a challenge.
    _page(
        "Imperva",
        "challenge",
        {200, 403},
        b'<script src="/_Incapsula_Resource?',
        "Imperva (Incapsula) challenge page: its script tag (the robots.txt corpus)",
    ),
    _page(
        "Anubis",
        "challenge",
        {200, 401, 403},
        b"/.within.website/x/cmd/anubis/",
        "TecharoHQ/anubis: challenge pages load their scripts from this path "
        "(answered 200 by default, data/botPolicies.yaml)",
    ),
)
"""The built-in rules; 402s are read by :meth:`Detector.detect` itself."""


class Detector:
    """Reads a response's status, headers and body against rules (see the module docstring)."""

    __slots__ = ("_by_status", "_headers", "_names")

    def __init__(self, rules: Iterable[Rule] = RULES) -> None:
        self._headers: dict[bytes, list[Rule]] = {}  # any status: looked up on every answer
        self._by_status: dict[int, list[Rule]] = {}
        for rule in rules:
            if rule.statuses is None and rule.header is not None and rule.body is None:
                self._headers.setdefault(rule.header, []).append(rule)
            else:
                for status in rule.statuses or ():
                    self._by_status.setdefault(status, []).append(rule)
        # The names as a dict of headers may hold them: Scrapy's Headers keeps
        # them title-cased; a plain dict, lowercase.
        self._names: dict[bytes, bytes] = {}
        for name in self._headers:
            self._names[name] = self._names[name.title()] = name

    def detect(self, status: int, headers: Headers, body: bytes = b"") -> StopSignal | None:
        """The stop signal this answer is, or None."""
        if isinstance(headers, dict):  # one pass over its few keys instead of a lookup per rule
            present = [self._names[key] for key in self._names.keys() & headers.keys()]
        else:
            present = list(self._headers)
        for name in present:
            raw = headers.get(name)
            if raw:
                found = _match_value(self._headers[name], raw)
                if found is not None:
                    return _signal(found)
        if status == 402:
            return _payment(headers, body)
        rules = self._by_status.get(status)
        if rules:
            # A 2xx challenge page is a small interstitial: a longer 2xx body is
            # content, and is not searched (no work on ordinary pages).
            short = status >= 300 or len(body) <= BODY_WINDOW
            for rule in rules:
                if rule.header is not None:
                    raw = headers.get(rule.header)
                    if not raw or _match_value((rule,), raw) is None:
                        continue
                if rule.body is not None and (
                    not short
                    or body.find(rule.body, 0, BODY_WINDOW) < 0
                    or (status < 300 and not _markup(body))
                ):
                    continue
                return _signal(rule)
        return None


def _markup(body: bytes) -> bool:
    """The body is a page (its first byte past blanks and a BOM is ``<``): a
    2xx challenge is one; a robots.txt or JSON naming the marker's path is not."""
    start = body[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    return start.startswith(b"<")


def _match_value(rules: Iterable[Rule], raw: Any) -> Rule | None:
    value = raw.strip().lower() if isinstance(raw, bytes) else b""
    for rule in rules:
        if rule.values is None or value in rule.values:
            return rule
    return None


def _signal(rule: Rule) -> StopSignal:
    return StopSignal(rule.kind, rule.provider, rule.marker)


def _payment(headers: Headers, body: bytes) -> StopSignal:
    """A 402: Cloudflare pay per crawl's ``crawler-price``, x402's
    ``PAYMENT-REQUIRED`` header or JSON body, else a price of unknown terms."""
    price = headers.get(b"crawler-price")
    if price:
        shown = price.decode("latin-1").strip() if len(price) <= _MAX_PRICE else None
        what = "HTTP 402 + crawler-price"
        return StopSignal("payment", "Cloudflare pay per crawl", what, shown, "crawler-price")
    raw = headers.get(b"payment-required")
    if raw:
        offer = _x402_json(raw) if len(raw) <= _MAX_X402 else None
        return StopSignal(
            "payment", "x402", "HTTP 402 + PAYMENT-REQUIRED", _x402_price(offer), "x402"
        )
    window = body[:BODY_WINDOW]
    if b"x402Version" in window:
        offer = _json(window)
        return StopSignal("payment", "x402", "HTTP 402 + x402 body", _x402_price(offer), "x402")
    return StopSignal("payment", "unknown", "HTTP 402")


def _x402_json(raw: bytes) -> Any:
    try:
        return _json(base64.b64decode(raw.strip(), validate=False))
    except (binascii.Error, ValueError):
        return None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _x402_price(offer: Any) -> str | None:
    """``amount asset`` of the first accepted payment option, if readable."""
    if not isinstance(offer, Mapping):
        return None
    options = offer.get("accepts")
    first = options[0] if isinstance(options, list) and options else None
    if not isinstance(first, Mapping):
        return None
    amount = first.get("amount", first.get("maxAmountRequired"))
    if not isinstance(amount, (str, int)) or isinstance(amount, bool):
        return None
    asset = first.get("asset")
    network = first.get("network")
    parts = [str(amount)[:_MAX_PRICE]]
    if isinstance(asset, str):
        parts.append(asset[:_MAX_PRICE])
    if isinstance(network, str):
        parts.append(f"on {network[:_MAX_PRICE]}")
    return " ".join(parts)


def user_rules(raw: Any) -> tuple[Rule, ...]:
    """``REP_BLOCK_MARKERS`` (docs/reference.md) as rules; ValueError, with what
    is wrong, for anything else than its list of dicts (or their JSON)."""
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ValueError(f"expected a list of rules (dicts) or its JSON, got {raw!r}") from None
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"expected a list of rules (dicts), got {raw!r}")
    return tuple(_user_rule(item) for item in raw)


_USER_KEYS = frozenset({"name", "kind", "status", "header", "value", "body"})


def _user_rule(item: Any) -> Rule:
    if not isinstance(item, Mapping):
        raise ValueError(f"expected a dict for each rule, got {item!r}")
    unknown = set(item) - _USER_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in {item!r}")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"each rule needs a 'name' (str), got {item!r}")
    kind = item.get("kind", "challenge")
    if kind not in ("challenge", "block"):
        raise ValueError(f"'kind' must be 'challenge' or 'block', got {kind!r}")
    header, value, body = item.get("header"), item.get("value"), item.get("body")
    for key, part in (("header", header), ("value", value), ("body", body)):
        if part is not None and (not isinstance(part, str) or not part):
            raise ValueError(f"{key!r} must be a non-empty string, got {part!r}")
    if header is None and body is None:
        raise ValueError(f"each rule needs a 'header' or a 'body', got {item!r}")
    if value is not None and header is None:
        raise ValueError(f"'value' needs a 'header', got {item!r}")
    statuses = _statuses(item.get("status"))
    if body is not None and statuses is None:
        raise ValueError(f"a 'body' marker needs its 'status' codes, got {item!r}")
    return Rule(
        name.strip(),
        kind,
        header.strip().lower().encode("latin-1") if header else None,
        frozenset({value.strip().lower().encode("latin-1")}) if value else None,
        statuses,
        body.encode("utf-8") if body else None,
        source="REP_BLOCK_MARKERS",
    )


def _statuses(raw: Any) -> frozenset[int] | None:
    if raw is None:
        return None
    items = [raw] if isinstance(raw, int) else raw
    if not isinstance(items, (list, tuple, set, frozenset)) or not items:
        raise ValueError(f"'status' must be a list of HTTP status codes, got {raw!r}")
    for code in items:
        if not isinstance(code, int) or isinstance(code, bool) or not 100 <= code <= 599:
            raise ValueError(f"'status' must hold HTTP status codes (100-599), got {code!r}")
    return frozenset(items)


def described(signal: StopSignal) -> str:
    """``signal`` as a reason: ``challenge by Cloudflare (cf-mitigated: challenge)``,
    ``payment asked by Cloudflare pay per crawl (crawler-price USD 0.01)``."""
    if signal.kind == "payment":
        offer = f"{signal.scheme} {signal.price}" if signal.price else signal.marker
        return f"payment asked by {signal.provider} ({offer})"
    return f"{signal.kind} by {signal.provider} ({signal.marker})"
