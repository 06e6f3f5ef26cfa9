"""Stop-signal rules (scrapy_rep.stop_signals): each rule, and the negative set.

Scrapy's own ``Headers`` carry the headers, as in a crawl (case-insensitive).
"""

from __future__ import annotations

import base64
import json
import timeit

import pytest
from _corpus import manifest, require_corpus
from scrapy.http import Headers

from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.stop_signals import BODY_WINDOW, RULES, Detector, user_rules

pytestmark = pytest.mark.reactor_free

DETECT = Detector().detect
CHALLENGE_PAGE = b"<html><head><title>Just a moment...</title></head><body></body></html>"


def h(**headers: str) -> Headers:
    return Headers({name.replace("_", "-"): value for name, value in headers.items()})


@pytest.mark.parametrize(
    ("status", "headers", "body", "kind", "provider"),
    [
        (403, {"cf_mitigated": "challenge"}, CHALLENGE_PAGE, "challenge", "Cloudflare"),
        (503, {"CF-Mitigated": " Challenge "}, b"", "challenge", "Cloudflare"),
        (200, {"cf_mitigated": "challenge"}, b"", "challenge", "Cloudflare"),
        (403, {"x_vercel_mitigated": "challenge"}, b"", "challenge", "Vercel"),
        (429, {"x_vercel_mitigated": "challenge"}, b"", "challenge", "Vercel"),
        (403, {"x_vercel_mitigated": "deny"}, b"", "block", "Vercel"),
        (202, {"x_amzn_waf_action": "challenge"}, b"<html>", "challenge", "AWS WAF"),
        (405, {"x_amzn_waf_action": "captcha"}, b"<html>", "challenge", "AWS WAF"),
        (403, {"crawler_error": "CrawlerForbidden"}, b"", "block", "Cloudflare pay per crawl"),
        (403, {"x_datadome": "protected"}, b"", "challenge", "DataDome"),
        (401, {"x_datadome": "protected"}, b"", "challenge", "DataDome"),
        (403, {}, b'<div id="px-captcha"></div>', "challenge", "PerimeterX"),
        (403, {}, b"see https://www.perimeterx.net/whywasiblocked", "challenge", "PerimeterX"),
        (403, {"x_iinfo": "1-2-3"}, b"Incapsula incident ID: 123", "block", "Imperva"),
        (
            200,
            {},
            b'<html>\n<head>\n<META NAME="robots" CONTENT="noindex,nofollow">\n'
            b'<script src="/_Incapsula_Resource?SWJIYLWA=5074a744e2e3d891814e9a2dace20bd4">',
            "challenge",
            "Imperva",
        ),
        (
            200,
            {},
            b'<script src="/.within.website/x/cmd/anubis/static/js/main.mjs"></script>',
            "challenge",
            "Anubis",
        ),
    ],
)
def test_each_rule(
    status: int, headers: dict[str, str], body: bytes, kind: str, provider: str
) -> None:
    """Each built-in rule's marker, with the status it comes with."""
    signal = DETECT(status, h(**headers), body)
    assert signal is not None
    assert (signal.kind, signal.provider) == (kind, provider)


def test_every_rule_has_a_source() -> None:
    assert all(rule.source for rule in RULES)


def test_marker_text_for_the_log() -> None:
    signal = DETECT(403, h(cf_mitigated="challenge"))
    assert signal is not None
    assert signal.marker == "cf-mitigated: challenge"


