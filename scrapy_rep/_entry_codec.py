"""An :class:`~scrapy_rep.policy.Entry` as JSON and back, for Redis
(:mod:`scrapy_rep.cluster.rules`) and the state directory (:mod:`scrapy_rep.state`).

The rules' body is kept beside the text and parsed again when read back (the
Crawl-delay a crawl applies depends on its own settings, so it is not kept).
"""

from __future__ import annotations

import json
from typing import Literal

from scrapy_rep.policy import OUTCOMES, Entry
from scrapy_rep.robotstxt import RobotsTxt

Rules = Literal["body", "allow_all", "none"]
"""How an entry's rules are kept: its robots.txt body (beside the text), none
needed (everything allowed), or none at all (unreachable)."""


def encode(entry: Entry, rules: Rules) -> str:
    """``entry`` as compact JSON (its ``robots`` as ``rules`` says)."""
    return json.dumps(
        {
            "rules": rules,
            "outcome": entry.outcome,
            "expires": entry.expires,
            "fetched": entry.fetched,
            "failures": entry.failures,
            "reason": entry.reason,
            "truncated": entry.truncated,
            "status": entry.status,
            "url": entry.url,
            "redirects": entry.redirects,
            "size": entry.size,
            "etag": entry.etag,
            "last_modified": entry.last_modified,
            "validators_url": entry.validators_url,
            "sha256": entry.sha256,
        },
        separators=(",", ":"),
    )


def decode(meta: bytes | str, body: bytes | None, base: str | None, max_size: int) -> Entry | None:
    """The entry :func:`encode` wrote, its rules parsed from ``body`` (read
    from ``base``, else from the URL the entry names); None when its rules are
    in a body that is missing. Raises ValueError, KeyError or TypeError for
    anything else unreadable."""
    data = json.loads(meta)
    rules = data["rules"]
    robots: RobotsTxt | None
    if rules == "body":
        if body is None:
            return None
        # (relative Sitemap lines resolve against the URL the body came from)
        url = base or data.get("validators_url") or data["url"] or None
        robots = RobotsTxt.parse(body, url=url, max_size=max_size)
    elif rules == "allow_all":
        robots = RobotsTxt.allow_all()
    elif rules == "none":
        robots = None
    else:
        raise ValueError(f"unknown rules {rules!r}")
    outcome = data["outcome"]
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    status = data["status"]
    return Entry(
        robots,
        outcome,
        float(data["expires"]),
        float(data["fetched"]),
        failures=int(data["failures"]),
        reason=str(data["reason"]),
        truncated=bool(data["truncated"]),
        status=None if status is None else int(status),
        url=str(data["url"]),
        redirects=int(data["redirects"]),
        size=int(data["size"]),
        # written since validators were kept: absent from older state
        etag=str(data.get("etag", "")),
        last_modified=str(data.get("last_modified", "")),
        validators_url=str(data.get("validators_url", "")),
        sha256=str(data.get("sha256", "")) if rules == "body" else "",
    )
