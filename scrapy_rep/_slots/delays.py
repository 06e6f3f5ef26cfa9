"""Crawl-delay as a download slot's minimum, which jitter, AutoThrottle and GC cannot undercut.

How (docs/crawl-delay.md, "Nothing undercuts it"): the slot's jitter is cut to
what keeps its low end at the minimum; AutoThrottle's ``response_downloaded``
handler sets ``slot.delay``, and ours, connected after it (at the first
minimum, during the crawl: receivers run in connection order), raises it back;
a garbage-collected slot is recreated from ``per_slot_settings``, which holds
the minimum too. When workers share a slot's pacing through Redis,
:meth:`SlotDelays.let_cluster_pace` holds its local delay at 0 instead: a
request released at its reserved time must leave at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.downloader import Slot

from scrapy_rep._slots.active import OnDownloader, missing_slot_attributes

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.core.downloader import Downloader
    from scrapy.crawler import Crawler

# The room's one logger name, as before it became a package.
logger = logging.getLogger("scrapy_rep._slots")

# Scrapy 2.19 randomises a slot's delay by +/- Slot.jitter; earlier versions
# only had a +/-50% switch, Slot.randomize_delay.
_HAS_JITTER = hasattr(Slot, "jitter")
_JITTER_KEY = "jitter" if _HAS_JITTER else "randomize_delay"


def internals_problems(downloader: object) -> list[str]:
    """What SlotDelays needs from Scrapy's downloader and does not find."""
    problems = []
    for name, kind in (("slots", dict), ("per_slot_settings", dict)):
        value = getattr(downloader, name, None)
        if not isinstance(value, kind):
            problems.append(
                f"Downloader.{name} is {type(value).__name__}, expected {kind.__name__}"
            )
    if not callable(getattr(downloader, "get_slot_key", None)):
        problems.append("Downloader.get_slot_key(request) is missing")
    # Where new slots take their default delay and jitter from.
    for name in ("_delay", "_jitter") if _HAS_JITTER else ("randomize_delay",):
        if not isinstance(getattr(downloader, name, None), (float, int)):
            problems.append(f"Downloader.{name} (default of new slots) is missing")
    # Ending a wait scheduled under a former delay (_end_pending_delay).
    if not callable(getattr(downloader, "_process_queue", None)):
        problems.append("Downloader._process_queue(slot) is missing")
    return problems + missing_slot_attributes("latercall")


def _fitting_jitter(own_jitter: float, minimum: float, delay: float) -> float:
    """The largest jitter up to the slot's own whose low end, delay * (1 -
    jitter), stays at or above the minimum (delay >= minimum > 0)."""
    return min(abs(own_jitter), 1.0 - minimum / delay)


def _jitter_value(jitter: float) -> float | bool:
    # Before 2.19, randomisation was all (+/-50%) or nothing.
    return jitter if _HAS_JITTER else jitter >= 0.5