NEGATIVE = [
    pytest.param(
        200,
        {
            "content_security_policy": "default-src 'self'; script-src 'self' "
            "https://www.google.com/recaptcha/ https://cdnjs.cloudflare.com/"
        },
        b"<html>news</html>",
        id="csp-naming-cloudflare-and-recaptcha",
    ),
    pytest.param(200, {"cf_ray": "8a1b2c3d4e5f-AMS"}, b"<html></html>", id="cf-ray"),
    pytest.param(403, {"cf_ray": "8a1b2c3d4e5f-AMS"}, b"Forbidden", id="cf-ray-on-403"),
    pytest.param(200, {"server": "cloudflare"}, b"<html></html>", id="server-cloudflare"),
    pytest.param(200, {"x_datadome": "protected"}, b"<html></html>", id="x-datadome-on-200"),
    pytest.param(
        200,
        {},
        b"<article>Anubis weighs the soul of incoming requests; sites such as "
        b"git.kernel.org put Anubis in front of their forges.</article>",
        id="article-about-anubis",
    ),
    pytest.param(200, {"x_iinfo": "1-2-3"}, b"<html></html>", id="x-iinfo-alone"),
    pytest.param(404, {"cf_mitigated": "block"}, b"", id="cf-mitigated-other-value"),
    pytest.param(403, {}, b"Forbidden", id="plain-403"),
    pytest.param(200, {}, b"<div id='px-captcha'>", id="px-captcha-on-200"),
    pytest.param(429, {"retry_after": "10"}, b"", id="plain-429"),
    # robots.txt files and pages of sites behind Imperva or Anubis (the first
    # two as the corpus has them: myanimelist.net, www.amadeus.net)
    pytest.param(
        200,
        {},
        b"User-agent: *\nDisallow: /admin/\nDisallow: /_Incapsula_Resource\n",
        id="robots-txt-disallowing-incapsula",
    ),
    pytest.param(
        200,
        {},
        b"<!doctype html><html><head><script>var _analytics_scr = document.createElement"
        b"('script'); _analytics_scr.src = '/_Incapsula_Resource?SWJIYLWA=719d34d31c8e3a6e"
        b"6fffd425f7e032f3&ns=1&cb=724680361';</script></head><body>Cheap flights</body></html>",
        id="page-with-incapsula-analytics",
    ),
    pytest.param(
        200,
        {},
        b"User-agent: *\nDisallow: /.within.website/x/cmd/anubis/\n",
        id="robots-txt-disallowing-anubis",
    ),
]


@pytest.mark.parametrize(("status", "headers", "body"), NEGATIVE)
def test_negative_set(status: int, headers: dict[str, str], body: bytes) -> None:
    """The presence of a WAF is not action by a WAF: none of these is a signal."""
    assert DETECT(status, h(**headers), body) is None


def test_body_markers_only_in_the_first_16_kib() -> None:
    px = b"px-captcha"
    assert DETECT(403, h(), b"x" * (BODY_WINDOW - len(px)) + px) is not None
    assert DETECT(403, h(), b"x" * BODY_WINDOW + px) is None


def test_a_long_2xx_page_is_content() -> None:
    """An article longer than 16 KiB that quotes Anubis's script path is not a challenge."""
    marker = b'<script src="/.within.website/x/cmd/anubis/'
    assert DETECT(200, h(), marker + b"x" * (BODY_WINDOW - len(marker))) is not None
    assert DETECT(200, h(), marker + b"x" * BODY_WINDOW) is None


def test_no_robots_txt_of_the_corpus_is_a_stop_signal_but_a_challenge_page() -> None:
    """2,166 real robots.txt bodies answered 200: one is an Imperva challenge page
    (www.hertz.com's, served at /robots.txt); myanimelist.net's robots.txt,
    which disallows /_Incapsula_Resource, and an HTML page loading Imperva's
    analytics (www.amadeus.net) were read as challenges before."""
    files = manifest(require_corpus())
    assert len(files) == 2166
    found = {}
    for file in files:
        signal = DETECT(200, h(), file.path.read_bytes())
        if signal is not None:
            found[file.filename] = signal.provider
    assert found == {"www.hertz.com.txt": "Imperva"}


def test_402_crawler_price() -> None:
    signal = DETECT(402, h(crawler_price="USD 0.01"))
    assert signal is not None
    assert (signal.kind, signal.price, signal.scheme) == ("payment", "USD 0.01", "crawler-price")


def test_402_crawler_price_too_long_is_not_recorded() -> None:
    signal = DETECT(402, h(crawler_price="USD " + "9" * 100))
    assert signal is not None
    assert signal.scheme == "crawler-price"
    assert signal.price is None


X402 = {
    "x402Version": 2,
    "accepts": [{"scheme": "exact", "network": "base", "amount": "10000", "asset": "USDC"}],
}


def test_402_x402_header() -> None:
    encoded = base64.b64encode(json.dumps(X402).encode()).decode()
    signal = DETECT(402, h(payment_required=encoded))
    assert signal is not None
    assert (signal.scheme, signal.price) == ("x402", "10000 USDC on base")


def test_402_x402_body() -> None:
    signal = DETECT(402, h(), json.dumps(X402).encode())
    assert signal is not None
    assert signal.scheme == "x402"
    assert signal.price == "10000 USDC on base"


@pytest.mark.parametrize("value", ["!!!", base64.b64encode(b"[1, 2").decode(), "e30=", "W10="])
def test_402_x402_unreadable_terms(value: str) -> None:
    signal = DETECT(402, h(payment_required=value))
    assert signal is not None
    assert signal.scheme == "x402"
    assert signal.price is None


def test_402_without_terms() -> None:
    signal = DETECT(402, h(), b"pay up")
    assert signal is not None
    assert (signal.kind, signal.provider, signal.price, signal.scheme) == (
        "payment",
        "unknown",
        None,
        None,
    )


