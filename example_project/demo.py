"""``make demo``: crawl a local multi-origin site with scrapy-rep and report.

1. starts the demo site (demosite.py) in its own process on 127.0.0.1;
2. runs ``scrapy crawl links`` in this project, as a user would, from each
   origin's home page;
3. stops the site and prints what happened per origin: pages fetched, requests
   forbidden by robots.txt (with the deciding line), the Crawl-delay applied
   (with the gaps the site measured between requests), unreachable origins.

Options: ``--builtin`` runs the same crawl with Scrapy's own
RobotsTxtMiddleware instead, for comparison; ``--stats`` adds the crawl's
``rep/`` stats; ``--keep DIR`` keeps the crawl's log, feed, report and the
site's access log in DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent
REPO = PROJECT.parent
CRAWL_TIMEOUT = 120  # seconds; the demo itself takes well under 30


@dataclass
class DemoRun:
    origins: dict[str, str]  # origin name -> base URL (http://127.0.0.1:PORT)
    start_urls: list[str]
    returncode: int
    seconds: float
    items: list[dict[str, Any]]  # the spider's feed: pages and dropped requests
    report: dict[str, Any]  # RobotsReport extension: robots per origin, stats
    hits: list[dict[str, Any]]  # the site's access log, in arrival order
    log_path: Path
    stderr: str  # what `scrapy crawl` printed besides its log file

    def failure(self) -> str:
        """Why the crawl failed, in its own words (end of its stderr and log)."""
        log = self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""
        tail = (self.stderr + log).strip().splitlines()[-30:]
        return f"scrapy crawl exited with {self.returncode}:\n" + "\n".join(tail)

    def name_of(self, url: str) -> str:
        for name, base in self.origins.items():
            if url == base or url.startswith(base + "/"):
                return name
        return "?"

    def hits_of(self, name: str) -> list[dict[str, Any]]:
        return [hit for hit in self.hits if hit["origin"] == name]


class SiteProcess:
    """The demo site in a child process; it exits when its stdin closes."""

    def __init__(self, access_log: Path) -> None:
        self.access_log = access_log
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "demosite.py"), "--access-log", str(access_log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the demo site did not start")
        started = json.loads(line)
        self.origins: dict[str, str] = started["origins"]
        self.start_urls: list[str] = started["start_urls"]

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> SiteProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def crawl_command(start_urls: list[str], workdir: Path, *, builtin: bool) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "scrapy",
        "crawl",
        "links",
        "-a",
        "urls=" + ",".join(start_urls),
        "-O",
        str(workdir / "items.jsonl"),
        "-s",
        f"ROBOTS_REPORT_FILE={workdir / 'report.json'}",
        "-s",
        f"LOG_FILE={workdir / 'crawl.log'}",
        "-s",
        "LOG_LEVEL=DEBUG",
        # no listening consoles or job files in the user's profile for a demo
        "-s",
        "TELNETCONSOLE_ENABLED=False",
        "-s",
        "REMOTE_CONTROL_ENABLED=False",
    ]
    if builtin:
        command += ["-s", "ADDONS={}"]  # Scrapy's RobotsTxtMiddleware is on by default
    return command


def run_demo(workdir: Path, *, builtin: bool = False) -> DemoRun:
    """Start the site, crawl it with ``scrapy crawl`` in this project, stop the site."""
    access_log = workdir / "access.jsonl"
    env = dict(os.environ)
    # scrapy_rep importable even when the package is not installed in the venv
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with SiteProcess(access_log) as site:
        started = time.monotonic()
        try:
            crawl = subprocess.run(
                crawl_command(site.start_urls, workdir, builtin=builtin),
                cwd=PROJECT,
                env=env,
                timeout=CRAWL_TIMEOUT,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
            )
            returncode, stderr = crawl.returncode, crawl.stderr
        except subprocess.TimeoutExpired:
            returncode, stderr = -1, f"timed out after {CRAWL_TIMEOUT} s\n"
        seconds = time.monotonic() - started
    return DemoRun(
        origins=site.origins,
        start_urls=site.start_urls,
        returncode=returncode,
        seconds=seconds,
        items=_read_jsonl(workdir / "items.jsonl"),
        report=_read_json(workdir / "report.json"),
        hits=_read_jsonl(access_log),
        log_path=workdir / "crawl.log",
        stderr=stderr,
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8")) if path.exists() else {}


# ---------------------------------------------------------------- the report


def forbidden(run: DemoRun) -> list[dict[str, Any]]:
    """Requests robots.txt forbade (scrapy-rep's ForbiddenByRobots, or Scrapy's
    own IgnoreRequest("Forbidden by robots.txt"))."""
    return [
        item
        for item in run.items
        if item["kind"] == "dropped"
        and (
            item["exception"].endswith(".ForbiddenByRobots")
            or item["message"] == "Forbidden by robots.txt"
        )
    ]


def unreachable(run: DemoRun) -> list[dict[str, Any]]:
    return [
        item
        for item in run.items
        if item["kind"] == "dropped" and item["exception"].endswith(".RobotsTxtUnavailable")
    ]


def robots_fetches(run: DemoRun, name: str) -> list[str]:
    """How the site answered this origin's robots.txt, following redirects."""
    answers = []
    for hit in run.hits_of(name):
        if hit["path"] != "/robots.txt":
            continue
        answers.append(str(hit["status"]))
        location = hit.get("location")
        if location:  # a redirect: show where it led and how that answered
            target = run.name_of(location)
            path = location.removeprefix(run.origins.get(target, ""))
            answers[-1] += f" -> {target}{path}"
            answers += [
                str(other["status"]) for other in run.hits_of(target) if other["path"] == path
            ][:1]
    return answers


