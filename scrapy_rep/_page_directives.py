"""Page-level robots directives: ``<meta name="robots">`` and ``X-Robots-Tag``.

Scrapy-free. Follows Google's robots meta documentation: rules are
comma-separated, case-insensitive and whitespace tolerant; every tag or header
that applies to the crawler adds its rules (the most restrictive reading wins);
``none`` means ``noindex, nofollow``; an ``X-Robots-Tag`` value may scope rules
to one crawler with a ``botname:`` prefix. Bad input is ignored, never raised.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from parsel import Selector

from scrapy_rep import _clock


@dataclass(frozen=True)
class Directives:
    """The rules that apply to one crawler for one page (defaults: no restriction)."""

    noindex: bool = False
    nofollow: bool = False
    noarchive: bool = False
    nosnippet: bool = False
    noimageindex: bool = False
    notranslate: bool = False
    unavailable_after: datetime | None = None  # timezone-aware, UTC
    noai: bool = False  # not for AI training nor AI input (scrapy_rep.usage reads it)
    noimageai: bool = False  # the same for images

    @property
    def none(self) -> bool:
        """True when the page says neither index nor follow (``none`` or both rules)."""
        return self.noindex and self.nofollow

    def merge(self, other: Directives) -> Directives:
        """Both sets of rules at once: every restriction of either, the earliest expiry."""
        dates = [d for d in (self.unavailable_after, other.unavailable_after) if d is not None]
        flags = {name: getattr(self, name) or getattr(other, name) for name in _FLAG_FIELDS}
        return Directives(**flags, unavailable_after=min(dates, default=None))

    def expired(self, now: datetime | None = None) -> bool:
        """True once ``unavailable_after`` is past (``now`` defaults to the current UTC time)."""
        if self.unavailable_after is None:
            return False
        return (now or datetime.fromtimestamp(_clock.now(), timezone.utc)) >= self.unavailable_after


NO_DIRECTIVES = Directives()
_FLAG_FIELDS = tuple(f.name for f in fields(Directives) if f.name != "unavailable_after")

# rule name -> the Directives fields it sets (empty: a permission, restricts nothing)
_FLAGS: dict[str, tuple[str, ...]] = {
    "all": (),
    "index": (),
    "follow": (),
    "noindex": ("noindex",),
    "nofollow": ("nofollow",),
    "none": ("noindex", "nofollow"),
    "noarchive": ("noarchive",),
    "nocache": ("noarchive",),  # Bing's spelling of noarchive
    "nosnippet": ("nosnippet",),
    "noimageindex": ("noimageindex",),
    "notranslate": ("notranslate",),
    "indexifembedded": (),
    "noai": ("noai",),  # DeviantArt's convention (scrapy_rep.robotstxt._usage_labels)
    "noimageai": ("noimageai",),
}
# rules written "name: value"; in a header, any other "key:" followed by a rule names a crawler
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS = frozenset((*_DAYS, *(day[:3] for day in _DAYS)))
_BOT_TOKEN = re.compile(r"[a-z0-9_.-]+")
_WORD_SPLIT = re.compile(r"[\s;]+")


def _pieces(text: str) -> list[str]:
    """Comma-separated parts, with the comma of an RFC 822/850 date glued back."""
    raw = text.split(",")
    pieces: list[str] = []
    i = 0
    while i < len(raw):
        piece = raw[i].strip()
        i += 1
        key, _, value = piece.rpartition(":")
        # "unavailable_after: Wednesday, 03-Nov-21 15:00:00 GMT" was cut after the weekday
        if (
            key.strip().lower().endswith("unavailable_after")
            and value.strip().lower() in _WEEKDAYS
            and i < len(raw)
            and not _starts_with_rule(raw[i])
        ):
            piece = f"{piece}, {raw[i].strip()}"
            i += 1
        if piece:
            pieces.append(piece)
    return pieces


def _starts_with_rule(text: str) -> bool:
    first = _WORD_SPLIT.split(text.partition(":")[0].strip().lower(), maxsplit=1)[0]
    return first in _FLAGS or first in _VALUED


def _apply(text: str, user_agent: str | None, header: bool) -> Directives:
    """Rules in ``text`` for ``user_agent``; ``header`` enables ``botname:`` scopes."""
    if len(text) > MAX_RULES_CHARS:  # no rule is that long: the rest is not read
        cut = text.rfind(",", 0, MAX_RULES_CHARS + 1)
        text = text[: max(cut, 0)]
    agent = (user_agent or "").strip().lower()
    flags: set[str] = set()  # Directives fields set; one frozen object built at the end
    dates: list[datetime] = []
    applies = True  # unscoped rules apply to every crawler
    for piece in _pieces(text):
        rest = piece
        while rest:
            key, colon, value = rest.partition(":")
            name = key.strip().lower()
            if not colon:
                if applies:
                    # a lone word; also read "noindex nofollow" and "noindex;nofollow",
                    # a common mistake whose intent is plain
                    for word in _WORD_SPLIT.split(name):
                        flags.update(_FLAGS.get(word, ()))
                break
            if name in _VALUED:
                date = parse_date(value) if applies and name == "unavailable_after" else None
                if date is not None:
                    dates.append(date)
                break
            rest = value.strip()
            if header and _BOT_TOKEN.fullmatch(name) and _starts_with_rule(rest):
                # "examplebot: noindex, nofollow": the scope lasts to the next bot prefix
                applies = name == agent
                continue
            break  # an unknown "key: value" rule (max-snippet's future siblings): ignored
    if not flags and not dates:
        return NO_DIRECTIVES
    found = {name: name in flags for name in _FLAG_FIELDS}
    return Directives(**found, unavailable_after=min(dates, default=None))


def parse_rules(content: str) -> Directives:
    """The rules of one ``<meta>`` tag's ``content`` (whoever the tag names)."""
    return _apply(content, None, header=False)


