"""Cluster benchmark: what does sharing politeness through Redis cost, and how does it scale?

``make bench-cluster`` (``python benchmarks/cluster.py``) starts the many-origin
local site (benchmarks/_site.py: 500 loopback hosts x 20 pages, no
Crawl-delay) and a redis-server on a free port, then crawls the whole site:

1. one worker with local state against one worker with shared state
   (``REP_REDIS_URL``, robots.txt and Crawl-delay both shared), ``--rounds``
   rounds alternating which goes first: pages/s, the ratio best against best
   (target: >= 0.90) and per round;
2. 1, 2 and 4 workers with shared state, on scrapy-redis's scheduler and
   dupefilter (one queue, every worker starting from all home pages; they
   start together): pages/s of the cluster (first page to last page, any
   worker), scrapy-rep's Redis round trips per page (its ``rep/redis/calls``
   stat) and every command Redis ran per page (``INFO commandstats``:
   scrapy-redis's queue and dupefilter included, and the commands our scripts
   run inside Redis), and how many robots.txt requests reached the site.

3. the same site plus ``--polite`` sites asking for a Crawl-delay
   (``POLITE_DELAY``, ``POLITE_PAGES`` pages each: more than REP_MAX_WAITING
   in all), 1, 2 and 4 workers, on scrapy-redis's ``PriorityQueue`` and on
   ``scrapy_rep.RedisPoliteQueue``: pages/s of the other sites, the shortest
   gap between two requests to a polite site (any workers) when they were
   sent (the moment the worker's download slot let each go, stamped in a
   header by tests/sent_stamp.py) and when they arrived, the median arrived
   gap (a slot held until its request arrives adds the site's response time),
   Redis commands and bytes (network, both ways) per page;
4. Redis memory of the queues (``INFO memory``'s ``used_memory`` and
   ``MEMORY USAGE``): scrapy-redis's ``PriorityQueue`` against
   ``scrapy_rep.RedisPoliteQueue``, 500 origins x 20 queued requests: bytes for
   an origin's first request (its slot's keys) and for each further one.

Each worker is its own process. All processes share this machine's cores,
so more workers than cores cannot scale; the core count is printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _site import Site  # the local many-origin site, in its own process

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"  # sent_stamp.py (and servers.py, which it imports)
COMMON_SETTINGS: dict[str, Any] = {
    "ADDONS": {"scrapy_rep.Addon": 100},
    "ROBOTSTXT_OBEY": True,
    "CONCURRENT_REQUESTS": 100,
    "DOWNLOAD_DELAY": 0,
    "LOG_LEVEL": "WARNING",
    "USER_AGENT": "BenchBot/1.0 (+http://127.0.0.1/bot.html)",
    "ROBOTSTXT_USER_AGENT": "BenchBot",
    "TELNETCONSOLE_ENABLED": False,
    "REMOTE_CONTROL_ENABLED": False,
    "REP_META_ROBOTS": False,
}
SCRAPY_REDIS_SETTINGS: dict[str, Any] = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,  # the first worker done must not flush the others' queue
    "SCHEDULER_QUEUE_KEY": "bench:%(spider)s:requests",
    "SCHEDULER_DUPEFILTER_KEY": "bench:%(spider)s:dupefilter",
}
CLUSTER_SIZES = (1, 2, 4)
GO_KEY = "bench:go"


POLITE_DELAY = 0.25
POLITE_PAGES = 60
QUEUES = {
    "scrapy-redis": "scrapy_redis.queue.PriorityQueue",
    "scrapy-rep": "scrapy_rep.RedisPoliteQueue",
}


class PoliteSites:
    """Sites asking for a Crawl-delay, each on its own loopback address (its
    own download slot), recording when each request was sent (the worker's
    stamp, sent_stamp.py) and when it arrived."""

    def __init__(self, count: int) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from servers import SENT_HEADER

        self.arrivals: dict[str, list[tuple[float, float]]] = {}  # (sent, arrived)
        lock = threading.Lock()
        robots = f"User-agent: *\nCrawl-delay: {POLITE_DELAY:g}\n".encode()
        links = "".join(f'<a href="/d/{n}">{n}</a>' for n in range(1, POLITE_PAGES))
        home = f"<html><body>{links}</body></html>".encode()
        arrivals = self.arrivals

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                arrived = time.time()
                sent = float(self.headers.get(SENT_HEADER) or "nan")
                with lock:
                    arrivals.setdefault(self.server.server_address[0], []).append((sent, arrived))
                body = robots if self.path == "/robots.txt" else home if self.path == "/" else b"ok"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.servers = []
        for n in range(count):
            server = ThreadingHTTPServer((f"127.0.2.{n + 1}", 0), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.origins = [f"http://{h}:{p}" for h, p in (x.server_address[:2] for x in self.servers)]

    def gaps(self, sent: bool) -> list[float]:
        """The times between two requests in a row to one site, by when they
        were sent (``sent``) or when they arrived."""
        gaps = []
        for pairs in self.arrivals.values():
            times = sorted(pair[0 if sent else 1] for pair in pairs)
            gaps += [b - a for a, b in itertools.pairwise(times)]
        return gaps

    def reset(self) -> None:
        self.arrivals.clear()

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


# ------------------------------------------------------------------ a worker


def crawl(job: dict[str, Any]) -> dict[str, Any]:
    """Run one worker's crawl in this process and return its measurements."""
    from scrapy import Request, Spider
    from scrapy.crawler import CrawlerProcess
    from scrapy.http import Response
    from twisted.python.failure import Failure

    site, origins = job["site"], job["origins"]
    polite = tuple(job.get("polite", ()))
    settings = {**COMMON_SETTINGS, **job["settings"]}
    if polite:  # stamp when each request leaves its download slot
        import sent_stamp

        settings.update(sent_stamp.SETTINGS)

    class BenchSpider(Spider):
        name = "bench"

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.pages = 0
            self.dropped: dict[str, int] = {}
            self.first_page = self.last_page = 0.0
            self.cpu_first = self.cpu_last = 0.0
            self.other_pages = 0
            self.other_first = self.other_last = 0.0

        def request(self, url: str) -> Request:
            meta = {"download_slot": url.split("/")[2]} if site["shared_host"] else {}
            return Request(url, callback=self.parse, errback=self.failed, meta=meta)

        async def start(self) -> Any:
            if job["go"]:  # workers of a cluster start together
                await wait_for_go(job["redis_url"])
            for origin in [*origins, *polite]:
                yield self.request(origin + "/")

        def parse(self, response: Response) -> Any:
            now = time.time()
            if not self.pages:
                self.first_page, self.cpu_first = now, time.process_time()
            self.pages += 1
            self.last_page, self.cpu_last = now, time.process_time()
            if not response.url.startswith(polite):
                if not self.other_pages:
                    self.other_first = now
                self.other_pages += 1
                self.other_last = now
            for href in response.css("a::attr(href)").getall():
                yield self.request(response.urljoin(href))

        def failed(self, failure: Failure) -> None:
            name = type(failure.value).__name__
            self.dropped[name] = self.dropped.get(name, 0) + 1

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(BenchSpider)
    process.crawl(crawler)
    process.start()
    spider = crawler.spider
    stats = crawler.stats.get_stats()
    return {
        "pages": spider.pages,
        "first_page": spider.first_page,
        "last_page": spider.last_page,
        "cpu_seconds": spider.cpu_last - spider.cpu_first,
        "other_pages": spider.other_pages,
        "other_first": spider.other_first,
        "other_last": spider.other_last,
        "dropped": spider.dropped,
        "finish_reason": stats.get("finish_reason"),
        "rep_stats": {k: v for k, v in stats.items() if k.startswith("rep/")},
    }


