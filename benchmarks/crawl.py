"""Crawl benchmark: what does obeying robots.txt cost a Scrapy crawl?

``make bench-crawl`` (``python benchmarks/crawl.py``) starts one local server
with many origins (benchmarks/_site.py: 500 loopback hosts x 20 pages, each
with a robots.txt that disallows one page) and crawls all of it in four
configurations, each in its own process:

- ``none``: ROBOTSTXT_OBEY = False, no robots.txt at all (the ceiling);
- ``builtin``: Scrapy's own RobotsTxtMiddleware;
- ``rep``: scrapy-rep, enabled by its add-on with its defaults (robots.txt,
  and page-level <meta name="robots"> / X-Robots-Tag directives);
- ``rep-txt``: the same with ``REP_META_ROBOTS = False`` (robots.txt alone);
- ``rep-evid``: ``rep`` with the evidence archive (``REP_EVIDENCE``, in a
  temporary directory): its disk use per origin is printed too.
- ``rep-nostop``: ``rep`` with ``REP_STOP_SIGNALS = False``: what reading stop
  signals (challenges, blocks, 402s) costs on answers that carry none.

It prints pages/s (pages parsed per second, from the spider's start to its
last page), the crawler's CPU time per page, what reached the server (robots.txt
fetches, disallowed pages downloaded), and the ratios against ``none``. Every
origin is new when the crawl starts, so the robots.txt of 500 origins is fetched
while pages of known origins must keep flowing.

Then it times one cached check: the robots middleware's ``process_request``
called in-process for requests whose origin's rules are cached, after a real
crawl warmed them (microseconds per call, best of several runs).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _child
from _site import Site  # the local many-origin site, in its own process

MODE_SETTINGS: dict[str, dict[str, Any]] = {
    "none": {"ROBOTSTXT_OBEY": False},
    "builtin": {"ROBOTSTXT_OBEY": True},
    "rep": {"ROBOTSTXT_OBEY": True, "ADDONS": {"scrapy_rep.Addon": 100}},
    "rep-txt": {
        "ROBOTSTXT_OBEY": True,
        "ADDONS": {"scrapy_rep.Addon": 100},
        "REP_META_ROBOTS": False,
    },
    # rep with the evidence archive (REP_EVIDENCE, in a temporary directory)
    "rep-evid": {"ROBOTSTXT_OBEY": True, "ADDONS": {"scrapy_rep.Addon": 100}},
    "rep-nostop": {
        "ROBOTSTXT_OBEY": True,
        "ADDONS": {"scrapy_rep.Addon": 100},
        "REP_STOP_SIGNALS": False,
    },
}
MODES = tuple(MODE_SETTINGS)
COMMON_SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 100,
    "DOWNLOAD_DELAY": 0,
    "LOG_LEVEL": "INFO",
    "USER_AGENT": "BenchBot/1.0 (+http://127.0.0.1/bot.html)",
    "ROBOTSTXT_USER_AGENT": "BenchBot",
    "TELNETCONSOLE_ENABLED": False,
    "REMOTE_CONTROL_ENABLED": False,
}
CHECK_ORIGINS = 20  # origins warmed before timing the cached check
CHECK_CALLS = 20_000  # calls per timing run
CHECK_RUNS = 7


# --------------------------------------------------------------- crawl process


def crawl(mode: str, site: dict[str, Any], origins: list[str], check: bool) -> dict[str, Any]:
    """Run one crawl in this process and return its measurements."""
    from scrapy import Request, Spider, signals
    from scrapy.crawler import CrawlerProcess
    from scrapy.http import Response
    from twisted.python.failure import Failure

    class BenchSpider(Spider):
        name = "bench"

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.pages = 0
            self.dropped: dict[str, int] = {}
            self.started = self.last_page = time.perf_counter()
            self.cpu_started = self.cpu_last_page = time.process_time()
            self.timing: dict[str, Any] | None = None

        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BenchSpider:
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.opened, signal=signals.spider_opened)
            if check:
                crawler.signals.connect(spider.idle, signal=signals.spider_idle)
            return spider

        def opened(self) -> None:
            self.started = time.perf_counter()
            self.cpu_started = time.process_time()

        def request(self, url: str) -> Request:
            meta = {"download_slot": url.split("/")[2]} if site["shared_host"] else {}
            return Request(url, callback=self.parse, errback=self.failed, meta=meta)

        async def start(self) -> Any:
            for origin in origins:
                yield self.request(origin + "/")

        def parse(self, response: Response) -> Any:
            self.pages += 1
            self.last_page = time.perf_counter()
            self.cpu_last_page = time.process_time()
            for href in response.css("a::attr(href)").getall():
                yield self.request(response.urljoin(href))

        def failed(self, failure: Failure) -> None:
            name = type(failure.value).__name__
            self.dropped[name] = self.dropped.get(name, 0) + 1

        def idle(self) -> None:
            if self.timing is None:
                self.timing = time_cached_check(self.crawler, origins)

    settings = {**COMMON_SETTINGS, **MODE_SETTINGS[mode]}
    evidence = tempfile.mkdtemp(prefix="rep-evidence-") if mode == "rep-evid" else None
    if evidence is not None:
        settings["REP_EVIDENCE"] = evidence
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(BenchSpider)
    process.crawl(crawler)
    process.start()
    spider = crawler.spider
    stats = crawler.stats.get_stats()
    disk: dict[str, int] = {}
    if evidence is not None:
        for name in os.listdir(evidence):
            kind = "jsonl" if name.endswith(".jsonl") else "warc"
            disk[kind] = disk.get(kind, 0) + os.path.getsize(os.path.join(evidence, name))
        shutil.rmtree(evidence)
    return {
        "evidence_bytes": disk,
        "mode": mode,
        "pages": spider.pages,
        "seconds": spider.last_page - spider.started,
        "cpu_seconds": spider.cpu_last_page - spider.cpu_started,
        "dropped": spider.dropped,
        "finish_reason": stats.get("finish_reason"),
        "rep_stats": {k: v for k, v in stats.items() if k.startswith(("rep/", "robotstxt/"))},
        "timing": spider.timing,
    }


def time_cached_check(crawler: Any, origins: list[str]) -> dict[str, Any]:
    """Time the robots middleware's process_request on origins it has cached.

    Called once the crawl is idle: every origin's robots.txt is known. The
    middleware must settle without suspending (a coroutine that finishes on its
    first step counts; one that waits is reported, not timed).
    """
    from scrapy import Request
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as Builtin
    from scrapy.utils.httpobj import urlparse_cached

    middlewares = crawler.engine.downloader.middleware.middlewares
    found = [
        mw
        for mw in middlewares
        if type(mw).__module__.startswith("scrapy_rep") and hasattr(mw, "process_request")
    ] or [mw for mw in middlewares if isinstance(mw, Builtin)]
    if not found:
        return {"error": "no robots middleware is enabled"}
    middleware = found[0]
    paths = [f"/p/{n}?q={k}" for k in range(CHECK_CALLS // 18 + 1) for n in range(1, 19)]

    def fresh_requests() -> list[Request]:
        """New requests each run, so nothing per request is memoised between runs;
        their URLs parsed already, as OffsiteMiddleware (50) does before us (100)."""
        requests = [
            Request(origins[i % len(origins)] + path) for i, path in enumerate(paths[:CHECK_CALLS])
        ]
        for request in requests:
            urlparse_cached(request)
        return requests

    def check(request: Request) -> Any:
        result = middleware.process_request(request)
        if inspect.iscoroutine(result):
            try:
                result.send(None)
            except StopIteration as done:
                return done.value
            result.close()
            raise RuntimeError("process_request waited on a cached origin")
        return result

    def unlimited_slots(requests: list[Request]) -> None:
        """These requests never reach the downloader to give their slot's place
        back (scrapy-rep's REP_SLOT_LIMIT): every place is free for the timing."""
        downloader = crawler.engine.downloader
        for key in {downloader.get_slot_key(request) for request in requests}:
            downloader.per_slot_settings.setdefault(key, {})["concurrency"] = 10**9
            slot = downloader.slots.get(key)
            if slot is not None:
                slot.concurrency = 10**9

    best = float("inf")
    try:
        for _ in range(CHECK_RUNS):
            requests = fresh_requests()
            unlimited_slots(requests)
            started = time.perf_counter()
            for request in requests:
                check(request)
            best = min(best, (time.perf_counter() - started) / len(requests))
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    name = f"{type(middleware).__module__}.{type(middleware).__name__}"
    return {"middleware": name, "microseconds": best * 1e6}


# -------------------------------------------------------------- orchestration


def run_child(mode: str, site: Site, origins: list[str], check: bool) -> dict[str, Any]:
    before = site.control("/__reset")
    job = {"mode": mode, "site": site.info, "origins": origins, "check": check}
    result, _ = _child.run_child(__file__, job)
    served = site.control("/__stats")
    if "error" in result:
        return result
    result["served"] = served
    result["server_cpu"] = served["cpu_seconds"] - before["cpu_seconds"]
    return result


def child_main(job_path: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _site import raise_open_files_limit

    raise_open_files_limit()
    job = json.loads(Path(job_path).read_text())
    result = crawl(job["mode"], job["site"], job["origins"], job["check"])
    Path(job_path).with_suffix(".out").write_text(json.dumps(result))


def print_results(results: dict[str, dict[str, Any]], origins: int) -> None:
    print(
        f"\n{'mode':<8} {'pages':>6} {'seconds':>8} {'pages/s':>8} {'CPU ms/page':>11} "
        f"{'forbidden':>9} {'robots.txt':>10} {'disallowed':>10} {'server CPU':>10}"
    )
    for mode in MODES:
        result = results.get(mode)
        if result is None:
            continue
        if "error" in result:
            print(f"{mode:<8} failed: {result['error']}")
            continue
        served = result["served"]
        print(
            f"{mode:<8} {result['pages']:>6} {result['seconds']:>8.2f} "
            f"{result['pages'] / result['seconds']:>8.0f} "
            f"{1000 * result['cpu_seconds'] / result['pages']:>11.3f} "
            f"{sum(result['dropped'].values()):>9} "
            f"{served['robots_requests']:>10} {served['disallowed_pages']:>10} "
            f"{result['server_cpu'] / result['seconds']:>10.0%}"
        )
    for result in results.values():
        disk = result.get("evidence_bytes")
        if disk:
            print(
                f"\nevidence archive: {disk.get('warc', 0) / origins:.0f} bytes of WARC and "
                f"{disk.get('jsonl', 0) / origins:.0f} of evidence.jsonl per origin"
            )
    ok = {mode: result for mode, result in results.items() if "error" not in result}
    rate = {mode: result["pages"] / result["seconds"] for mode, result in ok.items()}
    cpu = {mode: result["cpu_seconds"] / result["pages"] for mode, result in ok.items()}
    print("\nratios:               pages/s   CPU per page")
    pairs = [(rep, other) for rep in ("rep", "rep-txt") for other in ("none", "builtin")]
    for left, right in [*pairs, ("builtin", "none"), ("rep-evid", "rep"), ("rep", "rep-nostop")]:
        if left in rate and right in rate:
            print(
                f"  {left + ' / ' + right:<18} {rate[left] / rate[right]:7.3f} "
                f"{cpu[left] / cpu[right]:14.3f}"
            )
    print(
        "\n(pages = pages parsed by the spider; forbidden = requests dropped by robots.txt;"
        f"\n robots.txt = robots.txt requests the server got, for {origins} origins;"
        "\n disallowed = disallowed pages the server served; server CPU = its share of a core)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1, help="best of N runs per mode")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return

    modes = [mode for mode in args.modes.split(",") if mode]
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: load average {load:.1f}; other processes compete for the CPU")
    site = Site(args.origins)
    try:
        origins = site.info["origins"]
        layout = "ports of 127.0.0.1" if site.info["shared_host"] else "loopback hosts"
        print(
            f"{len(origins)} origins ({layout}) x {site.info['pages_per_origin']} pages, "
            f"{site.info['disallowed_per_origin']} disallowed per origin; "
            f"CONCURRENT_REQUESTS={COMMON_SETTINGS['CONCURRENT_REQUESTS']}; "
            f"best of {args.rounds} per mode"
        )
        best: dict[str, dict[str, Any]] = {}
        for round_ in range(args.rounds):
            for mode in modes:
                result = run_child(mode, site, origins, check=False)
                pace = result["pages"] / result["seconds"] if "error" not in result else 0.0
                print(
                    f"  round {round_ + 1} {mode:<8} "
                    + (f"{pace:7.0f} pages/s" if pace else "failed"),
                    flush=True,
                )
                kept = best.get(mode)
                if (
                    kept is None
                    or "error" in kept
                    or ("error" not in result and pace > kept["pages"] / kept["seconds"])
                ):
                    best[mode] = result
        print_results(best, len(origins))

        print("\ncached check (process_request on a cached origin, in-process):")
        for mode in ("builtin", "rep"):
            if mode not in modes:
                continue
            result = run_child(mode, site, origins[:CHECK_ORIGINS], check=True)
            timing = result.get("timing") or {"error": result.get("error", "not run")}
            if "error" in timing:
                print(f"  {mode:<8} failed: {timing['error']}")
            else:
                print(
                    f"  {mode:<8} {timing['microseconds']:6.2f} us per call "
                    f"({timing['middleware']})"
                )
    finally:
        site.stop()


if __name__ == "__main__":
    main()