def test_user_rules() -> None:
    detect = Detector(
        RULES
        + user_rules(
            [
                {"name": "Acme WAF", "header": "X-Acme-Block", "value": "yes", "kind": "block"},
                {"name": "Acme page", "status": [403], "body": "acme-denied"},
            ]
        )
    ).detect
    block = detect(200, h(x_acme_block="YES"))
    assert block is not None
    assert (block.provider, block.kind) == ("Acme WAF", "block")
    assert detect(200, h(x_acme_block="no")) is None
    page = detect(403, h(), b"<p>acme-denied</p>")
    assert page is not None
    assert page.kind == "challenge"
    assert detect(200, h(), b"<p>acme-denied</p>") is None


def test_user_rules_as_json() -> None:
    (rule,) = user_rules('[{"name": "A", "header": "x-a"}]')
    assert rule.header == b"x-a"
    assert rule.values is None


@pytest.mark.parametrize(
    "raw",
    [
        {"name": "x"},
        [{"name": "x"}],
        [{"name": "x", "body": "y"}],
        [{"name": "x", "header": "h", "kind": "payment"}],
        [{"name": "x", "header": "h", "regex": ".*"}],
        [{"name": "x", "value": "v"}],
        [{"name": "x", "header": "h", "status": ["403"]}],
        [{"header": "h"}],
        "not json",
        [1],
    ],
)
def test_bad_user_rules(raw: object) -> None:
    with pytest.raises(ValueError, match=r"."):  # each says what is wrong
        user_rules(raw)


def test_cost_on_a_plain_response_is_tiny() -> None:
    """A plain 200 costs a few header lookups (printed; never asserted on speed)."""
    headers = h(content_type="text/html", server="nginx")
    body = b"<html>" + b"x" * 50_000
    runs = 20_000
    per = timeit.timeit(lambda: DETECT(200, headers, body), number=runs) / runs
    print(f"detect() on a plain 200: {per * 1e6:.2f} us")
    assert DETECT(200, headers, body) is None


# -- the settings and the robots.txt outcome (Scrapy-free parts) -------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REP_ON_PAYMENT", "pay"),
        ("REP_CHALLENGE_PAUSE", 0),
        ("REP_CHALLENGE_GIVE_UP", 0),
        ("REP_BLOCK_AFTER", -1),
        ("REP_BLOCK_MARKERS", [{"name": "x"}]),
        ("REP_STOP_SIGNALS", "maybe"),
    ],
)
def test_bad_settings_stop_the_crawl_at_start(name: str, value: object) -> None:
    with pytest.raises(InvalidSetting, match=name):
        Config.from_settings({name: value})


def test_the_max_pause_is_at_least_the_pause() -> None:
    with pytest.raises(InvalidSetting, match="REP_CHALLENGE_MAX_PAUSE"):
        Config.from_settings({"REP_CHALLENGE_PAUSE": 100, "REP_CHALLENGE_MAX_PAUSE": 50})


def test_defaults() -> None:
    config = Config.from_settings({})
    assert (config.stop_signals, config.challenge_pause, config.challenge_max_pause) == (
        True,
        300.0,
        3600.0,
    )
    assert (config.challenge_give_up, config.block_after, config.on_payment) == (
        3,
        20,
        "stop_origin",
    )


POLICY = Config.from_settings({"REP_RETRY_MIN": 60, "REP_RETRY_MAX": 3600}).policy


def test_a_challenged_robots_txt_backs_off_as_an_unreachable_one() -> None:
    """RFC 9309 §2.3.1.4 applied: no rules learnt, asked again after 60 s, 120 s..."""
    first = POLICY.challenged("challenge by Cloudflare", now=1000.0)
    assert (first.robots, first.outcome, first.failures) == (None, "challenged", 1)
    assert first.expires == 1060.0
    second = POLICY.challenged("challenge by Cloudflare", now=1060.0, previous=first)
    assert (second.failures, second.expires) == (2, 1060.0 + 120.0)
    unreachable = POLICY.on_error("HTTP 503", now=1180.0, previous=second)
    assert unreachable.failures == 3  # one outage, whatever its answers


def test_a_challenge_keeps_the_last_good_rules() -> None:
    good = POLICY.on_response(
        200, b"User-agent: *\nDisallow: /x\n", url="http://a/robots.txt", now=0.0
    )
    entry = POLICY.challenged("challenge", now=100.0, previous=good)
    assert entry.robots is good.robots
    assert entry.stale
    assert entry.failed
    assert not entry.ruleless
    too_old = POLICY.challenged("challenge", now=31 * 86_400.0, previous=good)
    assert too_old.robots is None
