"""The deadline of one of scrapy-rep's own downloads, on scrapy-rep's clock.

A robots.txt or tdmrep.json request carries the time its fetch has left as
``download_timeout``, which Scrapy's HTTP/1.1 handler keeps in real time.
:func:`clock_deadline` keeps it on scrapy-rep's clock too (a test that advances
the clock sees the fetch end) and, when that comes first, fires the handler's
own timer early: the download ends through Scrapy's own code (its exception,
``process_exception``, stats) as a real timeout would. With another handler,
or a request still queued in its slot, nothing is fired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from scrapy_rep import _timers

if TYPE_CHECKING:
    from scrapy import Request

_HANDLER_CHECK = "_cb_timeout"
"""The callback by which Scrapy's HTTP/1.1 handler (ScrapyAgent, 2.14 to 2.19)
turns its cancelled download into its timeout error."""


def clock_deadline(request: Request) -> _timers.Timer | None:
    """A timer that ends ``request``'s download when its ``download_timeout``
    has passed on scrapy-rep's clock (cancel it once the download ended)."""
    seconds = request.meta.get("download_timeout")
    if not seconds:
        return None
    return _timers.call_later(seconds, _expire, request)


def _expire(request: Request) -> None:
    found = _handler_timer(request)
    if found is None:
        return  # not in the handler yet, or another handler: real time ends it
    call, download = found
    # Scrapy's timer, when it runs, calls download.cancel(); the handler then
    # sees its timer inactive and raises its timeout error. Run that now.
    call.cancel()
    download.cancel()


def _handler_timer(request: Request) -> tuple[Any, Deferred[Any]] | None:
    """Scrapy's pending timeout call for ``request`` and the download it cancels."""
    from twisted.internet import reactor

    calls: list[Any] = list(getattr(reactor, "getDelayedCalls", list)())
    for call in calls:
        function = call.func
        download = getattr(function, "__self__", None)
        if not isinstance(download, Deferred) or getattr(function, "__name__", "") != "cancel":
            continue
        for (callback, args, _), _errback in _chain(download):
            if (
                args
                and args[0] is request
                and getattr(callback, "__name__", "") == _HANDLER_CHECK
                and call.active()
            ):
                return call, download
    return None


def _chain(deferred: Deferred[Any]) -> list[Any]:
    """The callbacks still to run on ``deferred``: ``_callbacks`` since Twisted
    25.5 deprecated the ``callbacks`` attribute, which older releases keep."""
    own = vars(deferred)
    chain = own.get("_callbacks", own.get("callbacks"))
    return chain if isinstance(chain, list) else []
