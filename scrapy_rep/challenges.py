"""What a crawl does when a site answers a page with a stop signal: pause, then stop.

:mod:`scrapy_rep.stop_signals` reads the signal; :class:`Challenges` acts on it
per download slot, as docs/stop-signals.md describes. It reads answers on
``response_downloaded``, before Scrapy's RetryMiddleware, to set
``dont_retry``: a challenge is not solved by asking again. A stopped slot's
requests end unsent, counted; the frontier reads them as refused
(:meth:`scrapy_rep._robots.RobotsService.readiness`) so it hands them out at
once, to be ended here. Per-slot records are bounded by ``REP_CACHE_MAX_ORIGINS``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from scrapy import signals
from scrapy.utils.httpobj import urlparse_cached

from scrapy_rep import _clock
from scrapy_rep import signals as rep_signals
from scrapy_rep._meta_keys import ROBOTS_META, STOP_META
from scrapy_rep.cluster.pauses import PAUSED, STOP, STOPPED
from scrapy_rep.exceptions import PaymentRequired, SiteChallenged
from scrapy_rep.origin import origin_of
from scrapy_rep.stop_signals import KINDS, RULES, Detector, StopSignal

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep._slots import SlotPauses
    from scrapy_rep._slots.pauses import Queued
    from scrapy_rep.cluster import ClusterPauses
    from scrapy_rep.cluster.pauses import ChallengeRun
    from scrapy_rep.cluster.stops import ClusterStops
    from scrapy_rep.config import Config
    from scrapy_rep.slowdown.gates import Gates

__all__ = ["STOP_META", "Challenges"]

logger = logging.getLogger(__name__)

REFUSAL: Final = "refuses this crawler"


@dataclass(slots=True, eq=False)
class SlotRecord:
    """One download slot's run of stop signals."""

    origin: str
    signal: StopSignal | None = None  # the latest
    first: float = 0.0  # _clock.now() of the first signal
    challenged: int = 0  # challenged answers seen, all told
    probes: int = 0  # challenged answers after a pause, in a row (with Redis: the cluster's)
    pauses: int = 0  # pauses in this run (with Redis: the cluster's)
    paused: int = 0  # pauses this worker began, all told
    told: bool = False  # its pause told at INFO
    plain_403: int = 0  # plain 403s in a row (no 2xx between)
    stopped: bool = False
    from_cluster: bool = False  # stopped because another worker did
    dropped: int = 0  # requests not sent once stopped


