"""``scrapy_rep.RedisPoliteQueue``: scrapy-redis's shared queue, kept per download slot.

For scrapy-redis's ``SCHEDULER_QUEUE_CLASS``: a sorted set per download slot,
and one server-side script (``_redis_scripts.POP``) that hands a worker only
a request whose slot is ready for the whole cluster (its turn, its pause, its
requests out, its robots.txt). docs/cluster.md, "A queue per download slot",
says when a slot is ready, the keys (under ``SCHEDULER_QUEUE_KEY``, ``K``)
and the faults: when Redis fails (an error answer too), this worker hands out
what it pushes meanwhile, paced locally, and pushes back what it still holds
once Redis answers.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_rep import _clock
from scrapy_rep._context import crawl_context
from scrapy_rep._robots import ALLOWED, REFUSED, UNKNOWN, robots_service
from scrapy_rep._slots.readiness import SlotReadiness
from scrapy_rep._slots.wakeup import EngineWakeup
from scrapy_rep.cluster.link import Outage, _redis_errors, reply_text
from scrapy_rep.cluster.pacing import HOLD_MARGIN, HOLD_MAX, hand_over_turn
from scrapy_rep.frontier._redis_scripts import KNOWN, POP, PUSH, RELEASE, SENT
from scrapy_rep.frontier.queue import AWAIT_ROBOTS
from scrapy_rep.frontier.robots import Prefetch

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from scrapy_rep._robots import RobotsService
    from scrapy_rep.frontier._verdicts import Found
    from scrapy_rep.origin import Origin

logger = logging.getLogger(__name__)

SCAN = 64
"""Due slots one pop looks at, at most, before it answers None."""
LEASE_MARGIN = 60.0
"""A place is held this long past DOWNLOAD_TIMEOUT, then it comes back."""
CLEAR_BATCH = 1000
"""Keys one ``UNLINK`` of :meth:`RedisPoliteQueue.clear` deletes at most."""
IDLE_POLL = 0.2
"""Seconds at most between two pops of a worker that found no slot ready while
requests are queued: other workers make slots ready (a robots.txt they
fetched, a place they gave back) without a word to this one."""
SWEEP_AFTER = 2.0
"""Seconds after which a request handed out and no longer under way (dropped
before its slot: robots.txt forbids it) gives its place back; one detached
while it waits at a gate or for a place is under way (the crawl's ledger)."""


class RedisPoliteQueue:
    """A scrapy-redis ``SCHEDULER_QUEUE_CLASS`` that hands a worker only requests
    whose download slot is ready cluster-wide (see the module docstring)."""

    def __init__(self, server: Any, spider: Spider, key: str, serializer: Any = None) -> None:
        from scrapy_redis.queue import Base

        # scrapy-redis's own encoding (request_to_dict + the scheduler's serializer)
        self._codec = Base(server, spider, key, serializer)
        self.server = server
        self.spider = spider
        self.key = self._codec.key
        crawler: Crawler = spider.crawler
        stats = crawler.stats
        assert stats is not None
        self._stats = stats
        self._slots = SlotReadiness(crawler)
        self._wakeup = EngineWakeup(crawler)
        self._robots: RobotsService | None = robots_service(crawler)
        config = self._robots.config if self._robots is not None else crawl_context(crawler).config
        self._prefix = config.redis_prefix
        self._prefetch: Prefetch | None = None
        if self._robots is not None:
            # The queue's requests live in Redis, not here: no count of them
            # to hold fetches back with (``queued``/``taken``), the window only.
            ahead = config.cache_max_origins // 2
            self._prefetch = Prefetch(self._robots, stats, self._robots_known, ahead=ahead)
        timeout = crawler.settings.getfloat("DOWNLOAD_TIMEOUT")
        self._lease = int((timeout + LEASE_MARGIN) * 1e6)
        self._hold_ms = int((min(timeout, HOLD_MAX) + HOLD_MARGIN) * 1000)
        self._push_script = server.register_script(PUSH)
        self._pop_script = server.register_script(POP)
        self._release_script = server.register_script(RELEASE)
        self._known_script = server.register_script(KNOWN)
        self._sent_script = server.register_script(SENT)
        worker = uuid.uuid4().hex[:12]
        self._tokens = (f"{worker}:{n}" for n in itertools.count())
        self._given_key = f"{self.key}:given:{worker}"
        # the token of a pop whose reply did not come (the connection broke):
        # the next pop sends it again, and gets the request if Redis ran it
        self._unanswered: str | None = None
        self._out: dict[Request, tuple[str, str, float]] = {}  # request -> slot, token, when
        # requests holding their Crawl-delay slot until they reach the site:
        # request -> slot, token, spacing (us)
        self._holding: dict[Request, tuple[str, str, int]] = {}
        # origin -> one of its requests, and the slots parked for its robots.txt
        self._awaiting: dict[Origin, tuple[Request, set[str]]] = {}
        self._forbidden: deque[Request] = deque()  # dropped by the middleware at once
        self._local: deque[Request] = deque()  # pushed while Redis was down
        # pushes that failed: Redis may have run them (the reply lost), so they
        # are not handed out here but pushed again, the same bytes, when it answers
        self._uncertain: deque[tuple[Request, bytes]] = deque()
        # slots made ready, places to give back, holds to end: (script, keys,
        # args) in order, kept while Redis is down or fails to answer
        self._untold: deque[tuple[Any, list[str], list[Any]]] = deque()
        self._known_count = 0
        self._outage = Outage(min(config.redis_retry, 5.0))
        self._errors: tuple[type[BaseException], ...] = (*_redis_errors(), _Down)
        self._ledger = crawl_context(crawler).waiting.ledger
        self._ledger.follow("left", self._left_downloader)
        crawler.signals.connect(self._reached_site, signal=signals.headers_received)

    # -- scrapy-redis's queue interface ------------------------------------------------

    def __len__(self) -> int:
        # (a pop without its reply may hold a request: not closed before it is known)
        local = len(self._forbidden) + len(self._local) + len(self._uncertain)
        local += self._unanswered is not None
        if not self._outage.down:  # (down: the last count, to wait for Redis rather than close)
            try:
                self._known_count = max(int(self.server.get(f"{self.key}:count") or 0), 0)
            except self._errors as exc:
                self._failed(exc)
        return local + self._known_count

    def push(self, request: Request) -> None:
        found = self._readiness(request)
        if found[0] == REFUSED:  # the robots middleware drops it at once
            self._forbidden.append(request)
            return
        if self._outage.down:
            self._local.append(request)
            self._stats.inc_value("rep/redis/frontier/local")
            return
        data = self._codec._encode_request(request)
        if not self._push_redis(request, data, found):
            # A queue member is kept once: pushed again with the same bytes, it
            # stays one request, whether or not Redis ran the failed push.
            self._uncertain.append((request, data))
            self._stats.inc_value("rep/redis/frontier/local")

    def pop(self, timeout: int = 0) -> Request | None:
        if self._forbidden:
            return self._forbidden.popleft()
        self._sweep()
        if self._prefetch is not None:
            self._prefetch.retry()
        if self._outage.down:
            return self._pop_local_or_wake()
        try:
            self._flush_local()
            if self._untold:  # rules learnt, places left, sites reached, while Redis was down
                self._tell_untold()
            token = self._unanswered = self._unanswered or next(self._tokens)
            reply = self._pop_script(
                keys=[f"{self.key}:slots", f"{self.key}:count", self._given_key],
                args=[self.key, self._prefix, SCAN, self._lease, token, self._hold_ms],
            )
        except self._errors as exc:
            self._failed(exc)
            return self._pop_local_or_wake()
        self._unanswered = None
        self._answered()
        # as fresh as this pop: what len() says while Redis is down
        self._known_count = max(int(reply[3]), 0)
        slot = reply_text(reply[0])
        if not slot:
            first = int(reply[2])
            if first >= 0:
                wait = max(first - int(reply[1]), 0) / 1e6
                self._wakeup.at(_clock.monotonic() + min(wait, IDLE_POLL))
            self._stats.inc_value("rep/redis/frontier/not_ready")
            return None
        request: Request = self._codec._decode_request(reply[1])
        if reply_text(reply[4]) == "1":  # handed out by a pop whose reply was lost
            self._stats.inc_value("rep/redis/frontier/replayed")
        if self._readiness(request)[0] == "refused":  # dropped at once (its slot stopped...)
            self._release(slot, token)  # so it holds no place of the slot meanwhile
            self._stats.inc_value("rep/redis/frontier/refused_released")
            return request
        spacing = int(reply[2])
        if spacing >= 0:  # the script took the slot's Crawl-delay turn
            hand_over_turn(request)
        if spacing > 0:  # and holds the slot until the request reaches the site
            self._holding[request] = (slot, token, spacing)
        self._out[request] = (slot, token, _clock.monotonic())
        self._ledger.hand_out(request, slot)  # it holds a place: the slot limit lets it go
        self._stats.inc_value("rep/redis/frontier/handed")
        return request

    def clear(self) -> None:
        """Delete the queue's keys: ``UNLINK`` (Redis frees the memory in the
        background) in batches of ``CLEAR_BATCH``, so that no one command holds
        Redis (one ``DEL`` of 190k keys took 571 ms) while other workers call."""
        try:
            self.server.unlink(self.key, f"{self.key}:slots", f"{self.key}:count")
            for pattern in (":q:*", ":meta:*", ":out:*", ":hold:*", ":given:*"):
                batch: list[Any] = []
                for name in self.server.scan_iter(match=f"{self.key}{pattern}", count=CLEAR_BATCH):
                    batch.append(name)
                    if len(batch) >= CLEAR_BATCH:
                        self.server.unlink(*batch)
                        batch = []
                if batch:
                    self.server.unlink(*batch)
        except self._errors as exc:
            self._failed(exc)

    def close(self) -> None:
        self._wakeup.cancel()

    # -- Redis ----------------------------------------------------------------------

    def _readiness(self, request: Request) -> Found:
        if self._robots is None:
            return ALLOWED, 0.0, None
        return self._robots.readiness(request)

    def _spacing(self, slot: str, delay: float) -> int:
        return int(max(delay, self._slots.delay(slot)) * 1e6)

    def _push_redis(self, request: Request, data: bytes, found: Found) -> bool:
        verdict, delay, origin = found
        slot = self._slots.key(request)
        known = verdict != UNKNOWN
        try:
            self._push_script(
                keys=[
                    f"{self.key}:q:{slot}",
                    f"{self.key}:slots",
                    f"{self.key}:count",
                    f"{self.key}:meta:{slot}",
                ],
                args=[
                    -request.priority,
                    data,
                    slot,
                    self._spacing(slot, delay) if known else -1,
                    self._slots.concurrency(slot),
                    1 if known else 0,
                    int(AWAIT_ROBOTS * 1e6),
                ],
            )
        except self._errors as exc:
            self._failed(exc)
            return False
        self._answered()
        if not known and origin is not None:
            self._awaiting.setdefault(origin, (request, set()))[1].add(slot)
            # Its slot waits for the rules: fetch them (also for a request kept
            # in memory during an outage and pushed now, or it waits AWAIT_ROBOTS).
            if self._prefetch is not None:
                self._prefetch.want(origin, request)
        self._stats.inc_value("rep/redis/frontier/pushed")
        return True

    def _robots_known(self, origin: Origin) -> None:
        """``origin``'s robots.txt fetch ended here: its slots are ready."""
        awaiting = self._awaiting.pop(origin, None)
        if awaiting is None:
            return
        # Kept until Redis has been told: a fetch that ends during an outage
        # (Redis killed as the answer came) would otherwise leave its slots
        # parked in Redis until AWAIT_ROBOTS, with nobody fetching.
        request, slots = awaiting
        delay = self._readiness(request)[1]
        for slot in slots:
            keys = [f"{self.key}:slots", f"{self.key}:meta:{slot}"]
            args = [slot, self._spacing(slot, delay), self._slots.concurrency(slot)]
            self._untold.append((self._known_script, keys, args))
        self._tell(self._tell_untold)

    def _reached_site(self, request: Request) -> None:
        """``request`` reached its site (its answer began), or left without an
        answer: its slot's next Crawl-delay turn, any worker's, is a spacing
        from now (see ``SENT``)."""
        held = self._holding.pop(request, None)
        if held is not None:  # (Redis down: told late, or the hold ends by its expiry)
            slot, token, spacing = held
            keys = [f"{self._prefix}delay:{slot}", f"{self.key}:hold:{slot}"]
            keys += [f"{self.key}:slots", f"{self.key}:q:{slot}"]
            self._untold.append((self._sent_script, keys, [token, spacing, slot]))
            self._tell(self._tell_untold)

    def _left_downloader(self, request: Request) -> None:
        self._reached_site(request)
        held = self._out.pop(request, None)
        if held is not None:
            self._ledger.returned(request)
            self._release(held[0], held[1])

    def _sweep(self) -> None:
        """Give back the places of requests that left without reaching their
        slot (the robots middleware dropped them)."""
        if not self._out:
            return
        now = _clock.monotonic()
        gone = [
            request
            for request, (_, _, when) in self._out.items()
            if now - when > SWEEP_AFTER and not self._ledger.alive(request)
        ]
        for request in gone:
            self._left_downloader(request)

    def _release(self, slot: str, token: str) -> None:
        keys = [f"{self.key}:out:{slot}", f"{self.key}:q:{slot}", f"{self.key}:slots"]
        self._untold.append((self._release_script, keys, [token, slot]))
        self._tell(self._tell_untold)  # (Redis down: told late, or its lease ends)

    def _tell_untold(self) -> None:
        """Make ready the slots whose rules came, give back the places of the
        requests that left and end the holds of those that reached their site,
        in order (a hold told late, after an outage, ends now rather than at
        its expiry); one whose call fails stays for the next try."""
        while self._untold:
            script, keys, args = self._untold[0]
            script(keys=keys, args=args)
            self._untold.popleft()

    def _tell(self, flush: Callable[[], None]) -> None:
        """Tell Redis what ``flush`` sends, now; Redis down: at the first pop
        once it answers."""
        if self._outage.down:
            return
        try:
            flush()
        except self._errors as exc:
            self._failed(exc)
            return
        self._wakeup.now()

    def _pop_local_or_wake(self) -> Request | None:
        if self._local:
            self._stats.inc_value("rep/redis/frontier/local_handed")
            return self._local.popleft()
        # Redis is tried again at the next pop after the pause: ask for one
        # then, not at the engine's next heartbeat.
        self._wakeup.at(self._outage.next_try)
        return None

    def _flush_local(self) -> None:
        """Requests pushed while Redis was down go to Redis once it answers."""
        while self._uncertain:  # pushed again, refused or not: Redis may hold them already
            request, data = self._uncertain[0]
            if not self._push_redis(request, data, self._readiness(request)):
                raise _Down
            self._uncertain.popleft()
        while self._local:
            request = self._local[0]
            found = self._readiness(request)
            if found[0] == REFUSED:  # learnt meanwhile: the middleware drops it
                self._forbidden.append(request)
            elif not self._push_redis(request, self._codec._encode_request(request), found):
                raise _Down
            self._local.popleft()

    # -- outages ----------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        if not self._outage.begin() or isinstance(exc, _Down):
            return
        self._stats.inc_value("rep/redis/frontier/outages")
        logger.warning(
            "The Redis queue is unavailable (%s: %s): this worker hands out "
            "only the requests it schedules meanwhile, paced on its own, and waits for Redis "
            "for the others",
            type(exc).__name__,
            exc,
        )

    def _answered(self) -> None:
        if self._outage.end():
            logger.info("The Redis queue answers again")


class _Down(Exception):
    """A push failed while flushing (already counted)."""
