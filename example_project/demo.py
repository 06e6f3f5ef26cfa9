"""``make demo``: crawl a local multi-origin site with scrapy-rep and report.

1. starts the demo site (demosite.py) in its own process on 127.0.0.1;
2. runs two crawls in this project, as a user would: ``scrapy crawl links``
   from the home page of most sites, following links; then ``scrapy crawl
   sitemaps`` on the ``maps`` site, reading the sitemaps its robots.txt lists;
3. stops the site and prints what happened per origin: pages fetched, requests
   forbidden by robots.txt (with the deciding line), the Crawl-delay applied
   (with the gaps the site measured between requests), unreachable origins,
   pages that said nofollow or noindex and what the crawler did, and the pages
   crawled from robots.txt sitemaps.

Options: ``--builtin`` runs the same crawls with Scrapy's own
RobotsTxtMiddleware instead, for comparison; ``--stats`` adds the crawls'
``rep/`` stats; ``--keep DIR`` keeps the crawls' logs, feeds, reports and the
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
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent
REPO = PROJECT.parent
CRAWL_TIMEOUT = 120  # seconds per crawl; the whole demo takes well under 30
# spider -> the argument that gives it its sites, and how a site's base URL is passed
SPIDERS = {"links": ("urls", "{}/"), "sitemaps": ("sitemap_sites", "{}")}


@dataclass
class Crawl:
    """One ``scrapy crawl`` of the demo and what it left behind."""

    spider: str
    sites: list[str]  # names of the origins it was given
    returncode: int
    seconds: float
    items: list[dict[str, Any]]  # the spider's feed: pages and dropped requests
    report: dict[str, Any]  # RobotsReport extension: robots per origin, forbidden, stats
    log_path: Path
    stderr: str  # what `scrapy crawl` printed besides its log file

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.report)

    def failure(self) -> str:
        """Why the crawl failed, in its own words (end of its stderr and log)."""
        log = self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""
        tail = (self.stderr + log).strip().splitlines()[-30:]
        return f"scrapy crawl {self.spider} exited with {self.returncode}:\n" + "\n".join(tail)


@dataclass
class DemoRun:
    origins: dict[str, str]  # origin name -> base URL (http://127.0.0.1:PORT)
    crawls: dict[str, Crawl]  # spider name -> its crawl, in the order they ran
    hits: list[dict[str, Any]]  # the site's access log, in arrival order

    @property
    def ok(self) -> bool:
        return all(crawl.ok for crawl in self.crawls.values())

    @property
    def items(self) -> list[dict[str, Any]]:
        return [item for crawl in self.crawls.values() for item in crawl.items]

    @property
    def sites(self) -> list[str]:
        """The crawled origins, in crawl order."""
        return [name for crawl in self.crawls.values() for name in crawl.sites]

    def failure(self) -> str:
        return "\n\n".join(crawl.failure() for crawl in self.crawls.values() if not crawl.ok)

    def name_of(self, url: str) -> str:
        for name, base in self.origins.items():
            if url == base or url.startswith(base + "/"):
                return name
        return "?"

    def path_of(self, url: str) -> str:
        return url.removeprefix(self.origins.get(self.name_of(url), "")) or "/"

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
        self.crawls: dict[str, list[str]] = started["crawls"]

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


def crawl_command(spider: str, urls: list[str], workdir: Path, *, builtin: bool) -> list[str]:
    argument = SPIDERS[spider][0]
    command = [
        sys.executable,
        "-m",
        "scrapy",
        "crawl",
        spider,
        "-a",
        f"{argument}=" + ",".join(urls),
        "-O",
        str(workdir / f"{spider}-items.jsonl"),
        "-s",
        f"ROBOTS_REPORT_FILE={workdir / f'{spider}-report.json'}",
        "-s",
        f"LOG_FILE={workdir / f'{spider}-crawl.log'}",
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


def run_crawl(
    spider: str, site: SiteProcess, workdir: Path, env: dict[str, str], *, builtin: bool
) -> Crawl:
    names = site.crawls.get(spider, [])
    urls = [SPIDERS[spider][1].format(site.origins[name]) for name in names]
    started = time.monotonic()
    try:
        crawl = subprocess.run(
            crawl_command(spider, urls, workdir, builtin=builtin),
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
    return Crawl(
        spider=spider,
        sites=names,
        returncode=returncode,
        seconds=time.monotonic() - started,
        items=_read_jsonl(workdir / f"{spider}-items.jsonl"),
        report=_read_json(workdir / f"{spider}-report.json"),
        log_path=workdir / f"{spider}-crawl.log",
        stderr=stderr,
    )


def run_demo(workdir: Path, *, builtin: bool = False) -> DemoRun:
    """Start the site, run each crawl with ``scrapy crawl`` in this project, stop the site."""
    access_log = workdir / "access.jsonl"
    env = dict(os.environ)
    # scrapy_rep importable even when the package is not installed in the venv
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with SiteProcess(access_log) as site:
        crawls = {
            spider: run_crawl(spider, site, workdir, env, builtin=builtin) for spider in SPIDERS
        }
    return DemoRun(origins=site.origins, crawls=crawls, hits=_read_jsonl(access_log))


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8")) if path.exists() else {}


# ---------------------------------------------------------------- the report


def drops(run: DemoRun) -> list[dict[str, Any]]:
    """Requests that never reached the site, with why. The links spider's errback
    reports its own; the sitemap spider's page requests have no errback, so the
    ones robots.txt forbade come from the request_forbidden signal (RobotsReport)."""
    found = [item for item in run.items if item["kind"] == "dropped"]
    urls = {item["url"] for item in found}
    for crawl in run.crawls.values():
        for said in crawl.report.get("forbidden", []):
            if said["url"] not in urls:
                urls.add(said["url"])
                exception = "scrapy_rep.signals.request_forbidden"
                found.append({"kind": "dropped", "exception": exception, "message": "", **said})
    return found


def forbidden(run: DemoRun) -> list[dict[str, Any]]:
    """Requests robots.txt forbade (scrapy-rep's ForbiddenByRobots or request_forbidden
    signal, or Scrapy's own IgnoreRequest("Forbidden by robots.txt"))."""
    return [
        item
        for item in drops(run)
        if item["exception"].endswith((".ForbiddenByRobots", ".request_forbidden"))
        or item["message"] == "Forbidden by robots.txt"
    ]


def unreachable(run: DemoRun) -> list[dict[str, Any]]:
    return [item for item in drops(run) if item["exception"].endswith(".RobotsTxtUnavailable")]


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


def page_directives(run: DemoRun) -> list[dict[str, Any]]:
    """Each page the site served with robots directives (the access log says which),
    and what the crawler made of it: its rep_noindex, and which of its links the
    site then saw a request for. Sorted by site and path."""
    pages = {item["url"]: item for item in run.items if item["kind"] == "page"}
    out = []
    for hit in sorted(run.hits, key=lambda hit: (hit["origin"], hit["path"])):
        if not hit.get("says"):
            continue
        requested = {other["path"] for other in run.hits_of(hit["origin"])}
        item = pages.get(run.origins[hit["origin"]] + hit["path"], {})
        links = [run.path_of(url) for url in item.get("links", [])]
        out.append(
            {
                "site": hit["origin"],
                "path": hit["path"],
                "says": hit["says"],
                "noindex": item.get("noindex"),
                "followed": [link for link in links if link in requested],
                "not_followed": [link for link in links if link not in requested],
            }
        )
    return out


def sitemap_paths(run: DemoRun, name: str) -> Counter[str]:
    """Sitemaps the site served to one origin (the demo site keeps them in /sitemaps/)."""
    return Counter(hit["path"] for hit in run.hits_of(name) if hit["path"].startswith("/sitemaps/"))


def _stats_line(stats: dict[str, Any], prefix: str) -> str:
    found = [
        (key.removeprefix(prefix), value) for key, value in stats.items() if key.startswith(prefix)
    ]
    return ", ".join(f"{key} {value}" for key, value in found) or "(none)"


def format_report(run: DemoRun, *, builtin: bool = False, with_stats: bool = False) -> str:
    robots = {
        origin: said
        for crawl in run.crawls.values()
        for origin, said in crawl.report.get("robots", {}).items()
    }
    middleware = "Scrapy's built-in RobotsTxtMiddleware" if builtin else "scrapy-rep"
    pages: Counter[str] = Counter(
        run.name_of(item["url"]) for item in run.items if item["kind"] == "page"
    )
    # requests that never reached the site: robots.txt's, and links of nofollow pages
    dropped: Counter[str] = Counter(run.name_of(item["url"]) for item in drops(run))
    for page in page_directives(run):
        dropped[page["site"]] += len(page["not_followed"])

    out = [f"scrapy-rep demo: {len(run.sites)} sites on 127.0.0.1, robots.txt by {middleware}"]
    for number, crawl in enumerate(run.crawls.values(), 1):
        out.append(
            f"crawl {number}: scrapy crawl {crawl.spider} ({', '.join(crawl.sites)}): "
            f"{crawl.seconds:.1f} s, {crawl.report.get('reason', '?')}, "
            f"exit code {crawl.returncode}"
        )
    out += [
        "",
        f"{'site':<6} {'address':<16} {'robots.txt answers':<34} {'fetched':>7} {'dropped':>7}",
    ]
    for name in run.sites:
        answers = " ".join(robots_fetches(run, name)) or "-"
        address = run.origins[name].removeprefix("http://")
        out.append(f"{name:<6} {address:<16} {answers:<34} {pages[name]:>7} {dropped[name]:>7}")

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
    others = [item for item in drops(run) if id(item) not in explained]
    if others:
        out += ["", "Other failed requests:"]
        out += [f"  {item['url']}: {item['exception']}: {item['message']}" for item in others]

    out += _directives_section(run)
    out += _sitemaps_section(run, robots)

    if with_stats:
        for crawl in run.crawls.values():
            stats = crawl.report.get("stats", {})
            rep = [f"  {key}: {value}" for key, value in sorted(stats.items()) if key[:4] == "rep/"]
            out += ["", f"rep/ stats of scrapy crawl {crawl.spider}:", *(rep or ["  (none)"])]
    return "\n".join(out)


def _directives_section(run: DemoRun) -> list[str]:
    """Pages that said nofollow/noindex, and what the crawler did about it."""
    out = ["", "Page-level directives (what the page said -> what the crawler did):"]
    for page in page_directives(run):
        out.append(f"  {page['site']} {page['path']:<9} {'; '.join(page['says'])}")
        did = []
        if page["noindex"]:
            did.append("rep_noindex = True (item kept, flagged)")
        elif any("noindex" in said for said in page["says"]):
            did.append(
                "rep_noindex not set"
                if page["noindex"] is None
                else "rep_noindex = False (not said to ExampleBot)"
            )
        if page["not_followed"]:
            did.append(f"links not followed, never requested: {', '.join(page['not_followed'])}")
        if page["followed"]:
            did.append(f"links followed: {', '.join(page['followed'])}")
        out.append(f"       {'; '.join(did) or '-'}")
    if len(out) == 2:
        out.append("  (none)")
    links = run.crawls.get("links")
    if links is not None:
        stats = links.report.get("stats", {})
        out.append(f"  rep/meta stats: {_stats_line(stats, 'rep/meta/')}")
    return out


def _sitemaps_section(run: DemoRun, robots: dict[str, dict[str, Any]]) -> list[str]:
    """What the sitemap crawl found in robots.txt, fetched and crawled, per site."""
    crawl = run.crawls.get("sitemaps")
    if crawl is None:
        return []
    out = ["", "Sitemaps from robots.txt (scrapy crawl sitemaps, a RobotsSitemapSpider):"]
    for name in crawl.sites:
        listed = robots.get(run.origins[name], {}).get("sitemaps")
        fetched = sitemap_paths(run, name)
        shown = [
            f"{path} x{count}" if count > 1 else path for path, count in sorted(fetched.items())
        ]
        if fetched and set(fetched.values()) == {1}:
            shown[-1] += " (each once)"
        crawled = sorted(
            run.path_of(item["url"])
            for item in crawl.items
            if item["kind"] == "page" and run.name_of(item["url"]) == name
        )
        refused = [item for item in forbidden(run) if run.name_of(item["url"]) == name]
        robots_txt = sum(hit["path"] == "/robots.txt" for hit in run.hits_of(name))
        times = "once" if robots_txt == 1 else f"{robots_txt} times"
        out += [
            f"  {'robots.txt of ' + name:<19} fetched {times}, for its rules and its sitemaps",
            "  Sitemap: lines      "
            + (", ".join(map(run.path_of, listed)) if listed else "(not reported)"),
            f"  sitemaps fetched    {', '.join(shown) or '-'}",
            f"  pages crawled       {', '.join(crawled) or '-'}",
        ]
        out += [
            f"  forbidden page      {run.path_of(item['url'])} "
            f"(line {item['line']}: {item['rule']}), never requested"
            for item in refused
        ]
        listed_pages = crawl.report.get("stats", {}).get("rep/sitemaps/pages", 0)
        if not refused and listed_pages > len(crawled):  # Scrapy's middleware says nothing
            out.append(
                f"  not crawled         {listed_pages - len(crawled)} page(s), no reason given"
            )
    stats = crawl.report.get("stats", {})
    out.append(f"  rep/sitemaps stats: {_stats_line(stats, 'rep/sitemaps/')}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="Crawl the local demo site and report.")
    parser.add_argument(
        "--builtin", action="store_true", help="use Scrapy's RobotsTxtMiddleware instead"
    )
    parser.add_argument("--keep", metavar="DIR", help="keep the crawls' files in DIR")
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
    if not run.ok:
        print(failure, file=sys.stderr)
        return 1
    print(format_report(run, builtin=args.builtin, with_stats=args.stats))
    if args.keep:
        print(f"\nfiles kept in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
