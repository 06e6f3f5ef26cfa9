"""Broad-crawl benchmark: what do Crawl-delay sites cost the rest of a broad crawl?

``make bench-broad`` (``python benchmarks/broad.py``) serves many small sites
from one local process (each its own loopback address, so each its own
download slot, as real hosts are), 15 % of them (``--polite-share``) asking
``Crawl-delay: 2`` (``--crawl-delay``) in their robots.txt, and crawls them
with the sites' pages interleaved as a broad crawl finds them: every site's
home page, then every site's first page, and so on (``--discovery home``:
each home page yields the rest of its site instead). The crawl ends when
every page of the other sites is done (the polite sites' remaining pages are
then dropped: they would take ``pages x Crawl-delay``).

Each mode runs in its own process, one after the other:

- ``alone``: scrapy-rep, the Crawl-delay sites left out of the crawl: the
  time the other sites' pages take without them (the baseline);
- ``none``: ROBOTSTXT_OBEY = False (no robots.txt, no Crawl-delay);
- ``builtin``: Scrapy's RobotsTxtMiddleware (robots.txt, no Crawl-delay);
- ``rep``: scrapy-rep with the crawl's queue kept (``SCHEDULER_PRIORITY_QUEUE``
  set explicitly: Scrapy's ``DownloaderAwarePriorityQueue``, or the FIFO
  queue below), so Crawl-delay requests wait inside Scrapy's downloader;
- ``rep-queue``: scrapy-rep with its own queue, ``scrapy_rep.PolitePriorityQueue``
  (left out, with a note, when this scrapy-rep has no such class);
- ``alone-queue``: ``alone`` with scrapy-rep's queue, the baseline of
  ``rep-queue`` on its own queue (the queue's robots.txt prefetching makes
  the other sites faster than in ``alone``).

``--queue fifo`` makes the crawl's queue a plain ``ScrapyPriorityQueue`` over
FIFO memory queues (head-of-line blocking at its worst) for every mode;
``rep-queue`` then runs scrapy-rep's queue over FIFO memory queues.

Printed side by side: the other sites' pages per second (from the spider's
start to their last page) and the time they took, the polite sites' pages
done meanwhile and the gaps between their requests as the server saw them
(smallest and median, against the Crawl-delay they asked), the peak memory
(maximum RSS of the crawl's process, measured in it), and each mode's other
pages/s against ``alone`` and ``alone-queue`` (the cost of the Crawl-delay
sites to the rest of the crawl), ``none`` and ``builtin``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import _child
from _site import ServerProcess, loopback_hosts, raise_open_files_limit

QUEUES = {
    "default": {"SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue"},
    "fifo": {
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
    },
}
REP_QUEUE = "scrapy_rep.PolitePriorityQueue"
REP = {"ROBOTSTXT_OBEY": True, "ADDONS": {"scrapy_rep.Addon": 100}, "REP_META_ROBOTS": False}
MODES = ("alone", "alone-queue", "none", "builtin", "rep", "rep-queue")
QUEUE_MODES = ("rep-queue", "alone-queue")  # scrapy-rep's queue
COMMON_SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 100,
    "DOWNLOAD_DELAY": 0,
    "LOG_LEVEL": "WARNING",
    "USER_AGENT": "BenchBot/1.0 (+http://127.0.0.1/bot.html)",
    "ROBOTSTXT_USER_AGENT": "BenchBot",
    "TELNETCONSOLE_ENABLED": False,
    "REMOTE_CONTROL_ENABLED": False,
    "RETRY_ENABLED": False,
    "DOWNLOAD_TIMEOUT": 60,
}


def mode_settings(mode: str, queue: str) -> dict[str, Any]:
    """The settings of one mode over the crawl's queue (``default`` or ``fifo``)."""
    chosen = QUEUES[queue]
    if mode == "none":
        return {"ROBOTSTXT_OBEY": False, **chosen}
    if mode == "builtin":
        return {"ROBOTSTXT_OBEY": True, **chosen}
    if mode in ("rep", "alone"):
        return {**REP, **chosen}
    if mode in QUEUE_MODES:
        under = {k: v for k, v in chosen.items() if k != "SCHEDULER_PRIORITY_QUEUE"}
        return {**REP, **under, "SCHEDULER_PRIORITY_QUEUE": REP_QUEUE}
    raise ValueError(f"unknown mode {mode!r}")