def request_gaps(run: DemoRun, name: str) -> list[float]:
    """Seconds between consecutive page requests the site saw for one origin."""
    times = [hit["t"] for hit in run.hits_of(name) if hit["path"] != "/robots.txt"]
    return [later - earlier for earlier, later in pairwise(times)]


def format_report(run: DemoRun, *, builtin: bool = False, with_stats: bool = False) -> str:
    stats = run.report.get("stats", {})
    robots = run.report.get("robots", {})
    middleware = "Scrapy's built-in RobotsTxtMiddleware" if builtin else "scrapy-rep"
    pages: Counter[str] = Counter(
        run.name_of(item["url"]) for item in run.items if item["kind"] == "page"
    )
    dropped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in run.items:
        if item["kind"] == "dropped":
            dropped[run.name_of(item["url"])].append(item)

    out = [
        f"scrapy-rep demo: {len(run.start_urls)} sites on 127.0.0.1, spider 'links', "
        f"robots.txt by {middleware}",
        f"crawl: {run.seconds:.1f} s, finish reason: {run.report.get('reason', '?')}, "
        f"exit code {run.returncode}",
        "",
        f"{'site':<6} {'address':<16} {'robots.txt answers':<34} {'fetched':>7} {'dropped':>7}",
    ]
    for url in run.start_urls:
        name = run.name_of(url)
        answers = " ".join(robots_fetches(run, name)) or "-"
        address = run.origins[name].removeprefix("http://")
        out.append(
            f"{name:<6} {address:<16} {answers:<34} {pages[name]:>7} {len(dropped[name]):>7}"
        )

    out += ["", "Forbidden by robots.txt:"]
    for item in forbidden(run) or [{"url": "(none)", "line": None, "rule": None}]:
        where = f"line {item['line']}: {item['rule']}" if item["line"] else item.get("rule") or ""
        out.append(f"  {item['url']:<46} {where}".rstrip())

    out += ["", "Crawl-delay:"]
    delays = {
        run.name_of(origin): said["crawl_delay"]
        for origin, said in robots.items()
        if said.get("crawl_delay")
    }
    for name, delay in delays.items():
        gaps = request_gaps(run, name)
        shown = ", ".join(f"{gap:.2f}" for gap in gaps) or "-"
        out.append(f"  {name}: Crawl-delay {delay:g} s; gaps between its page requests: {shown} s")
    if not delays:
        out.append("  (none)")

    out += ["", "Unreachable (robots.txt could not be fetched: nothing crawled there):"]
    lost = unreachable(run)
    for name in sorted({run.name_of(item["url"]) for item in lost}):
        mine = [item for item in lost if run.name_of(item["url"]) == name]
        answers = ", ".join(
            f"{status} x{count}" for status, count in Counter(robots_fetches(run, name)).items()
        )
        reason = mine[0].get("reason") or mine[0]["message"]
        out.append(f"  {name}: robots.txt answered {answers} ({reason})")
        out.append(f"      dropped: {', '.join(item['url'] for item in mine)}")
    if not lost:
        out.append("  (none)")

    explained = {id(item) for item in [*forbidden(run), *lost]}
    others = [item for item in run.items if item["kind"] == "dropped" and id(item) not in explained]
    if others:
        out += ["", "Other failed requests:"]
        out += [f"  {item['url']}: {item['exception']}: {item['message']}" for item in others]

    sitemaps = {
        run.name_of(origin): said["sitemaps"]
        for origin, said in robots.items()
        if said.get("sitemaps")
    }
    if sitemaps:
        out += ["", "Sitemaps listed in robots.txt:"]
        out += [f"  {name}: {', '.join(urls)}" for name, urls in sitemaps.items()]

    rep_stats = {key: value for key, value in sorted(stats.items()) if key.startswith("rep/")}
    if rep_stats and with_stats:
        out += ["", "rep/ stats:"]
        out += [f"  {key}: {value}" for key, value in rep_stats.items()]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description="Crawl the local demo site and report.")
    parser.add_argument(
        "--builtin", action="store_true", help="use Scrapy's RobotsTxtMiddleware instead"
    )
    parser.add_argument("--keep", metavar="DIR", help="keep the crawl's files in DIR")
    parser.add_argument("--stats", action="store_true", help="also print the rep/ stats")
    args = parser.parse_args()
    if args.keep:
        workdir = Path(args.keep).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        run = run_demo(workdir, builtin=args.builtin)
        failure = run.failure()
    else:
        with tempfile.TemporaryDirectory(prefix="scrapy-rep-demo-") as tmp:
            run = run_demo(Path(tmp), builtin=args.builtin)
            failure = run.failure()
    if run.returncode != 0 or not run.report:
        print(failure, file=sys.stderr)
        return 1
    print(format_report(run, builtin=args.builtin, with_stats=args.stats))
    if args.keep:
        print(f"\nfiles kept in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
