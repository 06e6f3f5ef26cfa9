"""Our verdicts against Google's reference matcher, on real files and real URLs.

Every (site, url) of robots-bench-urls/site-urls.tsv whose site has
robots-corpus/<site>.txt is asked of both, with the token "examplebot"; so are
URLs made from the rules of every corpus file. They must agree, except where
RFC 9309 says otherwise than the reference's code. Each disagreement is
classified by a re-check that takes one such difference out of the picture
(for example: do both agree once percent-escapes play no part?); one that no
re-check explains fails the test.

Run as a script for the counts: ``python tests/test_google_agreement.py``
(``--agent`` for another token, ``--rules-per-file`` for more rule-derived URLs).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _corpus import corpus_dir, manifest, missing_message, require_corpus, site_urls, site_urls_path
from w3lib.url import safe_url_string

from scrapy_rep import RobotsTxt
from scrapy_rep.robotstxt import DEFAULT_MAX_SIZE

robotstxt = pytest.importorskip("robotstxt", reason="Google's reference (fast-robotstxt) missing")
from robotstxt.robots import _lib  # noqa: E402  (the C call, see GoogleMatcher)

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

AGENT = "examplebot"
MAX_SIZE = DEFAULT_MAX_SIZE  # what we read; the reference reads what it is given
RULES_PER_FILE = 10  # rule-derived URLs: rules sampled per file in the test (script: more)
SHOWN = 5  # unexplained disagreements printed

ROBOTS_TXT = "robots.txt is implicitly allowed (RFC 9309 §2.2.2)"
SIZE_LIMIT = "only the first 500 KiB are read (RFC 9309 §2.5)"
ESCAPES = "percent-escapes compared as RFC 9309 §2.2.2-2.2.3 say (the reference decodes every %XX)"
URL_PARSER = (
    "the reference's WHATWG URL parser rewrites the URL (drops an empty '?', reads \\ as /, "
    "escapes { }, resolves dot segments); RFC 9309 matches the path as given"
)
INDEX_HTML = "the reference's Allow: /d/index.html also allows /d/ (not RFC 9309 longest match)"
SEVERAL = "several of the above at once"


class GoogleMatcher:
    """Google's robots.txt matcher (C++ reference, through the fast-robotstxt binding).

    The binding's ``is_allowed()`` takes str and encodes it, which cannot carry
    the bytes of the corpus files that are not UTF-8; its C function takes bytes.
    """

    def __init__(self) -> None:
        self._matcher = robotstxt.RobotsMatcher()

    def allowed(self, body: bytes, url: str, agent: str = AGENT) -> bool:
        agent_bytes = agent.encode()
        url_bytes = url.encode("utf-8", "surrogateescape")
        return bool(
            _lib.robots_allowed_by_robots(
                self._matcher._ptr,
                body,
                len(body),
                agent_bytes,
                len(agent_bytes),
                url_bytes,
                len(url_bytes),
            )
        )


def ours(body: bytes, url: str, agent: str = AGENT) -> bool:
    return RobotsTxt.parse(body).allowed(url, user_agent=agent)


# -- re-checks: each takes one known difference out of the inputs ---------------------

_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_HIGH_OCTET = re.compile(rb"[\x80-\xff]")
_URL_SPECIAL = re.compile(rb"[*$]")
_BEFORE_PATH = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*:)?(?://[^/?#]*)?")
_INDEX_HTM = re.compile(rb"(?im)^([ \t]*allow[ \t]*:?[ \t]*[^\r\n#]*/index\.ht)m")


def split_url(url: str) -> tuple[str, str]:
    """(scheme and authority, path and query as written: no fragment, "/" at least)."""
    origin = _BEFORE_PATH.match(url).group()  # type: ignore[union-attr]
    path = url[len(origin) :].split("#", 1)[0]
    return origin, path if path.startswith("/") else "/" + path


def without_escapes(data: bytes, *, url: bool) -> bytes:
    """Escapes and non-ASCII octets spelt as ~XX, so that no side decodes or encodes
    anything; a URL's * and $ too (RFC 9309 §2.2.3: they match %2A and %24)."""
    data = _ESCAPE.sub(lambda m: b"~" + m[1].upper(), data)
    if url:
        data = _URL_SPECIAL.sub(lambda m: b"~%02X" % m[0][0], data)
    return _HIGH_OCTET.sub(lambda m: b"~%02X" % m[0][0], data)


