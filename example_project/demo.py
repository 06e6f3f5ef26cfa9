"""``make demo``: crawl a local multi-origin site with scrapy-rep and report.

1. starts the demo site (demosite.py) in its own process on 127.0.0.1;
2. runs two crawls in this project, as a user would: ``scrapy crawl links``
   from the home page of most sites, following links; then ``scrapy crawl
   sitemaps`` on the ``maps`` site, reading the sitemaps its robots.txt lists;
3. stops the site and prints what happened per origin: pages crawled, and
   what robots.txt did, as scrapy-rep's own report (``REP_REPORT``, the file
   any crawl can write) tells it: requests forbidden with the deciding lines,
   the delay applied (next to the gaps the site measured between requests),
   unreachable origins and their dropped requests; then pages that said
   nofollow or noindex and what the crawler did, the pages crawled from
   robots.txt sitemaps, and how the crawler waited for a site that answered
   503 with Retry-After (the pause it asked for, measured by the site).

The site's access log says what reached it; the spiders' feeds what they
got; ``REP_REPORT`` what robots.txt changed; the ``StatsFile`` extension of
the project the stats. Nothing is read from the crawls' logs.

Options: ``--builtin`` runs the same crawls with Scrapy's own
RobotsTxtMiddleware instead, for comparison (it writes no report); ``--stats``
adds the crawls' ``rep/`` stats; ``--keep DIR`` keeps the crawls' logs, feeds,
reports and the site's access log in DIR.
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
    stats: dict[str, Any]  # StatsFile extension: finish reason and stats
    origins: dict[str, dict[str, Any]]  # REP_REPORT: what robots.txt did, by origin URL
    log_path: Path
    stderr: str  # what `scrapy crawl` printed besides its log file

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.stats)

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

    def robots(self, name: str) -> dict[str, Any] | None:
        """scrapy-rep's REP_REPORT record of one origin (None: not in any report)."""
        for crawl in self.crawls.values():
            record = crawl.origins.get(self.origins.get(name, ""))
            if record is not None:
                return record
        return None


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
        f"REP_REPORT={workdir / f'{spider}-robots.jsonl'}",
        "-s",
        f"STATS_FILE={workdir / f'{spider}-stats.json'}",
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
        stats=_read_json(workdir / f"{spider}-stats.json"),
        origins=_by_origin(_read_jsonl(workdir / f"{spider}-robots.jsonl")),
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