def rep_queue_missing() -> str | None:
    """Why ``rep-queue`` cannot run here (None: it can)."""
    try:
        import scrapy_rep
    except ImportError as error:
        return f"scrapy_rep cannot be imported: {error}"
    if not hasattr(scrapy_rep, "PolitePriorityQueue"):
        return f"{REP_QUEUE} does not exist in this scrapy-rep yet"
    return None


# ------------------------------------------------------------------------ the sites


class Served:
    """What the sites answered: page arrival times of the polite sites."""

    def __init__(self, polite: set[int]) -> None:
        self.polite = polite
        self.reset()

    def reset(self) -> None:
        self.times: dict[int, list[float]] = defaultdict(list)
        self.pages = 0
        self.robots = 0

    def summary(self, delay: float) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "robots_requests": self.robots,
            "polite_pages": sum(len(times) for times in self.times.values()),
            **gap_summary(self.times.values(), delay),
        }


def _answer(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


FILLER = b"Lorem ipsum dolor sit amet. " * 40
PAGE = _answer("200 OK", b"<html><body><p>" + FILLER + b"</p></body></html>", "text/html")


class SiteProtocol(asyncio.Protocol):
    def __init__(self, origin: int, served: Served, robots: bytes, delay: float) -> None:
        self.origin = origin
        self.served = served
        self.robots = robots
        self.delay = delay
        self.polite = origin in served.polite
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            parts = head.split(b" ", 2)  # GET requests only
            path = parts[1] if len(parts) > 1 else b"/"
            self.transport.write(self._answer(path))

    def _answer(self, path: bytes) -> bytes:
        served = self.served
        if path == b"/robots.txt":
            served.robots += 1
            return self.robots
        if path.startswith(b"/__"):
            if path == b"/__reset":
                served.reset()
            body = json.dumps(served.summary(self.delay)).encode()
            return _answer("200 OK", body, "application/json")
        served.pages += 1
        if self.polite:
            served.times[self.origin].append(time.monotonic())
        return PAGE


def polite_indexes(sites: int, share: float) -> set[int]:
    """Which sites ask a Crawl-delay: ``share`` of them, spread evenly."""
    count = round(sites * share)
    return {int(i * sites / count) for i in range(count)} if count else set()


async def serve(sites: int, share: float, delay: float) -> None:
    raise_open_files_limit()
    loop = asyncio.get_running_loop()
    polite = polite_indexes(sites, share)
    served = Served(polite)
    hosts, shared_host = loopback_hosts(sites)
    polite_robots = _answer(
        "200 OK", f"User-agent: *\nCrawl-delay: {delay:g}\n".encode(), "text/plain"
    )
    other_robots = _answer("200 OK", b"User-agent: *\nDisallow: /private\n", "text/plain")
    servers = []
    origins = []
    for index, host in enumerate(hosts):
        robots = polite_robots if index in polite else other_robots
        server = await loop.create_server(
            lambda index=index, robots=robots: SiteProtocol(index, served, robots, delay),
            host,
            0,
            backlog=1024,
        )
        servers.append(server)
        origins.append(f"http://{host}:{server.sockets[0].getsockname()[1]}")
    ready = {"origins": origins, "polite": sorted(polite), "shared_host": shared_host}
    print(json.dumps(ready), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until our parent closes stdin
    for server in servers:
        server.close()


class Sites(ServerProcess):
    """The sites, served by this file in its own process (it ends when stdin closes)."""

    def __init__(self, sites: int, share: float, delay: float) -> None:
        super().__init__(__file__, "--serve", str(sites), str(share), str(delay))


# ------------------------------------------------------------------ crawl process


def crawl(job: dict[str, Any]) -> dict[str, Any]:
    """Run one mode's crawl in this process and return its measurements."""
    from scrapy import Request, Spider, signals
    from scrapy.crawler import CrawlerProcess
    from scrapy.exceptions import CloseSpider
    from scrapy.http import Response
    from twisted.python.failure import Failure

    origins: list[str] = job["origins"]
    polite = set(job["polite"])
    pages = job["pages"]
    polite_pages = job["polite_pages"]
    others_total = sum(pages for i in range(len(origins)) if i not in polite)

    class BroadSpider(Spider):
        name = "broad"

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.others = 0
            self.polite_done = 0
            self.failed_count: dict[str, int] = {}
            self.started = self.last_other = time.perf_counter()

        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BroadSpider:
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.opened, signal=signals.spider_opened)
            return spider

        def opened(self) -> None:
            self.started = self.last_other = time.perf_counter()

        def request(self, index: int, path: str) -> Request:
            url = origins[index] + path
            meta: dict[str, Any] = {"site": index}
            if job["shared_host"]:
                meta["download_slot"] = url.split("/")[2]
            return Request(url, callback=self.parse, errback=self.failed, meta=meta)

        async def start(self) -> Any:
            alone = job["mode"].startswith("alone")
            sites = [i for i in range(len(origins)) if not alone or i not in polite]
            if job["discovery"] == "home":
                for index in sites:
                    yield self.request(index, "/")
                return
            # interleaved: every site's home page, then every site's first page, ...
            for page in range(max(pages, polite_pages)):
                for index in sites:
                    if page < (polite_pages if index in polite else pages):
                        yield self.request(index, f"/p/{page}" if page else "/")

        def parse(self, response: Response) -> Any:
            index = response.meta["site"]
            if index in polite:
                self.polite_done += 1
            else:
                self._other_done()
            if job["discovery"] == "home" and response.url.endswith("/"):  # the rest of the site
                count = polite_pages if index in polite else pages
                for page in range(1, count):
                    yield self.request(index, f"/p/{page}")

        def _other_done(self) -> None:
            self.others += 1
            self.last_other = time.perf_counter()
            if self.others >= others_total:
                raise CloseSpider("other sites done")

        def failed(self, failure: Failure) -> None:
            name = type(failure.value).__name__
            self.failed_count[name] = self.failed_count.get(name, 0) + 1
            request = getattr(failure, "request", None)
            if request is not None and request.meta.get("site") not in polite:
                self._other_done()

    crawlers: list[Any] = []
    started, sent = stamp_sends({origins[i].split("/")[2] for i in polite}, crawlers)
    settings = {**COMMON_SETTINGS, **mode_settings(job["mode"], job["queue"])}
    settings["CLOSESPIDER_TIMEOUT"] = job["timeout"]
    settings["DOWNLOAD_HANDLERS"] = {"http": f"{__name__}.StampingHandler"}
    process = CrawlerProcess(settings, install_root_handler=job["verbose"])
    crawler = process.create_crawler(BroadSpider)
    crawlers.append(crawler)
    process.crawl(crawler)
    began = time.perf_counter()
    process.start()
    ended = time.perf_counter()
    spider = crawler.spider
    stats = crawler.stats.get_stats()
    return {
        "mode": job["mode"],
        "others": spider.others,
        "others_total": others_total,
        "seconds": spider.last_other - spider.started,
        "wall": ended - began,
        "polite_done": spider.polite_done,
        "failed": spider.failed_count,
        "finish_reason": stats.get("finish_reason"),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "started": gap_summary(started.values(), job["crawl_delay"]),
        "sent": gap_summary(sent.values(), job["crawl_delay"]),
        "rep_stats": {k: v for k, v in stats.items() if k.startswith("rep/")},
    }


def stamp_sends(
    hosts: set[str], crawlers: list[Any]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Record, for each page request to ``hosts``, when its download slot
    started it (``Slot.lastseen``: the slot's own decision, which its delay
    spaces) and when it reached the HTTP handler (a task later: on a busy
    event loop, that lag blurs the gaps, and the server's view more so)."""
    from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

    started: dict[str, list[float]] = defaultdict(list)
    sent: dict[str, list[float]] = defaultdict(list)

    class StampingHandler(HTTP11DownloadHandler):
        async def download_request(self, request: Any) -> Any:
            host = request.url.split("/")[2]
            if host in hosts and not request.url.endswith("/robots.txt"):
                sent[host].append(time.monotonic())
                slots = crawlers[0].engine.downloader.slots
                slot = slots.get(request.meta.get("download_slot"))
                if slot is not None:
                    started[host].append(slot.lastseen)
            return await super().download_request(request)

    globals()["StampingHandler"] = StampingHandler
    return started, sent


def gap_summary(series: Any, delay: float) -> dict[str, Any]:
    """Smallest and median gap between consecutive times of each series, and
    how many series had a gap under ``delay``."""
    gaps = []
    under = 0
    for times in series:
        mine = [b - a for a, b in itertools.pairwise(sorted(times))]
        gaps += mine
        under += bool(mine) and min(mine) < delay * 0.9
    return {
        "gaps": len(gaps),
        "min_gap": min(gaps) if gaps else None,
        "median_gap": statistics.median(gaps) if gaps else None,
        "sites_under_delay": under,
    }


def child_main(job_path: str) -> None:
    raise_open_files_limit()
    job = json.loads(Path(job_path).read_text())
    result = crawl(job)
    Path(job_path).with_suffix(".out").write_text(json.dumps(result))


# -------------------------------------------------------------------- orchestration


def run_child(sites: Sites, job: dict[str, Any]) -> dict[str, Any]:
    sites.control("/__reset")
    result, stderr = _child.run_child(__file__, job)
    served = sites.control("/__stats")
    if "error" in result:
        return result
    if job["verbose"]:
        print(stderr[-5000:], file=sys.stderr)
    result["served"] = served
    return result


def _gap(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_results(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n{'mode':<11} {'others/s':>8} {'others s':>8} {'done':>11} {'polite':>6} "
        f"{'min gap':>7} {'median':>7} {'< delay':>7} {'sent min':>8} {'seen min':>8} "
        f"{'peak MB':>7} {'held':>6}"
    )
    for mode, result in results.items():
        if "error" in result:
            print(f"{mode:<11} failed: {result['error']}")
            continue
        started, sent, served = result["started"], result["sent"], result["served"]
        rate = result["others"] / result["seconds"] if result["seconds"] > 0 else 0.0
        held = result["rep_stats"].get("rep/slot_limit/held", 0)
        print(
            f"{mode:<11} {rate:>8.0f} {result['seconds']:>8.1f} "
            f"{result['others']:>5}/{result['others_total']:<5} {served['polite_pages']:>6} "
            f"{_gap(started['min_gap']):>7} {_gap(started['median_gap']):>7} "
            f"{started['sites_under_delay']:>7} {_gap(sent['min_gap']):>8} "
            f"{_gap(served['min_gap']):>8} {result['peak_mb']:>7.0f} {held:>6}"
        )
    ok = {
        mode: result["others"] / result["seconds"]
        for mode, result in results.items()
        if "error" not in result and result["seconds"] > 0
    }
    print("\nthe other sites' pages took:")
    for mode, rate in ok.items():
        against = [
            f"{ok[base] / rate:.2f}x the time of {base}"
            for base in ("alone", "alone-queue", "none", "builtin")
            if base in ok and base != mode and not mode.startswith("alone")
        ]
        if against:
            print(f"  {mode:<11} " + ", ".join(against))
    others = next(iter(results.values()), {}).get("others_total")
    print(
        f"\n(others/s, others s: the {others} pages of sites without a Crawl-delay, from the"
        " spider's start to the last of them;\n done: those done when the crawl ended;"
        " polite: pages of the Crawl-delay sites served meanwhile;\n min gap, median: seconds"
        " between two requests the download slot of one Crawl-delay site started\n"
        f" (Crawl-delay: {args.crawl_delay:g} s); < delay: Crawl-delay sites with a gap 10 %"
        " or more under it;\n sent min, seen min: the smallest gap when requests reached the"
        " HTTP handler, and as the\n server saw them (both blurred by the lag of a busy event"
        " loop); peak MB: the crawl\n process's maximum RSS; held: requests scrapy-rep held for"
        " a place in their slot,\n rep/slot_limit/held)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=300)
    parser.add_argument("--polite-share", type=float, default=0.15)
    parser.add_argument("--pages", type=int, default=20, help="pages per site (home included)")
    parser.add_argument(
        "--polite-pages", type=int, help="pages per Crawl-delay site (default: --pages)"
    )
    parser.add_argument("--crawl-delay", type=float, default=2.0)
    parser.add_argument("--queue", choices=sorted(QUEUES), default="default")
    parser.add_argument(
        "--discovery",
        choices=("interleaved", "home"),
        default="interleaved",
        help="requests from the start, one page of every site in turn (interleaved), or "
        "each site's pages yielded by its home page (home)",
    )
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--timeout", type=float, default=300, help="seconds after which a mode's crawl stops"
    )
    parser.add_argument("--verbose", action="store_true", help="the crawls' logs on stderr")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    if args.serve:
        asyncio.run(serve(int(args.serve[0]), float(args.serve[1]), float(args.serve[2])))
        return

    modes = [mode for mode in args.modes.split(",") if mode]
    missing = rep_queue_missing() if set(QUEUE_MODES) & set(modes) else None
    if missing:
        modes = [mode for mode in modes if mode not in QUEUE_MODES]
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: load average {load:.1f}; other processes compete for the CPU")
    polite_pages = args.polite_pages or args.pages
    sites = Sites(args.sites, args.polite_share, args.crawl_delay)
    try:
        info = sites.info
        polite = info["polite"]
        total = (args.sites - len(polite)) * args.pages + len(polite) * polite_pages
        print(
            f"{args.sites} sites ({len(polite)} asking Crawl-delay: {args.crawl_delay:g}), "
            f"{args.pages} pages per site ({polite_pages} per Crawl-delay site): {total} requests,"
            f" {args.discovery}; queue: {args.queue} "
            f"({QUEUES[args.queue]['SCHEDULER_PRIORITY_QUEUE'].rsplit('.', 1)[1]}); "
            f"CONCURRENT_REQUESTS={COMMON_SETTINGS['CONCURRENT_REQUESTS']}"
        )
        results: dict[str, dict[str, Any]] = {}
        for mode in modes:
            job = {
                "mode": mode,
                "queue": args.queue,
                "origins": info["origins"],
                "polite": polite,
                "shared_host": info["shared_host"],
                "pages": args.pages,
                "polite_pages": polite_pages,
                "timeout": args.timeout,
                "discovery": args.discovery,
                "crawl_delay": args.crawl_delay,
                "verbose": args.verbose,
            }
            result = results[mode] = run_child(sites, job)
            state = "failed" if "error" in result else f"{result['wall']:.0f} s"
            print(f"  {mode:<11} {state}", flush=True)
        print_results(results, args)
        if missing:
            print(f"\n{', '.join(QUEUE_MODES)}: not run: {missing}.")
    finally:
        sites.stop()


if __name__ == "__main__":
    main()