def head_of(body: bytes, size: int = MAX_SIZE) -> bytes:
    """The first ``size`` bytes, without a last line cut short."""
    if len(body) <= size or body[size : size + 1] in (b"\n", b"\r"):
        return body[:size]
    head = body[:size]
    return head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]


def index_htm_spelt_out(body: bytes) -> bytes:
    """Allow lines' "/index.htm" as "/index.ht%6D": the reference decodes it back
    for matching, but no longer adds its extra "/d/$" rule."""
    return _INDEX_HTM.sub(rb"\1%6D", body)


Verdict = Callable[[bytes, str], bool]


def classify(
    google: GoogleMatcher,
    body: bytes,
    url: str,
    ours: Verdict | None = None,
    agent: str = AGENT,
) -> str | None:
    """Why ``ours`` (default: RobotsTxt) and the reference disagree on (body, url) for
    ``agent``, or None if no re-check explains it."""
    if ours is None:
        ours = lambda body, url: RobotsTxt.parse(body).allowed(url, user_agent=agent)  # noqa: E731

    def theirs(body: bytes, url: str) -> bool:
        return google.allowed(body, url, agent)

    expected = ours(body, url)
    origin, path = split_url(url)
    if path.split("?", 1)[0] == "/robots.txt" and expected:
        return ROBOTS_TXT
    if len(body) > MAX_SIZE and theirs(head_of(body), url) == expected:
        return SIZE_LIMIT
    body_plain = without_escapes(body.removeprefix(b"\xef\xbb\xbf"), url=False)
    path_plain = without_escapes(path.encode("utf-8", "surrogateescape"), url=True).decode()
    url_plain = origin + path_plain
    if theirs(body_plain, url_plain) == ours(body_plain, url_plain):
        return ESCAPES
    if theirs(body, path) == expected:
        return URL_PARSER
    if theirs(index_htm_spelt_out(body), url) == expected:
        return INDEX_HTML
    body_all = index_htm_spelt_out(without_escapes(head_of(body), url=False))
    if theirs(body_all, path_plain) == ours(body_all, path_plain):
        return SEVERAL
    return None


# -- the comparison ---------------------------------------------------------------


@dataclass
class Tally:
    checks: int = 0
    agreements: int = 0
    classified: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    unexplained: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def report(self, title: str, examples: int = 0) -> str:
        lines = [
            f"{title}: {self.checks} checks, {self.agreements} agreements, "
            f"{sum(self.classified.values())} classified differences, "
            f"{len(self.unexplained)} unexplained ({self.seconds:.1f} s)"
        ]
        for name, count in self.classified.most_common():
            lines.append(f"  {count:6d}  {name}")
            lines += [f"            e.g. {case}" for case in self.examples[name][:examples]]
        lines += [f"  unexplained: {case}" for case in self.unexplained[:SHOWN]]
        return "\n".join(lines)


def compare(cases: Iterable[tuple[str, bytes, list[str]]], agent: str = AGENT) -> Tally:
    """Ask both matchers every (file, body, urls) case; classify the disagreements."""
    google = GoogleMatcher()
    tally = Tally()
    started = time.perf_counter()
    for name, body, urls in cases:
        robots = RobotsTxt.parse(body)
        for url in urls:
            tally.checks += 1
            verdict = robots.allowed(url, user_agent=agent)
            if verdict == google.allowed(body, url, agent):
                tally.agreements += 1
                continue
            reason = classify(google, body, url, agent=agent)
            case = f"{name} {url!r}: ours {verdict}, Google {not verdict}"
            if reason is None:
                tally.unexplained.append(case)
            else:
                tally.classified[reason] += 1
                tally.examples[reason].append(case)
    tally.seconds = time.perf_counter() - started
    return tally


