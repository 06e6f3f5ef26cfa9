"""``response.meta["rep_provenance"]``: where each response's verdict came from
(JSON-safe; docs/evidence.md lists its fields).

The robots.txt part is built once per origin and fetch, then copied; per
request it costs a small dict around the middleware's own :meth:`RobotsTxt.decide`.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy_rep import _clock
from scrapy_rep.cache import lru_put
from scrapy_rep.evidence._warc import warc_date
from scrapy_rep.origin import ROBOTS_PATH
from scrapy_rep.policy import CHALLENGED, PARSED, UNREACHABLE
from scrapy_rep.robotstxt import Decision
from scrapy_rep.robotstxt._groups import parsed_bytes

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_rep.config import Config
    from scrapy_rep.evidence._recorder import Evidence
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry

__all__ = ["PROVENANCE_META", "Provenance", "unchecked"]

PROVENANCE_META = "rep_provenance"
_LET_THROUGH = Decision(True)

logger = logging.getLogger(__name__)


def unchecked(reason: str) -> dict[str, Any]:
    """The provenance of a request robots.txt was not applied to."""
    now = warc_date(_clock.now())
    return {"origin": None, "decided_at": now, "checked": False, "reason": reason}


class Provenance:
    """Builds each request's provenance; told of every robots.txt fetch."""

    def __init__(self, config: Config, evidence: Evidence | None) -> None:
        self._token = config.user_agent
        self._max_size = config.max_size
        self._bound = config.cache_max_origins
        self._evidence = evidence
        # The fetch each origin's rules were read from (kept while stale rules serve).
        self._rules_from: OrderedDict[Origin, dict[str, Any]] = OrderedDict()
        # The archived answer of a fetch that gave no rules (a challenge, a 404, a
        # 5xx): the verdict rests on it, so the provenance names its record.
        self._answered: OrderedDict[Origin, tuple[Entry, dict[str, Any]]] = OrderedDict()
        self._parts: OrderedDict[Origin, tuple[Entry, dict[str, Any]]] = OrderedDict()
        self._second = (-1, "")  # the last whole second stamped, as text

    def _stamp(self, now: float) -> str:
        """warc_date(now), its date and time formatted once a second (every request pays it)."""
        second = int(now)
        if second != self._second[0]:
            self._second = (second, warc_date(second)[:-8])
        return f"{self._second[1]}.{int((now - second) * 1_000_000):06d}Z"

    # -- fetches ------------------------------------------------------------------

    def robots_fetched(self, origin: Origin, entry: Entry, response: Response | None) -> None:
        """A robots.txt fetch ended (``response``: its last answer, None when
        none came or the rules came from the cluster). Never raises: what the
        crawl obeys does not depend on it."""
        try:
            self._fetched(origin, entry, response)
        except Exception:
            logger.exception("Provenance of %s not recorded", origin.robots_url)

    def _fetched(self, origin: Origin, entry: Entry, response: Response | None) -> None:
        robots = entry.robots
        ruleless = robots is None or entry.ruleless
        parsed = sha = None
        read_anew = response is not None and 200 <= response.status < 300
        if entry.outcome == PARSED and read_anew and robots is not None:
            assert response is not None
            parsed = parsed_bytes(response.body, self._max_size)
            sha = hashlib.sha256(parsed).hexdigest()
        line = None
        if self._evidence is not None:
            line = self._evidence.finished(
                ROBOTS_PATH, origin.text, self._reading(origin, entry, parsed, sha)
            )
        if sha is not None:
            fetched_at = (line or {}).get("fetched_at") or warc_date(entry.fetched)
            found = {
                "url": entry.url or origin.robots_url,
                "parsed_sha256": sha,
                "fetched_at": fetched_at,
                "warc_record_id": line.get("warc_record_id") if line else None,
                "warc_file": line.get("warc_file") if line else None,
            }
            lru_put(self._rules_from, origin, found, self._bound)
        elif ruleless:
            self._rules_from.pop(origin, None)
        # else the rules were kept from an earlier fetch (stale, or not modified)
        if sha is None and ruleless and line and line.get("warc_record_id"):
            answer = {key: line.get(key) for key in ("fetched_at", "warc_record_id", "warc_file")}
            lru_put(self._answered, origin, (entry, answer), self._bound)
        else:
            self._answered.pop(origin, None)
        self._parts.pop(origin, None)

    def _reading(
        self, origin: Origin, entry: Entry, parsed: bytes | None, sha: str | None
    ) -> dict[str, Any]:
        """scrapy-rep's reading of a fetch, for the evidence archive."""
        token, robots = self._token, entry.robots
        reading: dict[str, Any] = {
            "outcome": entry.outcome,
            "reason": entry.reason,
            "expires": warc_date(entry.expires),
            "redirects": entry.redirects,
            "token": token,
            "parsed_sha256": sha,
            "parsed_bytes": len(parsed) if parsed is not None else None,
            "max_size": self._max_size,
        }
        if sha is None and robots is not None and not entry.ruleless:
            reading["rules_from"] = self._rules_from.get(origin)  # kept, not read anew
        if robots is not None and parsed is not None:
            root = origin.text + "/"
            delays = robots.delays(user_agent=token)
            reading.update(
                groups=list(robots.decide(root, user_agent=token).agents),
                crawl_delay=_line(delays.crawl_delay),
                request_rate=_line(delays.request_rate),
                sitemaps=list(robots.sitemaps),
                usage_at_root={
                    purpose: {
                        "allowed": found.allowed,
                        "lines": [{"line": u.line, "text": u.text} for u in found.lines],
                    }
                    for purpose, found in robots.decide_usage(root, user_agent=token).items()
                },
            )
        return reading

    # -- requests -----------------------------------------------------------------

    def decided(
        self, origin: Origin, entry: Entry, found: Decision | None, agent: str
    ) -> dict[str, Any]:
        """The provenance of a request ``agent``'s rules decided as ``found``
        (the middleware's own match; None: robots.txt unreachable and the
        request let through)."""
        found = found or _LET_THROUGH
        decision = {
            "allowed": found.allowed,
            "token": agent,
            "group": list(found.agents),
            "line": found.line,
            "rule": found.rule,
        }
        return {
            "origin": origin.text,
            "decided_at": self._stamp(_clock.now()),
            "checked": True,
            "robotstxt": self._part(origin, entry),
            "decision": decision,
            "usage": None,
        }

    def _part(self, origin: Origin, entry: Entry) -> dict[str, Any]:
        known = self._parts.get(origin)
        if known is not None and known[0] is entry:
            return dict(known[1])
        rules_from = self._rules_from.get(origin) if entry.robots is not None else None
        part: dict[str, Any] = {
            "url": entry.url or origin.robots_url,
            "outcome": entry.outcome,
            "status": entry.status,
            "reason": entry.reason,
            "fetched_at": warc_date(entry.fetched),
            "expires": warc_date(entry.expires),
            "parsed_sha256": None,
            "warc_record_id": None,
            "warc_file": None,
        }
        if rules_from is not None and entry.outcome in (PARSED, UNREACHABLE, CHALLENGED):
            part.update(rules_from)  # the fetch the rules in force were read from
            part["outcome"] = entry.outcome
        elif entry.robots is not None and not entry.ruleless and entry.sha256:
            # rules fetched by another process (REP_STATE_DIR, a cluster worker):
            # their digest travels with the entry (the same parsed bytes)
            part["parsed_sha256"] = entry.sha256
        else:
            answered = self._answered.get(origin)
            if answered is not None and answered[0] is entry:
                part.update(answered[1])
        lru_put(self._parts, origin, (entry, part), self._bound)
        return dict(part)


def _line(found: Any) -> dict[str, Any] | None:
    if found is None:
        return None
    return {"line": found.line, "text": found.text, "seconds": found.seconds}