class Challenges:
    """Pauses and stops of slots that answered with stop signals. ``stopped`` (slot
    key -> record) empty, a request costs one dict truthiness test."""

    gates: Gates
    """The slots' gates, which hold a paused slot (set by the pacing before the crawl)."""

    def __init__(
        self, crawler: Crawler, config: Config, pauses: SlotPauses, *, listen: bool = True
    ) -> None:
        """``listen=False``: the caller passes each downloaded answer to
        :meth:`downloaded` itself (one signal receiver for several readers)."""
        self._crawler = crawler
        stats = crawler.stats
        assert stats is not None
        self._stats = stats
        self._pauses = pauses
        self._detect = Detector(RULES + config.block_markers).detect
        self._pause = config.challenge_pause
        self._max_pause = config.challenge_max_pause
        self._give_up = config.challenge_give_up
        self._block_after = config.block_after
        self._stop_on_payment = config.on_payment == "stop_origin"
        self._bound = config.cache_max_origins
        self._top = config.report_top
        self.records: OrderedDict[str, SlotRecord] = OrderedDict()
        self.stopped: dict[str, SlotRecord] = {}
        self._shared_pauses: ClusterPauses | None = None
        self._shared_stops: ClusterStops | None = None
        if listen:
            crawler.signals.connect(self.downloaded, signal=signals.response_downloaded)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    def share(self, pauses: ClusterPauses, stops: ClusterStops) -> None:
        """Share pauses and stops with the other workers through Redis."""
        self._shared_pauses = pauses
        self._shared_stops = stops
        self._crawler.signals.connect(self._opened, signal=signals.spider_opened)

    async def _opened(self) -> None:
        assert self._shared_stops is not None
        await self._shared_stops.start(self._from_cluster)

    def _from_cluster(self, key: str, what: dict[str, Any]) -> None:
        """Another worker stopped slot ``key``: stop it here too."""
        record = self._record(key, what.get("origin") or key)
        if record.stopped:
            return
        kind = what.get("kind")
        record.signal = StopSignal(
            kind if kind in KINDS else "challenge",
            what.get("provider") or "another worker",
            what.get("marker") or "",
            what.get("price"),
            what.get("scheme"),
        )
        record.first = record.first or _clock.now()
        probes = what.get("probes")
        if isinstance(probes, int) and not isinstance(probes, bool):
            record.probes = max(record.probes, probes)
        record.from_cluster = True
        self._stats.inc_value("rep/challenge/stopped/cluster")
        signal = record.signal
        why = f"{signal.kind} by {signal.provider} ({signal.marker}), told by another worker"
        self._stop(key, record, why, shared=False)

    # -- answers -------------------------------------------------------------------

    def downloaded(self, response: Response, request: Request) -> None:
        meta = request.meta
        if ROBOTS_META in meta:  # robots.txt and tdmrep.json: the fetchers read them
            return
        status = response.status
        signal = self._detect(status, response.headers, response.body)
        if signal is None:
            if status == 403 and self._block_after:
                self._plain_403(request)
            elif 200 <= status < 300 and self.records:
                record = self.records.get(self._key(request))
                if record is not None:
                    record.plain_403 = record.probes = record.pauses = 0
            return
        meta["dont_retry"] = True
        meta[STOP_META] = signal
        key = self._key(request)
        record = self._record(key, _origin(request))
        record.signal = signal
        record.first = record.first or _clock.now()
        now = _clock.monotonic()
        sent_before = self.gates.answered(key, request, now)
        if signal.kind == "payment":
            self._payment(key, record, signal, request, response)
            return
        self._stats.inc_value(f"rep/challenge/responses/{_slug(signal.provider)}")
        record.challenged += 1
        if record.challenged == 1:
            self._stats.inc_value("rep/challenge/origins")
        self._tell(record, signal, request, response)
        if record.stopped:
            return
        if signal.kind == "block":
            self._stop(key, record, f"blocked by {signal.provider} ({signal.marker})")
        elif not sent_before:  # an answer to a request sent before the pause says nothing new
            self._challenged(key, record, f"challenged by {signal.provider} ({signal.marker})")

    def _plain_403(self, request: Request) -> None:
        key = self._key(request)
        record = self._record(key, _origin(request))
        record.plain_403 += 1
        if record.plain_403 < self._block_after or record.stopped:
            return
        if self.gates.paused(key):
            return  # sent before the pause began
        if record.plain_403 == self._block_after:
            self._stats.inc_value("rep/challenge/refused")
            signal = StopSignal("challenge", "the site", f"{record.plain_403} plain 403s in a row")
            record.signal = signal
            record.first = record.first or _clock.now()
            self._tell(record, signal, request, None)
        self._challenged(key, record, f"{REFUSAL} ({record.plain_403} plain 403s in a row)")

    def _tell(
        self, record: SlotRecord, signal: StopSignal, request: Request, response: Response | None
    ) -> None:
        self._crawler.signals.send_catch_log(
            signal=rep_signals.site_challenged,
            origin=record.origin,
            provider=signal.provider,
            kind=signal.kind,
            marker=signal.marker,
            request=request,
            response=response,
        )

    def _challenged(self, key: str, record: SlotRecord, why: str) -> None:
        """A challenge: pause the slot, or stop it after enough challenged probes."""
        if self._shared_pauses is not None:  # the run is the cluster's
            run = self._shared_pauses.challenge(
                key, record.origin, self._pause, self._max_pause, self._give_up
            )
            if run is not None:
                self._in_cluster(key, record, why, run)
                return
        if record.pauses:
            record.probes += 1
            self._stats.inc_value("rep/challenge/probes")
            if record.probes >= self._give_up:
                self._stop(key, record, f"{why}, {record.probes} probes in a row")
                return
        seconds = min(self._pause * 2.0 ** min(record.pauses, 64), self._max_pause)
        record.pauses += 1
        self._paused(key, record, why, seconds, "")

    def _in_cluster(self, key: str, record: SlotRecord, why: str, run: ChallengeRun) -> None:
        """The cluster's count of the run (cluster/pauses.py): one probe per pause
        across the workers, ``REP_CHALLENGE_GIVE_UP`` of them in all stop the slot."""
        if run.what in (PAUSED, STOP) and run.probes:  # this worker's probe, counted
            self._stats.inc_value("rep/challenge/probes")
        record.probes, record.pauses = run.probes, run.pauses
        if run.what == STOPPED:  # by another worker: as if its message had come
            record.from_cluster = True
            self._stats.inc_value("rep/challenge/stopped/cluster")
            self._stop(key, record, f"{why}, stopped by another worker", shared=False)
        elif run.what == STOP:
            self._stop(key, record, f"{why}, {run.probes} probes in a row across the workers")
        else:  # RUNNING: sent before the cluster's pause began, held for what is left of it
            seconds = round(run.left, 1)
            self._paused(key, record, why, seconds, " with the other workers", run.what == PAUSED)

    def _paused(
        self, key: str, record: SlotRecord, why: str, seconds: float, who: str, begun: bool = True
    ) -> None:
        if begun:
            record.paused += 1
            self._stats.inc_value("rep/challenge/pauses")
        now = _clock.monotonic()
        self.gates.pause(key, now + seconds, now)
        logger.log(
            logging.DEBUG if record.told else logging.INFO,
            "%s %s; paused %g s%s (REP_CHALLENGE_PAUSE), then one probe",
            record.origin,
            why,
            seconds,
            who,
        )
        record.told = True

    def _payment(
        self, key: str, record: SlotRecord, signal: StopSignal, request: Request, response: Response
    ) -> None:
        stats = self._stats
        stats.inc_value("rep/payment/responses")
        first = not record.challenged and not record.stopped
        record.challenged += 1
        if first:
            stats.inc_value("rep/payment/origins")
        self._crawler.signals.send_catch_log(
            signal=rep_signals.payment_required, request=request, response=response, offer=signal
        )
        offer = f"{signal.scheme} {signal.price}" if signal.price else signal.marker
        if self._stop_on_payment and not record.stopped:
            self._stop(key, record, f"asks for payment ({offer}, {signal.provider})")
        elif first:
            logger.info(
                "%s asks for payment (%s, %s): this request is skipped, others go on "
                "(REP_ON_PAYMENT = 'skip')",
                record.origin,
                offer,
                signal.provider,
            )

    # -- stopping ------------------------------------------------------------------

    def _stop(self, key: str, record: SlotRecord, why: str, *, shared: bool = True) -> None:
        record.stopped = True
        self.stopped[key] = record
        self.records.move_to_end(key)
        payment = record.signal is not None and record.signal.kind == "payment"
        if shared:  # this worker's own decision (another worker's is counted as such)
            self._stats.inc_value("rep/payment/stopped" if payment else "rep/challenge/stopped")
        logger.info("%s %s: stopped, its requests are not sent", record.origin, why)
        signal = record.signal
        if shared and self._shared_stops is not None and signal is not None:
            what = {"origin": record.origin, **asdict(signal), "probes": record.probes}
            self._shared_stops.publish(key, what)
        self.gates.stop(key, lambda queued: self._end_queued(key, record, queued))

    def _end_queued(self, key: str, record: SlotRecord, queued: Queued) -> None:
        if self._pauses.requeue(key, queued, self._failure(record)):
            self._count_dropped(record)

    def check(self, request: Request) -> None:
        """Raise the stop's exception if ``request``'s slot is stopped (call
        only while ``stopped`` holds anything)."""
        record = self.stopped.get(self._key(request))
        if record is not None:
            self._count_dropped(record)
            raise self._failure(record)

    def is_stopped(self, request: Request) -> bool:
        """``request``'s slot is stopped (no counting: for the scheduler queues)."""
        return bool(self.stopped) and self._key(request) in self.stopped

    def _count_dropped(self, record: SlotRecord) -> None:
        record.dropped += 1
        payment = record.signal is not None and record.signal.kind == "payment"
        self._stats.inc_value("rep/payment/dropped" if payment else "rep/challenge/dropped")

    @staticmethod
    def _failure(record: SlotRecord) -> SiteChallenged | PaymentRequired:
        assert record.signal is not None
        return _exception(record.origin, record.signal, stopped=True)

    @staticmethod
    def failure(request: Request, response: Response) -> SiteChallenged | PaymentRequired:
        """The exception that ends ``request``, whose answer was a stop signal."""
        return _exception(_origin(request), request.meta.pop(STOP_META), response=response)

    # -- records -------------------------------------------------------------------

    def _key(self, request: Request) -> str:
        key = request.meta.get("download_slot")
        return str(key) if key is not None else self._pauses.key(request)

    def _record(self, key: str, origin: str) -> SlotRecord:
        record = self.records.get(key)
        if record is None:
            if len(self.records) >= self._bound:
                self._evict()
            record = self.records[key] = SlotRecord(origin)
        return record

    def _evict(self) -> None:
        """Forget the oldest record that is not stopped (a stopped one must
        keep ending its requests)."""
        for key, record in self.records.items():
            if not record.stopped:
                del self.records[key]
                return
        key, _ = self.records.popitem(last=False)
        self.stopped.pop(key, None)

    # -- the close report -----------------------------------------------------------

    def _closed(self) -> None:
        if self._shared_stops is not None:
            self._shared_stops.close()

    def states(self) -> list[tuple[str, dict[str, Any]]]:
        """(origin, state) of every slot that answered with a stop signal, for
        the REP_REPORT file (scrapy_rep.report)."""
        return [
            (record.origin, _state(key, record))
            for key, record in self.records.items()
            if record.signal is not None
        ]

    def section(self) -> str | None:
        """The close report's section (scrapy_rep.report), None if no origin
        answered with a stop signal."""
        told = [record for record in self.records.values() if record.signal is not None]
        if not told:
            return None
        told.sort(key=lambda record: (not record.stopped, -record.dropped, record.first))
        lines = [
            f"Stop signals: {len(told)} origin(s) answered with one, "
            f"{sum(record.stopped for record in told)} stopped, "
            f"{sum(record.dropped for record in told)} request(s) not sent"
        ]
        for record in told[: self._top]:
            lines.append("  " + _line(record))
        if len(told) > self._top:
            lines.append(f"  ... and {len(told) - self._top} more")
        return "\n".join(lines)