def site_url_cases(directory: Path) -> Iterator[tuple[str, bytes, list[str]]]:
    """(file, body, its site's URLs) for every site of site-urls.tsv with a corpus file."""
    urls: dict[str, list[str]] = defaultdict(list)
    for site, url in site_urls(site_urls_path()):
        urls[site].append(url)
    for site, site_list in urls.items():
        path = directory / f"{site}.txt"
        if path.is_file():
            yield path.name, path.read_bytes(), site_list


_RULE_VALUE = re.compile(r"(?im)^[ \t]*(?:allow|disallow)[ \t]*:[ \t]*([^#\s]+)")


def rule_url_cases(directory: Path, rules_per_file: int) -> Iterator[tuple[str, bytes, list[str]]]:
    """(file, body, URLs made from an even sample of its rules) for every corpus file:
    the rule's path with * as "x", then with one more character, below it, and
    escaped as Scrapy escapes request URLs (w3lib's safe_url_string)."""
    for entry in manifest(directory):
        body = entry.path.read_bytes()
        text = body.decode("utf-8", "replace")
        values = _RULE_VALUE.findall(text.replace("\r", "\n"))
        step = max(1, len(values) // rules_per_file)
        urls = []
        for value in values[::step][:rules_per_file]:
            path = value.removesuffix("$").replace("*", "x")
            path = path if path.startswith("/") else "/" + path
            base = f"https://{entry.site}{path}"
            urls += [base, base + "x", base + "/a?b=1"]
            requested = safe_url_string(base)  # the URL as a Scrapy Request holds it
            if requested != base:
                urls.append(requested)
        yield entry.filename, body, urls


# -- tests -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def directory() -> Path:
    return require_corpus()


@pytest.mark.corpus
def test_agrees_with_google_on_every_site_url(directory: Path) -> None:
    """All (site, url) pairs of site-urls.tsv (105,221 with a corpus file): every
    disagreement with Google's reference is one RFC 9309 decides otherwise."""
    tally = compare(site_url_cases(directory))
    assert tally.checks > 100_000
    assert not tally.unexplained, tally.report("site URLs")


@pytest.mark.corpus
def test_agrees_with_google_on_rule_derived_urls(directory: Path) -> None:
    """URLs made from an even sample of each corpus file's own rules (10 per file):
    every disagreement is one RFC 9309 decides otherwise."""
    tally = compare(rule_url_cases(directory, RULES_PER_FILE))
    assert tally.checks > 30_000
    assert not tally.unexplained, tally.report("rule-derived URLs")


GOOGLE_DIFFERS = [
    ("User-agent: *\nDisallow: /\n", "https://example.com/robots.txt", ROBOTS_TXT),
    # Both readings of §2.2.2 must allow: an Allow escaped on one side only does not.
    ("User-agent: *\nDisallow: /\nAllow: /a%2Fb\n", "https://example.com/a/b", ESCAPES),
    ("User-agent: *\nDisallow: /w/\nAllow: /w/A:B\n", "https://example.com/w/A%3AB", ESCAPES),
    ("User-agent: *\nDisallow: /%61b\nAllow: /abc\n", "https://example.com/abcd", ESCAPES),
    ("User-agent: *\nDisallow: /a/./b\n", "https://example.com/a/./b", URL_PARSER),
]


@pytest.mark.parametrize(("body", "url", "reason"), GOOGLE_DIFFERS)
def test_known_differences_are_classified(body: str, url: str, reason: str) -> None:
    """Where RFC 9309 and the reference's code part ways, the re-checks name why.

    e.g. Disallow: / + Allow: /a%2Fb and /a/b: the reference decodes %2F, so its
    Allow matches; one reading of RFC 9309 keeps %2F apart, and we fetch only what
    both readings allow.
    """
    google = GoogleMatcher()
    data = body.encode()
    assert ours(data, url) != google.allowed(data, url), "the reference no longer differs here"
    assert classify(google, data, url) == reason


# Every printable ASCII character, raw on one side and escaped (either hex case)
# on the other, in the rule shapes that matter: prefix, anchored, after '*', and
# an Allow under Disallow: /.
ESCAPE_SHAPES = {
    "prefix": ("Disallow: /a{rule}b", "/a{url}b/c"),
    "anchored": ("Disallow: /a{rule}b$", "/a{url}b"),
    "wildcard": ("Disallow: /*{rule}b", "/x/a{url}b"),
    "allow": ("Disallow: /\nAllow: /a{rule}b", "/a{url}b/c"),
    "allow-wildcard": ("Disallow: /\nAllow: /*{rule}b", "/x/a{url}b"),
}


def one_side_escaped_cases() -> Iterator[tuple[str, str]]:
    for code in range(0x20, 0x7F):
        char = chr(code)
        spellings = {char, f"%{code:02X}", f"%{code:02x}"}
        for rule_shape, url_shape in ESCAPE_SHAPES.values():
            for rule, url in ((a, b) for a in spellings for b in spellings if a != b):
                if (rule == char and char in "# \t*$") or (url == char and char in "# "):
                    continue  # raw, these are no part of a rule value or of a path
                body = f"User-agent: *\n{rule_shape.format(rule=rule)}\n"
                yield body, "https://example.com" + url_shape.format(url=url)


def test_never_fetches_what_the_reference_or_protego_would_not_when_one_side_is_escaped() -> None:
    """RFC 9309 §2.2.2, where it reads two ways (a character escaped in the rule
    or the URL only): we never fetch what Google's reference would not, except
    where its URL parser reads a raw '\\' as '/', nor what Protego would not."""
    protego = pytest.importorskip("protego")
    google = GoogleMatcher()
    fetched_alone = []
    cases = list(one_side_escaped_cases())
    for body, url in cases:
        if not ours(body.encode(), url):
            continue
        if not google.allowed(body.encode(), url) and "\\" not in url:
            fetched_alone.append(f"Google: {body!r} {url}")
        if not protego.Protego.parse(body).can_fetch(url, AGENT):
            fetched_alone.append(f"Protego: {body!r} {url}")
    assert len(cases) > 1500
    assert not fetched_alone, "\n".join(fetched_alone[:SHOWN])


def test_size_limit_difference_is_classified() -> None:
    """A rule after 512,000 bytes: the reference (given the whole body) applies it,
    we do not (RFC 9309 §2.5); the re-check with the first 500 KiB explains it."""
    body = b"User-agent: *\n" + b"#" * MAX_SIZE + b"\nDisallow: /late\n"
    google = GoogleMatcher()
    assert ours(body, "/late")
    assert not google.allowed(body, "/late")
    assert classify(google, body, "/late") == SIZE_LIMIT


def test_an_unexplained_difference_is_not_classified() -> None:
    """The re-checks explain only what they take out, not any disagreement.

    A matcher that ignores Disallow: /x disagrees with the reference on /x; no
    re-check explains that, so it would be reported.
    """
    google = GoogleMatcher()
    body = b"User-agent: *\nDisallow: /x\n"

    def ignores_rules(body: bytes, url: str) -> bool:
        return True

    assert google.allowed(body, "https://example.com/x") is False
    assert classify(google, body, "https://example.com/x", ignores_rules) is None


# -- script mode --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", default=AGENT, help="product token (default: examplebot)")
    parser.add_argument("--rules-per-file", type=int, default=100, metavar="N")
    parser.add_argument("--examples", type=int, default=3, metavar="N", help="shown per class")
    args = parser.parse_args(argv)
    try:
        directory = corpus_dir()
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    for needed in (directory / "MANIFEST.tsv", site_urls_path()):
        if not needed.is_file():
            print(missing_message(needed), file=sys.stderr)
            return 2
    unexplained = 0
    for title, cases in (
        ("site URLs", site_url_cases(directory)),
        (f"rule-derived URLs ({args.rules_per_file} rules/file)",
         rule_url_cases(directory, args.rules_per_file)),
    ):  # fmt: skip
        tally = compare(cases, args.agent)
        print(tally.report(title, args.examples))
        unexplained += len(tally.unexplained)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