def parse_header(value: str, *, user_agent: str | None) -> Directives:
    """The rules of one ``X-Robots-Tag`` value that apply to ``user_agent``: the
    unscoped ones, and those after its own ``botname:`` until the next prefix."""
    return _apply(value, user_agent, header=True)


def header_directives(values: Iterable[str], *, user_agent: str | None) -> Directives:
    """The ``X-Robots-Tag`` values of a response (the first :data:`MAX_TAGS`), combined."""
    result = NO_DIRECTIVES
    for value in itertools.islice(values, MAX_TAGS):
        result = result.merge(parse_header(value, user_agent=user_agent))
    return result


def parse_date(value: str) -> datetime | None:
    """``unavailable_after`` date in UTC, or None when unreadable: ISO 8601 or
    RFC 822 / RFC 850 / asctime; without a zone, UTC."""
    text = value.strip()
    if not text:
        return None
    date: datetime | None = None
    iso = text[:-1] + "+00:00" if text[-1:] in "Zz" else text
    try:
        date = datetime.fromisoformat(iso)
    except ValueError:
        try:
            date = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if date.tzinfo is None:
        date = date.replace(tzinfo=timezone.utc)
    try:
        return date.astimezone(timezone.utc)
    except (OverflowError, ValueError):  # an offset pushing year 1 or 9999 out of range
        return None


# The <head> ends at </head> or where <body> starts.
_HEAD_END = re.compile(r"</head[\s>]|<body[\s>]", re.IGNORECASE)
# What one page may cost, bounded (docs/page-directives.md, "What a page may cost").
# A head of inline styles and scripts is cheap to skip (text, not elements); pages
# carry tens of <meta> tags.
MAX_HEAD_CHARS = 4 * 1024 * 1024
MAX_META_TAGS = 1000
MAX_TAGS = 100  # tags of the names asked for, per page; X-Robots-Tag values, per response
MAX_RULES_CHARS = 4096  # of one tag's content or header value, cut after a comma


class MetaTags(list[tuple[str, str]]):
    """``(name, content)`` of a page's meta tags; :attr:`capped` says why some
    may be missing ("" when the whole head was read)."""

    capped: str = ""


def robots_meta_tags(html: str, *, names: Iterable[str] | None = None) -> MetaTags:
    """``(name, content)`` of the ``<meta>`` tags in an HTML page's ``<head>``.

    Names are lowercased; with ``names`` (lowercase), only tags of those names.
    The head is parsed only if it mentions ``<meta`` and one of ``names``: most
    pages carry no robots tag and cost a substring search. Broken markup is
    recovered from as browsers do; nothing raises. A hostile head (100,000 tags
    blocked a crawl for seconds) is read within the bounds above, and the
    result's ``capped`` says which one cut it.
    """
    tags = MetaTags()
    end = _HEAD_END.search(html, 0, MAX_HEAD_CHARS + 8)
    if end is not None and end.start() <= MAX_HEAD_CHARS:
        head = html[: end.start()]
    else:
        head = html[:MAX_HEAD_CHARS]
        if len(html) > MAX_HEAD_CHARS:
            tags.capped = f"its head is longer than {MAX_HEAD_CHARS >> 20} MiB: read that far"
    lowered = head.lower()
    if "<meta" not in lowered:
        return tags
    wanted = None if names is None else frozenset(names)
    if wanted is not None and not any(name in lowered for name in wanted):
        return tags
    cut = _after_meta_tags(lowered, MAX_META_TAGS)
    if cut is not None:
        head = head[:cut]
        tags.capped = f"more than {MAX_META_TAGS} <meta> tags in its head: the first read"
    try:
        # bytes, not str: lxml rejects str with an XML encoding declaration or lone surrogates
        selector = Selector(body=head.encode("utf-8", "replace"), encoding="utf-8", type="html")
        # lxml's own elements: no Python object per tag but for those kept
        for element in selector.root.iter("meta"):
            name, content = element.get("name"), element.get("content")
            if name is None or content is None:
                continue
            name = name.strip().lower()
            if wanted is not None and name not in wanted:
                continue
            if len(tags) == MAX_TAGS:
                tags.capped = f"more than {MAX_TAGS} meta tags of its names: the first read"
                break
            tags.append((name, content))
    except Exception:  # whatever lxml cannot recover from must not stop a crawl
        return tags
    return tags


def _after_meta_tags(lowered: str, count: int) -> int | None:
    """Where the ``count + 1``-th ``<meta`` of ``lowered`` starts; None if it has no more."""
    at = -1
    for _ in range(count + 1):
        at = lowered.find("<meta", at + 1)
        if at < 0:
            return None
    return at