def _by_origin(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """REP_REPORT records by origin. A broad crawl may write several records of one
    origin (docs/report.md): their counts add up, the latest says what robots.txt was."""
    merged: dict[str, dict[str, Any]] = {}
    for record in records:
        known = merged.get(record["origin"])
        if known is not None:
            for key in ("forbidden", "dropped", "paced", "fetches"):
                record[key] += known[key]
            record["forbidden_rules"] += known["forbidden_rules"]
            if record["outcome"] is None:
                record["outcome"], record["reason"] = known["outcome"], known["reason"]
        merged[record["origin"]] = record
    return merged


# ---------------------------------------------------------------- the report


def drops(run: DemoRun) -> list[dict[str, Any]]:
    """Requests of the links spider that never reached the site, with why (its errback)."""
    return [item for item in run.items if item["kind"] == "dropped"]


def forbidden_rules(run: DemoRun, name: str) -> list[tuple[int | None, str, int]]:
    """``(line, rule, requests)`` robots.txt forbade on one origin, from REP_REPORT."""
    record = run.robots(name) or {}
    return [(r["line"], r["rule"], r["count"]) for r in record.get("forbidden_rules", [])]


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


SLOW_DOWN = (429, 503)
IN_FLIGHT = 0.05  # seconds: a request this close after an answer was sent before it


def slow_downs(run: DemoRun) -> list[dict[str, Any]]:
    """Each crawled site whose pages answered 429/503: its page requests in order,
    as (seconds since its first page request, path, status, Retry-After), and
    how many arrived during a pause it had asked for (from the access log)."""
    found = []
    for name in run.sites:
        pages = [hit for hit in run.hits_of(name) if hit["path"] != "/robots.txt"]
        if not any(hit["status"] in SLOW_DOWN for hit in pages):
            continue
        pauses = [
            (hit["t"] + IN_FLIGHT, hit["t"] + float(hit["retry_after"]))
            for hit in pages
            if hit["status"] in SLOW_DOWN and str(hit.get("retry_after", "")).isdigit()
        ]
        inside = [hit for hit in pages if any(a < hit["t"] < b for a, b in pauses)]
        start = pages[0]["t"]
        requests = [
            (hit["t"] - start, hit["path"], hit["status"], hit.get("retry_after")) for hit in pages
        ]
        found.append({"site": name, "requests": requests, "inside": len(inside)})
    return found


def sitemap_paths(run: DemoRun, name: str) -> Counter[str]:
    """Sitemaps the site served to one origin (the demo site keeps them in /sitemaps/)."""
    return Counter(hit["path"] for hit in run.hits_of(name) if hit["path"].startswith("/sitemaps/"))


def _stats_line(stats: dict[str, Any], prefix: str) -> str:
    found = [
        (key.removeprefix(prefix), value) for key, value in stats.items() if key.startswith(prefix)
    ]
    return ", ".join(f"{key} {value}" for key, value in found) or "(none)"


def format_report(run: DemoRun, *, builtin: bool = False, with_stats: bool = False) -> str:
    middleware = "Scrapy's built-in RobotsTxtMiddleware" if builtin else "scrapy-rep"
    pages: Counter[str] = Counter(
        run.name_of(item["url"]) for item in run.items if item["kind"] == "page"
    )
    out = [f"scrapy-rep demo: {len(run.sites)} sites on 127.0.0.1, robots.txt by {middleware}"]
    for number, crawl in enumerate(run.crawls.values(), 1):
        out.append(
            f"crawl {number}: scrapy crawl {crawl.spider} ({', '.join(crawl.sites)}): "
            f"{crawl.seconds:.1f} s, {crawl.stats.get('reason', '?')}, "
            f"exit code {crawl.returncode}"
        )
    out += [
        "",
        f"{'site':<6} {'address':<16} {'robots.txt answers':<34} {'outcome':<12}"
        f"{'crawled':>7} {'forbidden':>9} {'dropped':>7} {'paced':>5}",
    ]
    for name in run.sites:
        answers = " ".join(robots_fetches(run, name)) or "-"
        address = run.origins[name].removeprefix("http://")
        record = run.robots(name) or {}
        counts = [str(record.get(key, "-")) for key in ("forbidden", "dropped", "paced")]
        out.append(
            f"{name:<6} {address:<16} {answers:<34} {record.get('outcome') or '-':<12}"
            f"{pages[name]:>7} {counts[0]:>9} {counts[1]:>7} {counts[2]:>5}"
        )
    if builtin:
        said = [item for item in drops(run) if item["message"] == "Forbidden by robots.txt"]
        out += ["", "Forbidden by robots.txt (the links spider's errback; no rule named):"]
        out += [f"  {item['url']}" for item in said] or ["  (none)"]
        out.append("(Scrapy's RobotsTxtMiddleware writes no per-origin report: no REP_REPORT)")
    else:
        out += _robots_sections(run)
    out += _directives_section(run)
    out += _sitemaps_section(run)
    out += _slow_down_section(run)

    if with_stats:
        for crawl in run.crawls.values():
            stats = crawl.stats.get("stats", {})
            rep = [f"  {key}: {value}" for key, value in sorted(stats.items()) if key[:4] == "rep/"]
            out += ["", f"rep/ stats of scrapy crawl {crawl.spider}:", *(rep or ["  (none)"])]
    return "\n".join(out)


def _robots_sections(run: DemoRun) -> list[str]:
    """What robots.txt changed, per site, from scrapy-rep's REP_REPORT records."""
    out = ["", "Forbidden by robots.txt (never requested; the deciding lines, REP_REPORT):"]
    for name in run.sites:
        for line, rule, count in forbidden_rules(run, name):
            out.append(f"  {name:<6} {f'line {line}: {rule}':<30} x{count}")
    if len(out) == 2:
        out.append("  (none)")

    out += ["", "Crawl-delay (REP_REPORT; the gaps the site measured between page requests):"]
    delayed = [name for name in run.sites if (run.robots(name) or {}).get("paced")]
    for name in delayed:
        record = run.robots(name) or {}
        shown = ", ".join(f"{gap:.2f}" for gap in request_gaps(run, name)) or "-"
        out.append(
            f"  {name}: one request every {record['delay']:g} s ({record['delay_source']}), "
            f"{record['paced']} requests paced; gaps: {shown} s"
        )
    if not delayed:
        out.append("  (none)")

    out += ["", "Unreachable (robots.txt could not be fetched: nothing crawled there):"]
    lost = [name for name in run.sites if (run.robots(name) or {}).get("outcome") == "unreachable"]
    for name in lost:
        record = run.robots(name) or {}
        answers = ", ".join(
            f"{status} x{count}" for status, count in Counter(robots_fetches(run, name)).items()
        )
        dropped = record["dropped"]
        out.append(
            f"  {name}: robots.txt answered {answers}; {dropped} "
            f"{'request' if dropped == 1 else 'requests'} dropped ({record['dropped_reason']})"
        )
    if not lost:
        out.append("  (none)")

    explained = ("ForbiddenByRobots", "RobotsTxtUnavailable")
    others = [item for item in drops(run) if not item["exception"].endswith(explained)]
    if others:
        out += ["", "Other failed requests:"]
        out += [f"  {item['url']}: {item['exception']}: {item['message']}" for item in others]
    return out


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
        stats = links.stats.get("stats", {})
        out.append(f"  rep/meta stats: {_stats_line(stats, 'rep/meta/')}")
    return out


def _sitemaps_section(run: DemoRun) -> list[str]:
    """What the sitemap crawl found in robots.txt, fetched and crawled, per site."""
    crawl = run.crawls.get("sitemaps")
    if crawl is None:
        return []
    out = ["", "Sitemaps from robots.txt (scrapy crawl sitemaps, a RobotsSitemapSpider):"]
    for name in crawl.sites:
        record = run.robots(name)
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
        robots_txt = sum(hit["path"] == "/robots.txt" for hit in run.hits_of(name))
        times = "once" if robots_txt == 1 else f"{robots_txt} times"
        out += [
            f"  {'robots.txt of ' + name:<19} fetched {times}, for its rules and its sitemaps",
            "  Sitemap: lines      "
            + (str(record["sitemaps"]) if record is not None else "(no report)"),
            f"  sitemaps fetched    {', '.join(shown) or '-'}",
            f"  pages crawled       {', '.join(crawled) or '-'}",
        ]
        out += [
            f"  forbidden           {count} listed page(s) by line {line} ({rule}), never requested"
            for line, rule, count in forbidden_rules(run, name)
        ]
        listed_pages = crawl.stats.get("stats", {}).get("rep/sitemaps/pages", 0)
        if record is None and listed_pages > len(crawled):  # Scrapy's middleware says nothing
            out.append(
                f"  not crawled         {listed_pages - len(crawled)} page(s), no reason given"
            )
    stats = crawl.stats.get("stats", {})
    out.append(f"  rep/sitemaps stats: {_stats_line(stats, 'rep/sitemaps/')}")
    return out


def _slow_down_section(run: DemoRun) -> list[str]:
    """How the crawler waited for sites that answered 503/429 (the site's clock)."""
    found = slow_downs(run)
    if not found:
        return []
    out = [
        "",
        "Slow down (pages answered 503 + Retry-After; seconds since the first page request):",
    ]
    for site in found:
        requests = site["requests"]
        shown = 0
        for seconds, path, status, retry_after in requests:
            said = f" (Retry-After: {retry_after})" if retry_after else ""
            name = "" if shown else site["site"]
            out.append(f"  {name:<6} {seconds:6.2f} s  {path:<10} {status}{said}")
            shown += 1
            if status not in SLOW_DOWN:
                break
        rest = [path for _, path, _, _ in requests[shown:]]
        if rest:
            out.append(f"  {'':<6} then {', '.join(rest)}, at its normal pace")
        crawled = sum(
            1
            for item in run.items
            if item["kind"] == "page" and run.name_of(item["url"]) == site["site"]
        )
        out.append(
            f"  {'':<6} requests during the pauses it asked for: {site['inside']}; "
            f"pages crawled: {crawled}"
        )
    links = run.crawls.get("links")
    if links is not None:
        stats = _stats_line(links.stats.get("stats", {}), "rep/slowdown/")
        out.append(f"  rep/slowdown stats (every site, robots.txt requests too): {stats}")
    return out


NEXT_STEPS = """
Next: the same for your own crawls. In your project's settings.py, change the existing
ADDONS line to ADDONS = {"scrapy_rep.Addon": 100}, set ROBOTSTXT_OBEY = True and
ROBOTSTXT_USER_AGENT to your crawler's name (USER_AGENT should name it too). Each crawl
then says at INFO what robots.txt forbade or slowed, with a per-site summary at the end,
and pauses a site that answers 429 or 503 for as long as it asks (docs/slowdown.md);
REP_REPORT = "robots-report.jsonl" also writes it per origin (the demo's crawls did:
keep their logs and reports with --keep DIR). See the README and docs/report.md."""


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
    print(NEXT_STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