async def wait_for_go(url: str) -> None:
    import asyncio

    import redis

    client = redis.Redis.from_url(url)
    client.incr("bench:ready")
    while not client.exists(GO_KEY):  # noqa: ASYNC110  (another process sets it)
        await asyncio.sleep(0.02)
    client.close()


# ------------------------------------------------------------------ memory


def queue_memory(url: str, queue_path: str, origins: int = 500, per_origin: int = 20) -> str:
    """Bytes Redis holds for queued requests, in this process (no crawl: the
    queue is filled directly, as scrapy-redis's scheduler would)."""
    import redis
    from scrapy import Request, Spider
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler
    from scrapy_redis import picklecompat

    crawler = get_crawler(
        Spider, {"REP_REDIS_URL": url, "DOWNLOAD_HANDLERS": {"http": None, "https": None}}
    )
    spider = Spider.from_crawler(crawler, name="bench")
    crawler.spider = spider
    crawler.engine = crawler._create_engine()  # the slot keys are the downloader's
    server = redis.Redis.from_url(url)
    server.flushall()
    queue = load_object(queue_path)(server, spider, "mem:%(spider)s:requests", picklecompat)

    def used() -> int:
        return int(server.info("memory")["used_memory"])

    empty = used()
    for n in range(origins):
        queue.push(Request(f"http://www.site-{n}.example/"))
    first = used()
    for n in range(origins):
        for page in range(1, per_origin):
            queue.push(Request(f"http://www.site-{n}.example/section/page-{page}.html"))
    full = used()
    sample = Request("http://www.site-1.example/section/page-1.html")
    encoded = len(queue._encode_request(sample) if hasattr(queue, "_encode_request") else b"")
    if not encoded:
        encoded = len(queue._codec._encode_request(sample))
    server.flushall()
    server.close()
    return (
        f"  {queue_path:<36} first request of an origin {(first - empty) / origins:>6.0f} B, "
        f"each further one {(full - first) / (origins * (per_origin - 1)):>4.0f} B "
        f"(the request itself, serialized: {encoded} B)"
    )


