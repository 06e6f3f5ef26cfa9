"""Where the time per request goes: each step of a request's path, timed in-process, per mode.

``python benchmarks/request_path.py`` runs, for each mode of benchmarks/crawl.py
(``none``: no robots.txt; ``builtin``: Scrapy's RobotsTxtMiddleware; ``rep``:
scrapy-rep's add-on at its defaults, the frontier on; ``rep-txt``: the same
with ``REP_META_ROBOTS = False``), one process that:

1. crawls ``--origins`` sites of 20 pages (benchmarks/_site.py's pages and
   robots.txt) through an in-memory download handler: no network, no
   server; the handler sends ``headers_received`` and ``bytes_received`` as
   Scrapy's HTTP handler does. This warms every cache: each origin's
   robots.txt is known and its download slot exists;
2. once the crawl is idle, times each step a page's request takes on the
   default path, on the crawl's own components (its scheduler queue, its
   downloader middleware chain, its signal receivers, its spider
   middlewares), each the best (minimum) of ``--repeat`` runs of
   ``--calls`` fresh requests, so a busy machine's stalls do not count:

   - the scheduler queue's ``push`` and ``pop`` (Scrapy's
     ``DownloaderAwarePriorityQueue``, or the frontier), in a steady state
     like the crawl's: ``--in-flight`` requests in the downloader, one pushed
     for each handed out, the oldest leaving the downloader at each step
     (``Downloader.active.remove``: the frontier is told);
   - the downloader middleware chain (Scrapy's manager, every enabled
     middleware, both ways) for an allowed URL of a known origin, and the
     robots middlewares' own calls in it;
   - each signal Scrapy sends per request and per response, with the
     receivers the crawl connected (scrapy-rep's and Scrapy's);
   - the spider middleware chain with and without the meta robots
     middleware (its page scan of ``<meta name="robots">`` and
     ``X-Robots-Tag``, its pass over the page's 19 links, Scrapy's layer
     for it), per page.

It prints a table, microseconds per request per step and mode, the sums,
and, to compare with, the crawl's own CPU time (the crawl's thread) per
download and per page, the best of ``--crawls`` crawls per mode run alone,
alternating, and its stats calls per download.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _child
import _site
from crawl import COMMON_SETTINGS, MODE_SETTINGS

MODES = ("none", "builtin", "rep", "rep-txt")
# The timed queue's steady state, as benchmarks/crawl.py's crawl (500 origins,
# CONCURRENT_REQUESTS = 100) had it on average at each pop (measured on
# 2026-11-28: Scrapy's queue held requests of 1.6 slots, the frontier of 14.9,
# with 68 requests in the downloader, in both).
SCRAPY_SLOTS = 2
FRONTIER_SLOTS = 15
IN_FLIGHT = 68
SIGNALS = (
    "request_reached_downloader",
    "request_left_downloader",
    "headers_received",
    "bytes_received",
    "response_received",
    "response_downloaded",
)
# scrapy-rep's robots.txt downloads connect receivers of these while they run
# (scrapy_rep._download): every other request meets them meanwhile.
WHILE_FETCHING = ("request_reached_downloader", "request_left_downloader", "bytes_received")


# ------------------------------------------------------------- the crawl, no network


def _handler_class() -> type:
    from scrapy.core.downloader.handlers.base import BaseDownloadHandler
    from scrapy.http import Headers
    from scrapy.responsetypes import responsetypes
    from scrapy.utils.httpobj import urlparse_cached

    class MemoryHandler(BaseDownloadHandler):
        """benchmarks/_site.py's pages from memory, with the signals of Scrapy's
        HTTP handler (``headers_received``, one ``bytes_received``)."""

        async def download_request(self, request: Any) -> Any:
            from scrapy import signals

            path = urlparse_cached(request).path
            if path == "/robots.txt":
                status, body, kind = 200, _site.ROBOTS_TXT, b"text/plain"
            elif path in _site.PATHS:
                status, body, kind = 200, _page(path), b"text/html; charset=utf-8"
            else:
                status, body, kind = 404, b"not found", b"text/plain"
            headers = Headers({b"Content-Type": kind, b"Content-Length": str(len(body))})
            sent = self.crawler.signals
            sent.send_catch_log(
                signal=signals.headers_received,
                headers=headers,
                body_length=len(body),
                request=request,
                spider=self.crawler.spider,
            )
            sent.send_catch_log(
                signal=signals.bytes_received,
                data=body,
                request=request,
                spider=self.crawler.spider,
            )
            cls = responsetypes.from_args(headers=headers, url=request.url, body=body)
            return cls(url=request.url, status=status, headers=headers, body=body)

    return MemoryHandler


_PAGES: dict[str, bytes] = {}


def _page(path: str) -> bytes:
    body = _PAGES.get(path)
    if body is None:
        body = _PAGES[path] = _site._page(path)
    return body


def child(job: dict[str, Any]) -> dict[str, Any]:
    from scrapy import Request, Spider, signals
    from scrapy.crawler import CrawlerProcess

    mode = job["mode"]
    origins = [f"http://site{n}.test" for n in range(job["origins"])]

    class PathSpider(Spider):
        name = "request_path"

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.result: dict[str, Any] = {}
            self.cpu = 0.0
            self.pages = 0

        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> PathSpider:
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.opened, signal=signals.spider_opened)
            crawler.signals.connect(spider.idle, signal=signals.spider_idle)
            return spider

        def opened(self) -> None:
            self.cpu = time.thread_time()

        async def start(self) -> Any:
            for origin in origins:
                yield Request(origin + "/", callback=self.parse)

        def parse(self, response: Any) -> Any:
            self.pages += 1
            if not job.get("follow", True):  # one page per origin
                return
            skip = job.get("skip", ())  # paths not requested (a baseline without them)
            for href in response.css("a::attr(href)").getall():
                if href not in skip:
                    yield Request(response.urljoin(href), callback=self.parse)

        def idle(self) -> None:
            if self.result:
                return
            cpu = time.thread_time() - self.cpu
            stats = self.crawler.stats.get_stats()
            downloads = stats.get("downloader/response_count", 0)
            self.result = {
                "crawl_cpu_us": 1e6 * cpu / max(downloads, 1),
                "crawl_cpu_page_us": 1e6 * cpu / max(self.pages, 1),
                "downloads": downloads,
                "pages": self.pages,
                "stats_calls": _STATS_CALLS[0] / max(downloads, 1),
                "steps": time_steps(self.crawler, origins, job) if job["steps"] else {},
            }

    settings = {
        **COMMON_SETTINGS,
        **MODE_SETTINGS[mode],
        "LOG_LEVEL": "WARNING",
        "DOWNLOAD_HANDLERS": {"http": _handler_class()},
        **job.get("settings", {}),
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(PathSpider)
    _count_stats_calls(crawler)
    process.crawl(crawler)
    process.start()
    result = crawler.spider.result
    result["mode"] = mode
    return result


_STATS_CALLS = [0]


def _count_stats_calls(crawler: Any) -> None:
    """Count the crawl's stats calls (inc_value, set_value, max_value, min_value)."""
    from scrapy.statscollectors import StatsCollector

    for name in ("inc_value", "set_value", "max_value", "min_value"):
        original = getattr(StatsCollector, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            _STATS_CALLS[0] += 1
            return _original(self, *args, **kwargs)

        setattr(StatsCollector, name, counted)


# ------------------------------------------------------------------ the timings


def _settle(coro: Any, steps: int = 1) -> Any:
    """Run a coroutine that must not wait to its end, at once (``steps``: how
    many bare yields, a ``sleep(0)``, it may make)."""
    for _ in range(steps):
        try:
            waited = coro.send(None)
        except StopIteration as done:
            return done.value
        if waited is not None:
            break
    coro.close()
    raise RuntimeError("waited: a cached origin's request should not")


def _without_gc(run: Any) -> Any:
    """``run()`` with the garbage collector off, as timeit does: a collection
    lands on whichever call allocates at the wrong moment."""
    gc.collect()
    gc.disable()
    try:
        return run()
    finally:
        gc.enable()


def _clock_cost() -> float:
    """Nanoseconds two thread_time_ns calls add around a timed call."""
    clock = time.thread_time_ns
    best = float("inf")
    for _ in range(5):
        total = 0
        for _ in range(10_000):
            started = clock()
            total += clock() - started
        best = min(best, total / 10_000)
    return best


def time_steps(crawler: Any, origins: list[str], job: dict[str, Any]) -> dict[str, float]:
    """Microseconds per request of each step (best of job["repeat"] runs)."""
    from scrapy import Request
    from scrapy.utils.httpobj import urlparse_cached

    repeat, calls = job["repeat"], job["calls"]
    engine = crawler.engine
    downloader = engine.downloader
    overhead = _clock_cost()
    paths = [p for p in _site.PATHS if p.encode() not in _site.DISALLOWED]
    serial = [0]

    def fresh(count: int, among: list[str] | None = None) -> list[Any]:
        """New requests for allowed pages of known origins, URLs parsed (as
        OffsiteMiddleware does before the scheduler)."""
        among = among or origins
        requests = []
        for n in range(count):
            serial[0] += 1
            origin = among[n % len(among)]
            request = Request(f"{origin}{paths[n % len(paths)]}?v={serial[0]}")
            urlparse_cached(request)
            requests.append(request)
        return requests

    steps: dict[str, float] = {}

    def best_of(name: str, run: Any) -> None:
        """``run()`` returns (nanoseconds, calls) for one run: keep the best."""
        best = float("inf")
        for _ in range(repeat):
            nanoseconds, count = _without_gc(run)
            best = min(best, nanoseconds / max(count, 1))
        steps[name] = max(best, 0.0) / 1000

    def differential(name: str, run: Any, present: bool) -> None:
        """What a component adds: ``run(without)`` timed with it and without
        it, alternately, each the best of the runs (0 when it is not there)."""
        if not present:
            steps[name] = 0.0
            return
        best = {False: float("inf"), True: float("inf")}
        for _ in range(repeat):
            for without in (False, True):
                nanoseconds, count = _without_gc(lambda without=without: run(without))
                best[without] = min(best[without], nanoseconds / max(count, 1))
        steps[name] = (best[False] - best[True]) / 1000
        steps[name + ".base"] = best[True] / 1000

    # -- the scheduler queue: push and pop in a crawl's steady state ----------------
    scheduler = getattr(engine, "scheduler", None) or engine._slot.scheduler
    queue = scheduler.mqs
    steps_meta = {"queue": f"{type(queue).__module__}.{type(queue).__qualname__}"}
    in_flight = job["in_flight"]
    backlog = job["backlog"]
    frontier = "scrapy_rep" in type(queue).__module__
    wanted = job["queued_slots"] or (FRONTIER_SLOTS if frontier else SCRAPY_SLOTS)
    queued = origins[: max(1, min(len(origins), wanted))]
    steps_meta["queued_slots"] = len(queued)  # type: ignore[assignment]

    def slot_of(request: Any) -> Any:
        return downloader.slots.get(downloader.get_slot_key(request))

    def queue_run(part: str) -> tuple[float, int]:
        clock = time.thread_time_ns
        for request in fresh(len(queued) * backlog, queued):
            queue.push(request)
        flying: deque[Any] = deque()
        spent = {"push": 0, "pop": 0, "leave": 0}
        handed = 0
        new = fresh(calls, queued)
        for request in new:
            started = clock()
            popped = queue.pop()
            spent["pop"] += clock() - started - overhead
            if popped is not None:
                handed += 1
                # what Scrapy's downloader does as the request enters its slot
                popped.meta["download_slot"] = downloader.get_slot_key(popped)
                downloader.active.add(popped)
                slot = slot_of(popped)
                if slot is not None:
                    slot.active.add(popped)
                flying.append((popped, slot))
            if len(flying) > in_flight:
                done, slot = flying.popleft()
                if slot is not None:
                    slot.active.discard(done)
                started = clock()
                downloader.active.remove(done)  # Scrapy's fetch, when it is done
                spent["leave"] += clock() - started - overhead
            started = clock()
            queue.push(request)
            spent["push"] += clock() - started - overhead
        for done, slot in flying:
            if slot is not None:
                slot.active.discard(done)
            downloader.active.remove(done)
        while len(queue):
            queue.pop()
        if part == "pop" and handed < calls * 0.99:
            raise RuntimeError(f"the queue handed out {handed} of {calls}")
        return spent[part], calls

    for part in ("push", "pop", "leave"):
        best_of(f"queue.{part}", lambda part=part: queue_run(part))

    # -- the robots middlewares in the downloader middleware chain -----------------
    # The chain (Scrapy's manager, every enabled middleware, both ways) timed with
    # and without the robots middlewares' methods, alternately: what they add,
    # Scrapy's dispatch of each method included.
    manager = downloader.middleware
    answers: dict[Any, Any] = {}

    async def download(request: Any) -> Any:
        return answers[request]

    def page_response(request: Any) -> Any:
        from scrapy.http import HtmlResponse

        body = _page(urlparse_cached(request).path)
        return HtmlResponse(
            url=request.url,
            body=body,
            headers={b"Content-Type": b"text/html; charset=utf-8"},
            request=request,
        )

    def release(request: Any) -> None:
        """Give back the place scrapy-rep's slot limit counted (as Scrapy's
        request_left_downloader does after each download): untimed."""
        from scrapy import signals

        crawler.signals.send_catch_log(
            signal=signals.request_left_downloader, request=request, spider=crawler.spider
        )

    robots = [
        mw
        for mw in manager.middlewares
        if type(mw).__name__ in ("RobotsTxtMiddleware", "BoundedDecompressionMiddleware")
    ]
    ours = [
        (name, getattr(mw, name))
        for mw in robots
        for name in ("process_request", "process_response")
        if name in type(mw).__dict__ and hasattr(mw, name)  # absent when not needed
    ]

    def chain_time(without: bool) -> tuple[float, int]:
        saved = {name: list(methods) for name, methods in manager.methods.items()}
        if without:
            for name, method in ours:
                methods = manager.methods[name]
                for present in list(methods):
                    if present == method:
                        methods.remove(present)
        try:
            requests = fresh(calls)
            for request in requests:
                answers[request] = page_response(request)
            clock = time.thread_time_ns
            total = 0
            for request in requests:
                started = clock()
                _settle(manager.download_async(download, request))
                total += clock() - started - overhead
                release(request)
            answers.clear()
        finally:
            for name, methods in manager.methods.items():
                methods.clear()
                methods.extend(saved[name])
        return total, calls

    differential("robots_mw.chain", chain_time, bool(ours))
    for middleware in robots:
        own = type(middleware).__module__.startswith("scrapy_rep")
        label = "rep" if own else "scrapy"
        name = type(middleware).__name__
        for method_name in ("process_request", "process_response"):
            if method_name not in type(middleware).__dict__ or not hasattr(middleware, method_name):
                continue

            def method_run(method_name: str = method_name, middleware: Any = middleware) -> Any:
                requests = fresh(calls)
                bound = getattr(middleware, method_name)
                pairs = [(request, page_response(request)) for request in requests]
                clock = time.thread_time_ns
                total = 0
                for request, response in pairs:
                    started = clock()
                    if method_name == "process_request":
                        result = bound(request)
                    else:
                        result = bound(request, response)
                    if hasattr(result, "send"):
                        _settle(result)
                    total += clock() - started - overhead
                    if method_name == "process_request":
                        release(request)
                return total, calls

            best_of(f"{label}.{name}.{method_name}", method_run)

    # -- signals per request and per response: what the robots components' receivers add --
    from pydispatch.dispatcher import getAllReceivers, liveReceivers
    from scrapy import signals

    def robots_receivers(signal: Any) -> list[Any]:
        found = []
        for receiver in liveReceivers(getAllReceivers(crawler.signals.sender, signal)):
            owner = getattr(receiver, "__self__", receiver)
            module = getattr(type(owner), "__module__", "") or ""
            if module.startswith("scrapy_rep") or "robotstxt" in module:
                found.append(receiver)
        return found

    def signal_time(name: str, without: bool) -> tuple[float, int]:
        signal = getattr(signals, name)
        taken = robots_receivers(signal) if without else []
        for receiver in taken:
            crawler.signals.disconnect(receiver, signal=signal)
        try:
            requests = fresh(calls)
            responses = [page_response(request) for request in requests]
            send = crawler.signals.send_catch_log
            spider = crawler.spider
            clock = time.thread_time_ns
            total = 0
            for request, response in zip(requests, responses, strict=True):
                kwargs: dict[str, Any] = {"request": request, "spider": spider}
                if name in ("response_received", "response_downloaded"):
                    kwargs["response"] = response
                elif name == "headers_received":
                    kwargs.update(headers=response.headers, body_length=len(response.body))
                elif name == "bytes_received":
                    kwargs["data"] = response.body
                started = clock()
                send(signal=signal, **kwargs)
                total += clock() - started - overhead
        finally:
            for receiver in taken:
                crawler.signals.connect(receiver, signal=signal)
        return total, calls

    for name in SIGNALS:
        counted = len(robots_receivers(getattr(signals, name)))
        steps[f"receivers.{name}"] = counted
        differential(
            f"signal.{name}", lambda without, name=name: signal_time(name, without), counted > 0
        )
    downloads = _own_downloads(crawler)
    if downloads is not None:
        downloads._connect(True)
        try:
            for name in WHILE_FETCHING:
                differential(
                    f"fetching.signal.{name}",
                    lambda without, name=name: signal_time(name, without),
                    True,
                )
        finally:
            downloads._connect(False)

    # -- spider middlewares: the page scan and the pass over its links ----------------
    meta = [
        mw
        for mw in engine.scraper.spidermw.middlewares
        if type(mw).__name__ == "MetaRobotsMiddleware"
    ]
    if meta:
        middleware = meta[0]

        def scan_run() -> tuple[float, int]:
            requests = fresh(calls)
            responses = [page_response(request) for request in requests]
            for response in responses:  # decoded once per page: the spider's selectors need it
                response.text  # noqa: B018
            clock = time.thread_time_ns
            total = 0
            for response in responses:
                started = clock()
                middleware.process_spider_input(response)
                total += clock() - started - overhead
            return total, calls

        best_of("rep.meta.scan", scan_run)

        def links_time(without: bool) -> tuple[float, int]:
            requests = fresh(calls // 10)
            responses = [page_response(request) for request in requests]
            links = [Request(f"{origins[0]}{p}") for p in _site.PATHS[1:]]
            for response in responses:  # scanned already (process_spider_input)
                middleware.process_spider_input(response)

            async def output() -> Any:
                for link in links:
                    yield link

            async def drain(response: Any) -> None:
                source = output()
                if not without:
                    source = middleware.process_spider_output_async(response, source)
                async for _ in source:
                    pass

            clock = time.thread_time_ns
            total = 0
            for response in responses:
                started = clock()
                _settle(drain(response))
                total += clock() - started - overhead
            return total, len(responses)

        differential("rep.meta.links", links_time, True)

        # The whole spider middleware chain (Scrapy's manager, every enabled
        # spider middleware: input, then the callback's 19 links through each
        # output layer) with and without the meta robots middleware's methods.
        spidermw = engine.scraper.spidermw
        links = [Request(f"{origins[0]}{p}") for p in _site.PATHS[1:]]

        async def scrape(response: Any, request: Any) -> Any:
            return list(links)

        def bound_to(entry: Any) -> bool:
            parts = entry if isinstance(entry, tuple) else (entry,)
            return any(getattr(part, "__self__", None) is middleware for part in parts)

        async def scrape_all(response: Any) -> None:
            output = await spidermw.scrape_response_async(scrape, response, response.request)
            if hasattr(output, "__aiter__"):
                async for _ in output:
                    pass
            else:  # Scrapy 2.14: a synchronous chain for a synchronous output
                for _ in output:
                    pass

        def spider_chain_time(without: bool) -> tuple[float, int]:
            saved = {name: list(methods) for name, methods in spidermw.methods.items()}
            if without:
                for methods in spidermw.methods.values():
                    kept = [entry for entry in methods if not bound_to(entry)]
                    methods.clear()
                    methods.extend(kept)
            try:
                requests = fresh(calls // 5)
                responses = [page_response(request) for request in requests]
                for response in responses:
                    response.text  # noqa: B018  (decoded once per page, as the spider's selectors do)
                clock = time.thread_time_ns
                total = 0
                for response in responses:
                    started = clock()
                    _settle(scrape_all(response), steps=100)
                    total += clock() - started - overhead
            finally:
                for name, methods in spidermw.methods.items():
                    methods.clear()
                    methods.extend(saved[name])
            return total, len(responses)

        differential("meta_mw.chain", spider_chain_time, True)

    steps["_overhead_ns"] = overhead
    steps.update(steps_meta)  # type: ignore[arg-type]
    return steps


def _own_downloads(crawler: Any) -> Any:
    """scrapy-rep's robots.txt downloads (None without scrapy-rep)."""
    try:
        from scrapy_rep._robots import robots_service
    except ImportError:
        return None
    service = robots_service(crawler)
    if service is None:
        return None
    return service.fetcher.download.files


# ------------------------------------------------------------------ the table

ROWS: list[tuple[str, str]] = [
    ("queue.push", "scheduler queue: push"),
    ("queue.pop", "scheduler queue: pop"),
    ("queue.leave", "scheduler queue: told the request left"),
    ("robots_mw.chain", "robots middlewares in the downloader chain"),
    ("signal.request_reached_downloader", "receivers: request_reached_downloader"),
    ("signal.request_left_downloader", "receivers: request_left_downloader"),
    ("signal.headers_received", "receivers: headers_received"),
    ("signal.bytes_received", "receivers: bytes_received (one chunk)"),
    ("signal.response_received", "receivers: response_received"),
    ("signal.response_downloaded", "receivers: response_downloaded"),
    ("meta_mw.chain", "meta robots middleware in the spider chain"),
]
DETAIL_ROWS: list[tuple[str, str]] = [
    ("scrapy.RobotsTxtMiddleware.process_request", "Scrapy's process_request alone"),
    ("rep.RobotsTxtMiddleware.process_request", "scrapy-rep's process_request alone"),
    ("rep.RobotsTxtMiddleware.process_response", "scrapy-rep's process_response alone"),
    (
        "rep.BoundedDecompressionMiddleware.process_response",
        "BoundedDecompression process_response alone",
    ),
    ("robots_mw.chain.base", "the chain without them (Scrapy's middlewares)"),
    ("rep.meta.scan", "meta robots: page scan alone (process_spider_input)"),
    ("rep.meta.links", "meta robots: its pass over the page's 19 links alone"),
    ("meta_mw.chain.base", "the spider chain without it, per page"),
]


def print_table(results: dict[str, dict[str, Any]]) -> None:
    modes = [mode for mode in MODES if mode in results]
    width = 52
    head = f"{'µs per request (best of runs)':<{width}}" + "".join(f"{m:>9}" for m in modes)
    print(head)
    print("-" * len(head))
    totals = dict.fromkeys(modes, 0.0)
    for key, label in ROWS:
        values = [results[m].get("steps", {}).get(key) for m in modes]
        if all(v is None for v in values):
            continue
        cells = []
        for mode, value in zip(modes, values, strict=True):
            cells.append(f"{value:9.2f}" if value is not None else f"{'-':>9}")
            totals[mode] += value or 0.0
        print(f"{label:<{width}}" + "".join(cells))
    print("-" * len(head))
    print(f"{'sum':<{width}}" + "".join(f"{totals[m]:9.2f}" for m in modes))
    if "none" in totals:
        print(
            f"{'sum minus none':<{width}}"
            + "".join(f"{totals[m] - totals['none']:9.2f}" for m in modes)
        )
    print()
    fetching = [
        (key, f"  while a robots.txt download runs: {key.split('.')[-1]}")
        for key in (f"fetching.signal.{name}" for name in WHILE_FETCHING)
    ]
    for key, label in [*DETAIL_ROWS, *fetching]:
        values = [results[m].get("steps", {}).get(key) for m in modes]
        if all(v is None for v in values):
            continue
        print(
            f"{label:<{width}}"
            + "".join(f"{v:9.2f}" if v is not None else f"{'-':>9}" for v in values)
        )
    print()
    print(
        f"{'crawl: thread CPU µs per download (best crawl)':<{width}}"
        + "".join(f"{results[m].get('crawl_cpu_us', 0):9.0f}" for m in modes)
    )
    print(
        f"{'crawl: thread CPU µs per page (best crawl)':<{width}}"
        + "".join(f"{results[m].get('crawl_cpu_page_us', 0):9.0f}" for m in modes)
    )
    print(
        f"{'crawl: stats calls per download':<{width}}"
        + "".join(f"{results[m].get('stats_calls', 0):9.2f}" for m in modes)
    )
    queues = {m: results[m].get("steps", {}).get("queue", "?") for m in modes}
    print("\nqueues: " + "; ".join(f"{m}: {q}" for m, q in queues.items()))
    slots = {m: results[m].get("steps", {}).get("queued_slots", "?") for m in modes}
    print("timed queue's slots: " + "; ".join(f"{m}: {n}" for m, n in slots.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=200, help="sites crawled and queued")
    parser.add_argument("--calls", type=int, default=5000, help="requests per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="runs per step, the best kept")
    parser.add_argument(
        "--in-flight", type=int, default=IN_FLIGHT, help="requests in the downloader"
    )
    parser.add_argument("--backlog", type=int, default=5, help="requests queued per slot")
    parser.add_argument(
        "--queued-slots",
        type=int,
        default=0,
        help=f"slots holding requests in the timed queue (default: {SCRAPY_SLOTS} for "
        f"Scrapy's queue, {FRONTIER_SLOTS} for the frontier, as in benchmarks/crawl.py)",
    )
    parser.add_argument(
        "--crawls",
        type=int,
        default=5,
        help="crawls per mode, alternating, for the crawl's CPU per page (the best kept)",
    )
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        job = json.loads(Path(args.child).read_text())
        Path(args.child).with_suffix(".out").write_text(json.dumps(child(job)))
        return
    results: dict[str, dict[str, Any]] = {}
    modes = [mode for mode in args.modes.split(",") if mode]
    for mode in modes:
        job = {
            "steps": True,
            "mode": mode,
            "origins": args.origins,
            "calls": args.calls,
            "repeat": args.repeat,
            "in_flight": args.in_flight,
            "backlog": args.backlog,
            "queued_slots": args.queued_slots,
        }
        result, _ = _child.run_child(__file__, job)
        if "error" in result:
            print(f"{mode}: failed: {result['error']}", file=sys.stderr)
            continue
        results[mode] = result
        print(f"  {mode}: done", file=sys.stderr, flush=True)
    for round_ in range(args.crawls):  # the crawls alone, without the timings
        for mode in results:
            job = {"steps": False, "mode": mode, "origins": args.origins}
            crawled, _ = _child.run_child(__file__, job)
            if "error" in crawled:
                continue
            kept = results[mode]
            for key in ("crawl_cpu_us", "crawl_cpu_page_us"):
                kept[key] = min(kept[key], crawled[key]) if round_ else crawled[key]
        print(f"  crawls, round {round_ + 1}: done", file=sys.stderr, flush=True)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
