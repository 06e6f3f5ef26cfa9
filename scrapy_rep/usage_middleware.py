"""``scrapy_rep.UsageMiddleware``: what sites say their content may be used for.

For the purposes a crawl declares (``REP_PURPOSES``), reads every mechanism
of :mod:`scrapy_rep.usage` and sets ``response.meta["rep_usage"]`` and
``rep_usage_reasons`` (docs/usage.md). A response that arrives before its
origin's tdmrep.json waits for it out of the downloader's active set
(:mod:`scrapy_rep._slots.waiting`), so that waiting costs other origins nothing.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy.exceptions import NotConfigured
from scrapy.http import TextResponse
from scrapy.utils.httpobj import urlparse_cached

from scrapy_rep import _compat
from scrapy_rep import signals as rep_signals
from scrapy_rep._context import crawl_context
from scrapy_rep._meta_keys import ROBOTS_META
from scrapy_rep._page_directives import header_directives, parse_rules, robots_meta_tags
from scrapy_rep._robots import RobotsService, robots_service
from scrapy_rep._tdmrep_files import TdmEntry, TdmRepFiles
from scrapy_rep.cache import lru_put
from scrapy_rep.config import Config
from scrapy_rep.evidence import PROVENANCE_META
from scrapy_rep.exceptions import UsageDenied
from scrapy_rep.meta import is_html
from scrapy_rep.origin import Origin, OriginKeys
from scrapy_rep.robotstxt._usage_labels import TDMREP as TDMREP_LABEL
from scrapy_rep.usage import Statement, Verdict, combine, response_statements

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response


__all__ = ["ORDER", "UsageMiddleware"]

logger = logging.getLogger(__name__)

ORDER = 101
"""Just after RobotsTxtMiddleware (100): it reads the rules a request was checked against."""
USAGE_META = "rep_usage"
REASONS_META = "rep_usage_reasons"
_ACTIONS = {
    "annotate": "responses are annotated (response.meta['rep_usage'])",
    "drop": "what denies every declared purpose is dropped",
}


_Pending = tuple[str, tuple[Statement, ...], bool]


class UsageMiddleware:
    """Reads usage preferences for ``REP_PURPOSES``; see the module docstring."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self.purposes = config.purposes
        self.drop = config.usage_action == "drop"
        self._dry_run = config.dry_run
        self._stats = crawler.stats
        self._ua = config.user_agent
        self._keys = OriginKeys(config.cache_max_origins)
        self._robots: RobotsService | None = robots_service(crawler)
        # Each request's agent and robots.txt statements, from process_request to
        # process_response; and whether it was already found denied (a dry run's).
        self._pending: WeakKeyDictionary[Request, _Pending] = WeakKeyDictionary()
        self._logged: OrderedDict[tuple[str, str], None] = OrderedDict()  # (origin text, stage)
        # TDMRep only for the purposes it governs
        tdm = any(purpose in TDMREP_LABEL.purposes for purpose in self.purposes)
        self._tdmrep = TdmRepFiles(crawler, config) if tdm else None
        self._waiting = crawl_context(crawler).waiting

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UsageMiddleware:
        _compat.check()
        config = crawl_context(crawler).config
        if not config.purposes:
            raise NotConfigured("REP_PURPOSES is empty: usage preferences are not read")
        if not config.obey:
            logger.warning(
                "REP_PURPOSES is set but ROBOTSTXT_OBEY is False: usage preferences are not read"
            )
            raise NotConfigured("ROBOTSTXT_OBEY is off")
        dry_run = config.dry_run and config.usage_action == "drop"
        logger.info(
            "Reading usage preferences for %s; %s (REP_USAGE_ACTION = %r)%s",
            ", ".join(config.purposes),
            _ACTIONS[config.usage_action],
            config.usage_action,
            "; dry run: nothing is dropped" if dry_run else "",
        )
        return cls(crawler, config)

    # -- requests -----------------------------------------------------------------

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        meta = request.meta
        if meta.get("dont_obey_robotstxt") or ROBOTS_META in meta:
            return
        agent, statements = self._robots_said(request)
        origin = self._keys.get(urlparse_cached(request))
        denied = False
        if self.drop and statements:
            verdicts = combine(statements, self.purposes)
            if _all_denied(verdicts):
                self._denied(request, None, verdicts, origin)  # raises unless a dry run
                denied = True
        self._pending[request] = (agent, statements, denied)
        if self._tdmrep is not None and origin is not None:
            self._tdmrep.entry(origin)  # starts the fetch alongside the first pages

    # -- responses ----------------------------------------------------------------

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response | Coroutine[Any, Any, Response]:
        meta = request.meta
        if meta.get("dont_obey_robotstxt") or ROBOTS_META in meta:
            return response
        pending = self._pending.pop(request, None)
        if pending is None:  # not seen by process_request (added after it, say)
            pending = (*self._robots_said(request), False)
        origin = self._keys.get(urlparse_cached(request))
        if self._tdmrep is None or origin is None:
            return self._annotate(request, response, origin, pending, None)
        entry = self._tdmrep.entry(origin)
        if entry is None:
            return self._annotate_later(request, response, origin, pending)
        return self._annotate(request, response, origin, pending, entry)

    async def _annotate_later(
        self,
        request: Request,
        response: Response,
        origin: Origin,
        pending: _Pending,
    ) -> Response:
        assert self._tdmrep is not None
        with self._waiting.detached(request):  # its place goes to other origins meanwhile
            entry = await self._tdmrep.fetched(origin)
        return self._annotate(request, response, origin, pending, entry)

    def _annotate(
        self,
        request: Request,
        response: Response,
        origin: Origin | None,
        pending: _Pending,
        entry: TdmEntry | None,
    ) -> Response:
        agent, statements, denied = pending
        rule = entry.rules.decide(request.url) if entry is not None and entry.rules else None
        found = [*statements, *self._response_statements(response, agent, rule)]
        verdicts = combine(found, self.purposes)
        request.meta[USAGE_META] = {purpose: v.allowed for purpose, v in verdicts.items()}
        request.meta[REASONS_META] = {
            purpose: tuple(s.where for s in v.reasons) for purpose, v in verdicts.items()
        }
        provenance = request.meta.get(PROVENANCE_META)
        if isinstance(provenance, dict):  # the usage statements that applied
            provenance["usage"] = {
                purpose: {"allowed": v.allowed, "statements": [s.where for s in v.reasons]}
                for purpose, v in verdicts.items()
            }
        stats = self._stats
        for purpose, verdict in verdicts.items():
            outcome = {True: "allowed", False: "denied", None: "unknown"}[verdict.allowed]
            stats.inc_value(f"rep/usage/{purpose}/{outcome}")
        if _all_denied(verdicts) and not denied:  # (a dry run let it through denied)
            self._denied(request, response, verdicts, origin)
        return response

    def _response_statements(
        self, response: Response, agent: str, rule: tuple[bool, str] | None
    ) -> list[Statement]:
        headers = response.headers
        values = {
            name: [value.decode("latin-1") for value in headers.getlist(name.encode())]
            for name in ("content-usage", "content-signal", "tdm-reservation")
        }
        directives: list[tuple[str, bool, bool]] = []
        meta_tags: list[tuple[str, str]] = []
        if is_html(response):
            assert isinstance(response, TextResponse)
            try:
                text = response.text
            except Exception:  # an undecodable page states nothing in its head
                text = ""
            names = {"robots", agent.strip().lower()} - {""}
            if self._tdmrep is not None:  # else its statements are not read
                names.add("tdm-reservation")
            for name, content in robots_meta_tags(text, names=names):
                if name == "tdm-reservation":
                    meta_tags.append((name, content))
                else:
                    found = parse_rules(content)
                    directives.append((f'<meta name="{name}">', found.noai, found.noimageai))
        robots_tags = [v.decode("latin-1") for v in headers.getlist(b"X-Robots-Tag")]
        if robots_tags:
            found = header_directives(robots_tags, user_agent=agent)
            directives.append(("X-Robots-Tag", found.noai, found.noimageai))
        content_type = headers.get(b"Content-Type") or b""
        return response_statements(
            headers=values,
            meta_tags=meta_tags,
            directives=directives,
            image=content_type.strip().lower().startswith(b"image/"),
            tdmrep_rule=rule,
            tdmrep=self._tdmrep is not None,
        )

    # -- denied -------------------------------------------------------------------

    def _denied(
        self,
        request: Request,
        response: Response | None,
        verdicts: dict[str, Verdict],
        origin: Origin | None,
    ) -> None:
        """Every declared purpose is denied: count, signal, tell (once per origin and
        stage at INFO), and under "drop" raise."""
        stats = self._stats
        stage = "request" if response is None else "response"
        stats.inc_value("rep/usage/denied")
        for source in dict.fromkeys(s.source for v in verdicts.values() for s in v.reasons):
            stats.inc_value(f"rep/usage/denied_by/{source}")
        usage = {purpose: verdict.allowed for purpose, verdict in verdicts.items()}
        reasons = {p: tuple(s.where for s in v.reasons) for p, v in verdicts.items()}
        text = origin.text if origin is not None else ""
        self.crawler.signals.send_catch_log(
            signal=rep_signals.usage_denied,
            request=request,
            response=response,
            usage=usage,
            reasons=reasons,
            origin=text,
        )
        if self.drop:
            stats.inc_value(
                f"rep/dry_run/usage/dropped/{stage}"
                if self._dry_run
                else f"rep/usage/dropped/{stage}"
            )
        why = "; ".join(dict.fromkeys(where for found in reasons.values() for where in found))
        if not self.drop:
            effect = "annotated, not dropped (REP_USAGE_ACTION = 'annotate')"
        elif self._dry_run:
            effect = "would be dropped (REP_DRY_RUN)"
        elif stage == "request":
            effect = "not downloaded (REP_USAGE_ACTION = 'drop')"
        else:
            effect = "kept from the spider (REP_USAGE_ACTION = 'drop')"
        key = (text, stage)
        if self.drop and key not in self._logged:  # annotating is what the stats say
            lru_put(self._logged, key, None, self.config.cache_max_origins)
            logger.info(
                "Usage preferences of %s deny %s (%s): its pages are %s; "
                "further ones are logged at DEBUG",
                text or request.url,
                ", ".join(self.purposes),
                why,
                effect,
                extra={"spider": self.crawler.spider},
            )
        logger.debug(
            "Usage preferences deny %s (%s): %s %s",
            ", ".join(self.purposes),
            why,
            request,
            effect,
            extra={"spider": self.crawler.spider},
        )
        if self.drop and not self._dry_run:
            raise UsageDenied(usage, reasons, text, response)

    # -- helpers ------------------------------------------------------------------

    def _robots_said(self, request: Request) -> tuple[str, tuple[Statement, ...]]:
        """The token the robots middleware checked ``request`` as, and the usage
        lines of the rules it checked it with: a statement per purpose."""
        if self._robots is None:
            return self._ua, ()
        agent, robots = self._robots.agent_of(request), self._robots.known_rules(request)
        decisions = robots.decide_usage(request.url, user_agent=agent) if robots is not None else {}
        return agent, tuple(
            Statement(
                "robotstxt",
                {purpose: decision.allowed},
                "robots.txt "
                + ", ".join(f"line {line.line}: {line.text}" for line in decision.lines),
            )
            for purpose, decision in decisions.items()
        )


def _all_denied(verdicts: dict[str, Verdict]) -> bool:
    return all(verdict.allowed is False for verdict in verdicts.values())