# ------------------------------------------------------------- orchestration


class Redis:
    """A redis-server without persistence on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            sys.exit(
                "redis-server is not installed: `make bench-cluster` installs it "
                "(Debian: apt-get install -y redis-server)"
            )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="rep-bench-redis-")
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir]
        self.proc = subprocess.Popen(
            [executable, "--port", str(self.port), *options],
            stdout=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def net_bytes(self) -> int:
        stats = self.client.info("stats")
        return int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"])

    def commands(self) -> int:
        """Commands run so far (INFO commandstats), INFO itself excluded."""
        stats = self.client.info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_worker(job: dict[str, Any], tmp: Path, name: str) -> tuple[subprocess.Popen[str], Path]:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(job))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", str(path)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, path


def run(
    site: Site,
    redis: Redis,
    workers: int,
    settings: dict[str, Any],
    go: bool,
    polite: PoliteSites | None = None,
) -> dict[str, Any]:
    """Crawl the site with ``workers`` processes; their combined measurements."""
    redis.client.flushall()
    redis.client.config_resetstat()
    site.control("/__reset")
    if polite is not None:
        polite.reset()
    net_before = redis.net_bytes()
    job = {
        "polite": polite.origins if polite is not None else [],
        "site": site.info,
        "origins": site.info["origins"],
        "settings": settings,
        "go": go,
        "redis_url": redis.url,
    }
    with tempfile.TemporaryDirectory() as tmp:
        started = [start_worker(job, Path(tmp), f"w{n}") for n in range(workers)]
        if go:
            deadline = time.monotonic() + 120
            while int(redis.client.get("bench:ready") or 0) < workers:
                if time.monotonic() > deadline or any(p.poll() is not None for p, _ in started):
                    break
                time.sleep(0.02)
            redis.client.set(GO_KEY, 1)
        results = []
        for proc, path in started:
            _, err = proc.communicate()
            out = path.with_suffix(".out")
            if proc.returncode != 0 or not out.exists():
                tail = "\n".join(err.splitlines()[-15:])
                return {"error": f"exit code {proc.returncode}\n{tail}"}
            results.append(json.loads(out.read_text()))
    commands = redis.commands()
    net = redis.net_bytes() - net_before
    served = site.control("/__stats")
    busy = [r for r in results if r["pages"]]
    if not busy:
        return {"error": f"no page crawled; {[r['dropped'] for r in results]}"}
    pages = sum(r["pages"] for r in results)
    seconds = max(r["last_page"] for r in busy) - min(r["first_page"] for r in busy)
    calls = sum(r["rep_stats"].get("rep/redis/calls", 0) for r in results)
    dropped: dict[str, int] = {}
    for result in results:
        for name, count in result["dropped"].items():
            dropped[name] = dropped.get(name, 0) + count
    other = sum(r["other_pages"] for r in results)
    sent_gaps = polite.gaps(sent=True) if polite is not None else []
    other_seconds = max(r["other_last"] for r in busy) - min(r["other_first"] for r in busy)
    return {
        "workers": workers,
        "other_rate": other / other_seconds if other_seconds > 0 else 0.0,
        "min_gap_sent": min(sent_gaps, default=float("nan")),
        "min_gap_arrived": min(
            polite.gaps(sent=False) if polite is not None else [], default=float("nan")
        ),
        # what holding a slot until its request arrives costs the polite sites
        "median_gap_arrived": statistics.median(polite.gaps(sent=False))
        if polite is not None and polite.gaps(sent=False)
        else float("nan"),
        # sent closer than the Crawl-delay (10 ms of clock reading allowed)
        "short_sent": sum(1 for gap in sent_gaps if gap < POLITE_DELAY - 0.01),
        # arrived closer than 0.95x the Crawl-delay (the site's view)
        "short_arrived": sum(
            1
            for gap in (polite.gaps(sent=False) if polite is not None else [])
            if gap < 0.95 * POLITE_DELAY
        ),
        "polite_gaps": len(sent_gaps),
        "bytes_per_page": net / max(pages, 1),
        "pages": pages,
        "seconds": seconds,
        "rate": pages / seconds if seconds > 0 else 0.0,
        "cpu_ms_per_page": 1000 * sum(r["cpu_seconds"] for r in results) / max(pages, 1),
        "rep_calls_per_page": calls / max(pages, 1),
        "commands_per_page": commands / max(pages, 1),
        "robots_requests": served["robots_requests"],
        "robots_max_per_origin": served["robots_max_per_origin"],
        "disallowed_served": served["disallowed_pages"],
        "dropped": dropped,
        "pages_per_worker": [r["pages"] for r in results],
        "redis_errors": sum(r["rep_stats"].get("rep/redis/errors", 0) for r in results),
    }


def show(label: str, result: dict[str, Any]) -> None:
    if "error" in result:
        print(f"{label:<26} failed: {result['error']}")
        return
    print(
        f"{label:<26} {result['pages']:>6} {result['seconds']:>7.2f} {result['rate']:>8.0f} "
        f"{result['cpu_ms_per_page']:>9.3f} {result['rep_calls_per_page']:>9.3f} "
        f"{result['commands_per_page']:>9.2f} {result['robots_requests']:>7} "
        f"{result['robots_max_per_origin']:>4} {result['disallowed_served']:>5} "
        f"{result['redis_errors']:>4}  {'/'.join(str(p) for p in result['pages_per_worker'])}"
    )


def show_polite(label: str, result: dict[str, Any]) -> None:
    if "error" in result:
        print(f"{label:<26} failed: {result['error']}")
        return
    print(
        f"{label:<26} {result['pages']:>6} {result['seconds']:>7.2f} {result['other_rate']:>8.0f} "
        f"{result['min_gap_sent']:>8.3f} {result['min_gap_arrived']:>8.3f} "
        f"{result['median_gap_arrived']:>7.3f} "
        f"{result['short_sent']:>4}/{result['polite_gaps']:<4} {result['short_arrived']:>5} "
        f"{result['commands_per_page']:>7.2f} "
        f"{result['bytes_per_page']:>8.0f} {result['robots_requests']:>7} "
        f"{result['robots_max_per_origin']:>4} {result['redis_errors']:>4}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of local vs shared")
    parser.add_argument("--polite", type=int, default=6, help="sites with a Crawl-delay")
    parser.add_argument(
        "--parts", default="1,2,3,4", help="which parts to run (comma-separated, e.g. 3,4)"
    )
    parser.add_argument(
        "--workers", default="1,2,4", help="cluster sizes of parts 2 and 3 (comma-separated)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    if args.worker:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _site import raise_open_files_limit

        raise_open_files_limit()
        result = crawl(json.loads(Path(args.worker).read_text()))
        Path(args.worker).with_suffix(".out").write_text(json.dumps(result))
        return

    load = os.getloadavg()[0]
    site = Site(args.origins)
    redis = Redis()
    try:
        origins = site.info["origins"]
        layout = "ports of 127.0.0.1" if site.info["shared_host"] else "loopback hosts"
        print(
            f"{len(origins)} origins ({layout}) x {site.info['pages_per_origin']} pages, "
            f"no Crawl-delay; CONCURRENT_REQUESTS={COMMON_SETTINGS['CONCURRENT_REQUESTS']} "
            f"per worker; {os.cpu_count()} cores; load average {load:.1f} at start"
        )
        header = (
            f"{'':<26} {'pages':>6} {'seconds':>7} {'pages/s':>8} {'CPU ms/p':>9} "
            f"{'rep RT/p':>9} {'cmds/p':>9} {'robots':>7} {'max':>4} {'disal':>5} {'errs':>4}  "
            "pages/worker"
        )
        shared = {"REP_REDIS_URL": redis.url}
        best: dict[str, dict[str, Any]] = {}
        ratios = []
        parts = set(args.parts.split(","))
        sizes = [int(n) for n in args.workers.split(",")]
        if "1" in parts:
            print(f"\n1. one worker, local vs shared state ({args.rounds} rounds)\n{header}")
        pair = [("local state", {}), ("shared state (Redis)", shared)]
        for round_ in range(args.rounds if "1" in parts else 0):
            rates: dict[str, float] = {}
            # Alternate which goes first: a machine's load drifts over a run.
            for label, settings in pair if round_ % 2 == 0 else pair[::-1]:
                result = run(site, redis, 1, settings, go=False)
                show(f"  {label} #{round_ + 1}", result)
                rates[label] = result.get("rate", 0.0)
                if "error" not in result and result["rate"] > best.get(label, {}).get("rate", 0):
                    best[label] = result
            if all(rates.values()):
                ratios.append(rates["shared state (Redis)"] / rates["local state"])
        if len(best) == 2:
            ratio = best["shared state (Redis)"]["rate"] / best["local state"]["rate"]
            verdict = "meets" if ratio >= 0.90 else "MISSES"
            print(
                f"  shared / local pages/s: {ratio:.3f}, best against best ({verdict} the 0.90 "
                f"target); per round: {', '.join(f'{r:.3f}' for r in ratios)} "
                f"(median {statistics.median(ratios):.3f})"
            )

        if "2" in parts:
            print(f"\n2. workers sharing state and one scrapy-redis queue\n{header}")
        for workers in sizes if "2" in parts else ():
            settings = {**SCRAPY_REDIS_SETTINGS, **shared, "REDIS_URL": redis.url}
            show(f"  {workers} worker(s)", run(site, redis, workers, settings, go=True))
        if "3" in parts:
            polite = PoliteSites(args.polite)
            print(
                f"\n3. plus {args.polite} sites with Crawl-delay: {POLITE_DELAY:g} x "
                f"{POLITE_PAGES} pages, by scrapy-redis queue\n"
                f"{'':<26} {'pages':>6} {'seconds':>7} {'other/s':>8} {'gap sent':>8} "
                f"{'arrived':>8} {'median':>7} {'short':>9} {'<0.95':>5} {'cmds/p':>7} "
                f"{'bytes/p':>8} {'robots':>7} {'max':>4} {'errs':>4}"
            )
            try:
                for workers in sizes:
                    for name, queue in QUEUES.items():
                        settings = {
                            **SCRAPY_REDIS_SETTINGS,
                            **shared,
                            "REDIS_URL": redis.url,
                            "SCHEDULER_QUEUE_CLASS": queue,
                        }
                        result = run(site, redis, workers, settings, go=True, polite=polite)
                        show_polite(f"  {name}, {workers} worker(s)", result)
            finally:
                polite.stop()
            print(
                "(other/s: pages/s of the sites without a Crawl-delay; gap sent, arrived: the"
                "\n shortest time between two requests to one polite site, any workers, by when"
                "\n their download slot let them go and by when they reached the site (asked:"
                f" {POLITE_DELAY:g} s);\n short: sent gaps more than 10 ms short of it, of all;"
                " <0.95: arrived gaps under 0.95x it;"
                " median: the median arrived gap;"
                " bytes/p: Redis network bytes per page, both ways)"
            )
        if "4" in parts:
            print("\n4. Redis memory of queued requests (500 origins x 20 requests)")
            for queue in QUEUES.values():
                print(queue_memory(redis.url, queue))
        print(
            "\n(pages/s: pages parsed, first page to last, all workers; CPU ms/p: the workers'"
            "\n CPU per page; rep RT/p: scrapy-rep's Redis round trips per page; cmds/p: all"
            "\n commands Redis ran per page, scrapy-redis's and those inside our scripts"
            f"\n included; robots: robots.txt requests the site got for {len(origins)} origins;"
            "\n max: the most for one origin; disal: disallowed pages the site served;"
            "\n errs: failed Redis calls (each one pauses sharing for REP_REDIS_RETRY))"
        )
    finally:
        redis.stop()
        site.stop()


if __name__ == "__main__":
    main()
