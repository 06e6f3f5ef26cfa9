"""When a site says "slow down" (429, 503, ``Retry-After``), its download slot pauses.

This module reads every answer on ``response_downloaded`` (retries included,
before the slot's next request is picked) and decides the pauses: how long,
at which level, shared with other workers through Redis; the gates
(:mod:`scrapy_rep.slowdown.gates`) hold the requests. docs/slowdown.md is the
manual. With nothing paused, a request costs one dict truthiness test (in the
robots middleware), a response two membership and two dict truthiness tests.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.utils.httpobj import urlparse_cached

from scrapy_rep import _clock
from scrapy_rep._meta_keys import STOP_META, WELL_KNOWN_META
from scrapy_rep.cache import lru_put
from scrapy_rep.origin import origin_of
from scrapy_rep.policy import header_text, pause_for, retry_after
from scrapy_rep.slowdown.gates import Gates

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep._slots import SlotPauses, Waiting
    from scrapy_rep.cluster import ClusterPauses
    from scrapy_rep.config import Config

logger = logging.getLogger(__name__)


class SlowDown:
    """Pauses of download slots that answered 429/503 (see the module docstring);
    ``gates`` holds each slot's record."""

    def __init__(
        self,
        crawler: Crawler,
        config: Config,
        waiting: Waiting,
        pauses: SlotPauses,
        cluster: ClusterPauses | None = None,
        *,
        listen: bool = True,
    ) -> None:
        """``listen=False``: the caller passes each downloaded answer to
        :meth:`downloaded` itself (one signal receiver for several readers)."""
        stats = crawler.stats
        assert stats is not None
        self._stats = stats
        self._pauses = pauses
        self._cluster = cluster
        self._codes = frozenset(config.slowdown_http_codes)
        self._min = config.slowdown_min_delay
        self._max = config.slowdown_max_delay
        self._bound = config.cache_max_origins
        self.gates = Gates(crawler, stats, waiting, pauses, self._bound)
        self._warned: OrderedDict[str, None] = OrderedDict()  # warned of a capped Retry-After
        if listen:
            crawler.signals.connect(self.downloaded, signal=signals.response_downloaded)
        if cluster is not None:
            crawler.signals.connect(self._opened, signal=signals.spider_opened)

    # -- answers -------------------------------------------------------------------

    def downloaded(self, response: Response, request: Request) -> None:
        if STOP_META in request.meta:  # a stop signal: scrapy_rep.challenges pauses the slot
            return
        if WELL_KNOWN_META in request.meta:  # tdmrep.json: pauses and resumes nothing
            if response.status in self._codes:
                self._stats.inc_value("rep/slowdown/well_known_ignored")
            return
        if response.status in self._codes:
            self._slow(response, request)
        elif self.gates.by_slot:
            key: str | None = request.meta.get("download_slot")
            if key is not None and key in self.gates.by_slot:
                self._answered(key, request, response.status)

    def _answered(self, key: str, request: Request, status: int) -> None:
        """A good (not slow-down) answer from slot ``key``."""
        now = _clock.monotonic()
        gates = self.gates
        if gates.answered(key, request, now):  # sent before this pause began
            return
        probed = gates.probed(key)  # this worker's probe for the cluster
        since = gates.good_answer(key)
        if (since is not None or probed) and self._cluster is not None:
            self._cluster.resume(key)  # the other workers stop waiting for its outcome
        if since is not None:
            self._stats.inc_value("rep/slowdown/resumed")
            logger.info(
                "%s (slot %r) answers again (%d) after %.1f s: back to its normal pace",
                _origin(request),
                key,
                status,
                now - since,
            )
        gates.widen(key)

    def _slow(self, response: Response, request: Request) -> None:
        """A slow-down answer: pause the slot, unless a pause already runs."""
        status = response.status
        key = request.meta.get("download_slot") or self._pauses.key(request)
        now = _clock.monotonic()
        self._stats.inc_value(f"rep/slowdown/response_status_count/{status}")
        raw = header_text(response.headers.get(b"Retry-After"))
        asked = retry_after(raw, _clock.now(), date=header_text(response.headers.get(b"Date")))
        origin = _origin(request)
        if raw and asked is None:
            self._stats.inc_value("rep/slowdown/retry_after/invalid")
        elif asked is not None:
            self._count_retry_after(asked, origin, raw)
        if self._cluster is not None:
            self._cluster.publish(key, origin, None if asked is None else min(asked, self._max))
        if self.gates.answered(key, request, now):  # sent before this pause began
            if asked is not None:
                self.gates.pause(key, now + pause_for(asked, self._min, self._max), now)
            return
        answers = self.gates.count_answer(key, now)
        pause = pause_for(asked, self._min, self._max, answers=answers)
        if asked is None:
            self._stats.inc_value("rep/slowdown/backoff")
            said = ""
        else:
            said = f" (Retry-After: {_shown(raw)})"
        self._stats.inc_value("rep/slowdown/pauses")
        self.gates.pause(key, now + pause, now)
        logger.info(
            "%s (slot %r) answered %d%s: no request to it for %.1f s",
            origin,
            key,
            status,
            said,
            pause,
        )

    def _count_retry_after(self, asked: float, origin: str, raw: str | None) -> None:
        if asked <= self._max:
            self._stats.inc_value("rep/slowdown/retry_after/honoured")
            return
        self._stats.inc_value("rep/slowdown/retry_after/capped")
        if origin in self._warned:
            return
        lru_put(self._warned, origin, None, self._bound)
        logger.warning(
            "%s asks for a pause of %s s (Retry-After: %s): capped at %g s "
            "(REP_SLOWDOWN_MAX_DELAY)",
            origin,
            f"{asked:.0f}" if asked < 1e15 else "more than 10**15",
            _shown(raw),
            self._max,
        )

    # -- other workers (Redis) -----------------------------------------------------------

    async def _opened(self) -> None:
        assert self._cluster is not None
        await self._cluster.start(self._from_cluster)

    def _from_cluster(
        self, key: str, left: float, origin: str | None, level: int, own: bool
    ) -> None:
        """A pause of slot ``key`` for ``left`` more seconds, decided through Redis
        (``own``: the cluster's answer to this worker's own slow-down answer)."""
        now = _clock.monotonic()
        until = now + left
        ends = self.gates.ends(key)
        if ends is not None and ends >= until - 0.01:
            return  # known already (clocks differ by a few ms)
        if level:
            self.gates.count_answer(key, now, cluster=level)
        self.gates.pause(key, until, now)
        if own:
            return
        self._stats.inc_value("rep/slowdown/pauses/cluster")
        where = f"{origin} (slot {key!r})" if origin else f"download slot {key!r}"
        logger.info("%s paused by another worker for %.1f s", where, left)


def _shown(raw: str | None) -> str:
    """A header value for a log line: a hostile one may be megabytes of digits."""
    raw = raw or ""
    return raw if len(raw) <= 40 else raw[:40] + "..."


def _origin(request: Request) -> str:
    origin = origin_of(urlparse_cached(request))
    return request.url if origin is None else origin.text