class SlotDelays(OnDownloader):
    """Minimum delays between request starts, per download slot (the largest
    of the origins sharing one). At most ``max_slots`` slots are remembered
    (the oldest first gives its DOWNLOAD_SLOTS entry back): a slot still in use
    gets its minimum back with its next request, as each one calls ``require``.
    """

    problems = staticmethod(internals_problems)

    def __init__(
        self, crawler: Crawler, max_slots: int, paused: Callable[[str], bool] | None = None
    ) -> None:
        super().__init__(crawler)
        self._paused = paused
        """Whether a slot is paused for a 429/503: its pending delay is then not ended early."""
        self._max_slots = max_slots
        self._minimum: dict[str, float] = {}
        # The slot's own DOWNLOAD_SLOTS entry and jitter, before we touched them.
        self._own_settings: dict[str, dict[str, Any]] = {}
        self._own_jitter: dict[str, float] = {}
        self._elsewhere: set[str] = set()  # slots paced cluster-wide: local delay 0
        # DOWNLOAD_DELAY, not the downloader's default: AutoThrottle sets that
        # to its start delay, which it would lower later, and here cannot.
        self._download_delay = crawler.settings.getfloat("DOWNLOAD_DELAY")
        self._listening = False

    def require(self, request: Request, delay: float) -> None:
        """Make the delay of ``request``'s download slot at least ``delay`` s.
        Called for every request of an origin with a Crawl-delay: when nothing
        changes it costs the slot key and one dict lookup (about 2 µs)."""
        downloader = self._downloader or self._bind()
        if downloader is None:
            return
        key = downloader.get_slot_key(request)
        if self._minimum.get(key, 0.0) >= delay:
            return
        self._elsewhere.discard(key)
        self._raise_minimum(downloader, key, delay)

    def let_cluster_pace(self, request: Request) -> float:
        """Hold the local delay of ``request``'s slot at 0 (the cluster paces
        it) until :meth:`require` is called for it again; returns the delay the
        slot would have of its own (its DOWNLOAD_SLOTS entry, else
        DOWNLOAD_DELAY), which the cluster-wide spacing must include."""
        downloader = self._downloader or self._bind()
        if downloader is None:
            return 0.0
        key = downloader.get_slot_key(request)
        own = self._own(downloader, key)
        own_delay = float(own.get("delay", self._download_delay))
        if key in self._elsewhere:
            return own_delay
        self._elsewhere.add(key)
        self._minimum.pop(key, None)
        self._listen()
        downloader.per_slot_settings[key] = {**own, "delay": 0.0, _JITTER_KEY: _jitter_value(0.0)}
        slot = downloader.slots.get(key)
        if slot is not None:
            slot.delay = 0.0
            _set_jitter(slot, 0.0)
            if self._paused is None or not self._paused(key):
                _end_pending_delay(downloader, slot)
        logger.debug("Download slot %r: paced cluster-wide, no local delay", key)
        return own_delay

    def _own(self, downloader: Downloader, key: str) -> dict[str, Any]:
        """The slot's own DOWNLOAD_SLOTS entry, remembered the first time we touch it."""
        own = self._own_settings.get(key)
        if own is None:
            own = self._own_settings[key] = dict(downloader.per_slot_settings.get(key, {}))
            self._own_jitter[key] = self._own_slot_jitter(downloader, own)
            if len(self._own_settings) > self._max_slots:
                self._forget(downloader, next(iter(self._own_settings)))
        return own

    def _forget(self, downloader: Downloader, key: str) -> None:
        """Give the slot its own DOWNLOAD_SLOTS entry back and drop what we kept."""
        own = self._own_settings.pop(key)
        if own:
            downloader.per_slot_settings[key] = own
        else:
            downloader.per_slot_settings.pop(key, None)
        self._own_jitter.pop(key, None)
        self._minimum.pop(key, None)
        self._elsewhere.discard(key)

    def _listen(self) -> None:
        if not self._listening:
            self._crawler.signals.connect(
                self._after_response_downloaded, signal=signals.response_downloaded
            )
            self._listening = True

    def _raise_minimum(self, downloader: Downloader, key: str, delay: float) -> None:
        if not delay > 0:  # also refuses NaN
            return
        own = self._own(downloader, key)
        own_jitter = self._own_jitter[key]
        self._minimum[key] = delay
        self._listen()

        # What a slot (re)created for this key starts with: its own delay, or
        # the crawl's default, but never less than the minimum.
        start = max(float(own.get("delay", self._default_delay(downloader))), delay)
        downloader.per_slot_settings[key] = {
            **own,
            "delay": start,
            _JITTER_KEY: _jitter_value(_fitting_jitter(own_jitter, delay, start)),
        }
        slot = downloader.slots.get(key)
        if slot is not None:
            _clamp(slot, delay, own_jitter)
        logger.debug("Download slot %r: at least %.3f s between requests (Crawl-delay)", key, delay)

    def _after_response_downloaded(self, request: Request) -> None:
        # Runs after AutoThrottle's handler has set slot.delay, and before the
        # downloader schedules the slot's next request.
        key = request.meta.get("download_slot")
        if key is None or self._downloader is None:
            return
        minimum = self._minimum.get(key)
        if minimum is None:
            if key in self._elsewhere:
                slot = self._downloader.slots.get(key)
                if slot is not None:
                    slot.delay = 0.0
            return
        slot = self._downloader.slots.get(key)
        if slot is not None:
            _clamp(slot, minimum, self._own_jitter[key])

    def _default_delay(self, downloader: Downloader) -> float:
        if _HAS_JITTER:
            # DOWNLOAD_DELAY, or AUTOTHROTTLE_START_DELAY when AutoThrottle is on.
            return float(downloader._delay)
        return float(getattr(self._crawler.spider, "download_delay", self._download_delay))

    @staticmethod
    def _own_slot_jitter(downloader: Downloader, own: dict[str, Any]) -> float:
        if _HAS_JITTER:
            if "jitter" in own:
                return float(own["jitter"])
            if "randomize_delay" in own:  # deprecated DOWNLOAD_SLOTS key
                return 0.5 if own["randomize_delay"] else 0.0
            return float(downloader._jitter)
        randomize = own.get("randomize_delay", getattr(downloader, "randomize_delay", False))
        return 0.5 if randomize else 0.0


def _set_jitter(slot: Slot, jitter: float) -> None:
    setattr(slot, _JITTER_KEY, _jitter_value(jitter))


def _end_pending_delay(downloader: Downloader, slot: Slot) -> None:
    """Cancel the wait the slot scheduled under its former delay: until it
    fires, the slot sends nothing, and a request released at its reserved
    time would leave late. (internals_problems checks both names.)"""
    latercall = slot.latercall
    if latercall is None:
        return
    latercall.cancel()
    slot.latercall = None
    downloader._process_queue(slot)


def _clamp(slot: Slot, minimum: float, own_jitter: float) -> None:
    if slot.delay < minimum:
        slot.delay = minimum
    _set_jitter(slot, _fitting_jitter(own_jitter, minimum, slot.delay))