def _state(key: str, record: SlotRecord) -> dict[str, Any]:
    """A slot's stop-signal state as the REP_REPORT file holds it (docs/report.md)."""
    signal = record.signal
    assert signal is not None
    refusal = signal.provider == "the site"
    return {
        "slot": key,
        "kind": "refusal" if refusal else signal.kind,
        "provider": signal.provider,
        "marker": signal.marker,
        "price": signal.price,
        "scheme": signal.scheme,
        "first_at": datetime.fromtimestamp(record.first, timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        "answers": record.challenged,
        "pauses": record.paused,
        "probes": record.probes,
        "stopped": record.stopped,
        "from_cluster": record.from_cluster,
        "not_sent": record.dropped,
    }


def _line(record: SlotRecord) -> str:
    signal = record.signal
    assert signal is not None
    at = datetime.fromtimestamp(record.first).strftime("%H:%M:%S")
    if signal.kind == "payment":
        offer = f"{signal.scheme} {signal.price}" if signal.price else signal.marker
        what = f"asks for payment: {offer} ({signal.provider}) at {at}"
    elif signal.provider == "the site":
        what = f"{REFUSAL} ({signal.marker}) at {at}"
    else:
        verb = "blocked" if signal.kind == "block" else "challenged"
        what = f"{verb} by {signal.provider} ({signal.marker}) at {at}"
    state = f"stopped: {record.dropped} request(s) not sent" if record.stopped else "not stopped"
    return f"{record.origin}: {what}; {record.probes} probe(s); {state}"


def _exception(origin: str, signal: StopSignal, **how: Any) -> SiteChallenged | PaymentRequired:
    """``stopped=True``: a request not sent; ``response=``: the answer that was the signal."""
    if signal.kind == "payment":
        return PaymentRequired(origin, signal.price, signal.scheme, **how)
    return SiteChallenged(origin, signal.provider, signal.kind, signal.marker, **how)


def _slug(provider: str) -> str:
    return provider.lower().replace(" ", "-")


def _origin(request: Request) -> str:
    origin = origin_of(urlparse_cached(request))
    return request.url if origin is None else origin.text
