"""Origins' ``/.well-known/tdmrep.json`` (W3C TDMRep), fetched once each and kept.

Fetched with robots.txt's bounds (:mod:`scrapy_rep._download`), kept and
waited for as docs/usage.md ("TDMRep (W3C)", "Waiting for tdmrep.json") says.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future

from scrapy_rep import _clock, _startup
from scrapy_rep._download import OwnDownloads
from scrapy_rep._in_flight import InFlight
from scrapy_rep.cache import lru_put
from scrapy_rep.evidence import Evidence, warc_date
from scrapy_rep.origin import Origin
from scrapy_rep.policy import header_text, pause_for, retry_after
from scrapy_rep.usage import TdmRep

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_rep.config import Config

logger = logging.getLogger("scrapy_rep.usage_middleware")

TDMREP_PATH = "/.well-known/tdmrep.json"

TdmOutcome = Literal["parsed", "absent", "invalid", "too_large", "error", "refused_locally"]
"""What fetching a tdmrep.json found (the ``rep/usage/tdmrep/outcome/<outcome>`` stats)."""


@dataclass(frozen=True, slots=True)
class TdmEntry:
    """What is known of an origin's tdmrep.json."""

    rules: TdmRep | None
    outcome: TdmOutcome
    expires: float


class TdmRepFiles:
    """The tdmrep.json of the origins a crawl meets (see the module docstring)."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.config = config
        self._stats = crawler.stats
        self._files: OrderedDict[Origin, TdmEntry] = OrderedDict()
        self._fetches: InFlight[Origin, TdmEntry] = InFlight()
        self._began: dict[Origin, float] = {}  # when each fetch in flight began (monotonic)
        uncapped = _startup.uncapped(crawler.settings, warn=False)
        self._download = OwnDownloads(crawler, config, TDMREP_PATH, uncapped=uncapped)
        self._evidence = Evidence.of(crawler, config)

    async def fetched(self, origin: Origin) -> TdmEntry | None:
        """The origin's entry once the fetch under way ends; None: none known, or
        none within REP_FETCH_TIMEOUT of the fetch's start (counted)."""
        if origin not in self._fetches:
            return self._files.get(origin)
        self._stats.inc_value("rep/usage/tdmrep/waited")
        began = self._began.get(origin, _clock.monotonic())
        left = began + self.config.fetch_timeout - _clock.monotonic()
        entry = await maybe_deferred_to_future(
            self._fetches.join(origin, lambda: self._fetch(origin), timeout=left)
        )
        if entry is None:
            self._stats.inc_value("rep/usage/tdmrep/wait_expired")
        return entry

    def entry(self, origin: Origin) -> TdmEntry | None:
        """What is known of the origin's tdmrep.json (kept while a newer copy is
        fetched); None while the first fetch runs. Starts a fetch when needed."""
        entry = self._files.get(origin)
        if entry is not None:
            self._files.move_to_end(origin)
            if entry.expires > _clock.now():
                return entry
        if origin not in self._fetches:
            self._fetches.start(origin, lambda: self._fetch(origin))
            entry = entry or self._files.get(origin)  # the fetch may end at once
        return entry

    async def _fetch(self, origin: Origin) -> TdmEntry:
        self._began[origin] = _clock.monotonic()
        try:
            entry = await self._get(origin)
        except Exception:  # a bug here must not leave responses waiting
            logger.exception("Error while fetching %s%s", origin.text, TDMREP_PATH)
            entry = TdmEntry(None, "error", _clock.now() + self.config.retry_min)
        finally:
            self._began.pop(origin, None)
        self._stats.inc_value(f"rep/usage/tdmrep/outcome/{entry.outcome}")
        if self._evidence is not None:
            reading = {"outcome": entry.outcome, "expires": warc_date(entry.expires)}
            parsed = entry.rules is not None
            self._evidence.finished(TDMREP_PATH, origin.text, reading, whole=parsed)
        lru_put(self._files, origin, entry, self.config.cache_max_origins)
        return entry

    async def _get(self, origin: Origin) -> TdmEntry:
        """Download and read the origin's tdmrep.json: only a 2xx answer holds
        rules; a server or network error is asked again sooner (REP_RETRY_MIN)."""
        config = self.config
        now = _clock.now()
        retry, keep = now + config.retry_min, now + config.cache_ttl
        text = origin.text
        self._stats.inc_value("rep/usage/tdmrep/request_count")
        try:
            response = await self._download.file(origin)
        except IgnoreRequest:  # refused by a downloader middleware of this crawl
            return TdmEntry(None, "refused_locally", keep)
        except Exception as exc:
            logger.debug("%s%s not fetched: %r", text, TDMREP_PATH, exc)
            return TdmEntry(None, "error", retry)
        status = response.status
        if status == 429 or status >= 500:
            # Asked again when its Retry-After says, within robots.txt's bounds.
            # (Nor does this answer pause the site's pages: scrapy_rep.slowdown.)
            headers = response.headers
            asked = retry_after(
                header_text(headers.get(b"Retry-After")),
                now,
                date=header_text(headers.get(b"Date")),
            )
            later = pause_for(asked, config.retry_min, config.retry_max)
            return TdmEntry(None, "error", now + later)
        content_type = (response.headers.get(b"Content-Type") or b"").lower()
        if not 200 <= status < 300 or b"html" in content_type:  # a page saying "not found"
            return TdmEntry(None, "absent", keep)
        if "download_stopped" in response.flags or len(response.body) > config.max_size:
            logger.info(
                "%s%s is longer than REP_MAX_SIZE: not read (TDMRep from headers and pages only)",
                text,
                TDMREP_PATH,
            )
            return TdmEntry(None, "too_large", keep)
        rules, problem = TdmRep.parse(response.body)
        if rules is None:
            logger.info(
                "%s%s is not usable (%s): TDMRep from headers and pages only",
                text,
                TDMREP_PATH,
                problem,
            )
            return TdmEntry(None, "invalid", keep)
        if rules.cut:
            self._stats.inc_value("rep/usage/tdmrep/rules_cut")
        return TdmEntry(rules, "parsed", keep)
