"""``scrapy robots URL [URL ...]``: would a crawl fetch these URLs, and why (docs/command.md).

robots.txt is fetched by a real crawl with the project's settings, whose spider
asks the crawl's robots service for each origin's entry, so that the command
and a crawl cannot disagree; ``--file`` reads a local robots.txt, with no crawl.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlparse

from scrapy import Spider
from scrapy.commands import ScrapyCommand
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyRobotsTxtMiddleware
from scrapy.exceptions import UsageError
from scrapy.settings import SETTINGS_PRIORITIES, Settings
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.project import inside_project
from twisted.internet.defer import DeferredList
from twisted.python.failure import Failure

from scrapy_rep import _clock, _compat, decompression
from scrapy_rep._robots import robots_off, robots_service
from scrapy_rep.commands._explain import Report, explain, render_json, render_text
from scrapy_rep.commands._pins import pin_notes, pin_report, render_pins
from scrapy_rep.config import Config
from scrapy_rep.decompression import ORDER as DECOMPRESSION_ORDER
from scrapy_rep.decompression import BoundedDecompressionMiddleware
from scrapy_rep.evidence import JSONL
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.middleware import RobotsTxtMiddleware
from scrapy_rep.origin import Origin, origin_of
from scrapy_rep.policy import PARSED, Entry
from scrapy_rep.robotstxt import RobotsTxt
from scrapy_rep.robotstxt._agent import cut_short, product_token

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator

    from scrapy.settings import BaseSettings

    from scrapy_rep.pins import PinWatch

__all__ = ["Command"]

MIDDLEWARE_ORDER = 100
_DEFAULT = SETTINGS_PRIORITIES["default"]


class Command(ScrapyCommand):
    default_settings: ClassVar[dict[str, Any]] = {
        # a one-shot check: no remote shell, telnet console or periodic stats
        "REMOTE_CONTROL_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOGSTATS_INTERVAL": 0,
        "LOG_LEVEL": "WARNING",  # the report is on stdout; see also _quiet_logging
    }

    def __init__(self) -> None:
        super().__init__()
        self._config = Config()
        self._agent_source = ""
        self._notes: list[str] = []
        self._urls: list[str] = []
        self._file_body: bytes | None = None
        self._pins: list[dict[str, Any]] = []

    def syntax(self) -> str:
        return "[options] URL [URL ...]"

    def short_desc(self) -> str:
        return "Tell whether robots.txt lets the crawler fetch URLs, and why"

    def long_desc(self) -> str:
        return (
            "Fetch the robots.txt of each URL's origin through Scrapy, with the "
            "project's settings, and print for each URL whether scrapy-rep would "
            "let a crawl fetch it, the robots.txt group and line that decided, the "
            "delay between requests, the sitemaps and how robots.txt was fetched; "
            "with --purpose (or REP_PURPOSES), what its usage lines say per purpose. "
            "Exit status: 0 when all URLs are allowed, 1 when one is not, 2 on "
            "usage errors."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--agent",
            metavar="TOKEN",
            help="check as this user-agent token instead of the one taken from "
            "ROBOTSTXT_USER_AGENT or USER_AGENT",
        )
        parser.add_argument(
            "--file",
            metavar="PATH",
            help="check against this local robots.txt instead of fetching it; "
            "URLs may then be paths (/a/b?c)",
        )
        parser.add_argument(
            "--purpose",
            action="append",
            metavar="PURPOSE",
            help="also say what robots.txt's usage preferences (Content-Usage, "
            "Content-Signal) state for this purpose: train-ai, search, ai-input "
            "(repeatable, or comma-separated; default: REP_PURPOSES)",
        )
        parser.add_argument(
            "--pins",
            metavar="FILE",
            help="compare each robots.txt with its pin in FILE (REP_PIN_FILE: JSON, "
            "TSV or evidence.jsonl, or an evidence directory, REP_EVIDENCE) and show "
            "the verdicts under the pinned rules",
        )
        parser.add_argument(
            "--state",
            metavar="DIR",
            help="read (and update) the robots.txt state in DIR (REP_STATE_DIR): "
            "what a crawl using it would decide",
        )
        parser.add_argument("--json", action="store_true", help="print JSON")

    # -- options --------------------------------------------------------------

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        settings = self.settings
        assert settings is not None
        if not opts.loglevel:
            _quiet_logging(settings)
        self._notes = _notes(settings)
        settings.set("ROBOTSTXT_OBEY", True, priority="cmdline")
        if opts.agent is not None and not opts.agent.strip():
            raise UsageError(
                "--agent needs the token robots.txt groups use for your crawler, "
                "e.g. --agent ExampleBot",
                print_help=False,
            )
        if opts.purpose:
            settings.set("REP_PURPOSES", ",".join(opts.purpose), priority="cmdline")
        if opts.pins is not None:
            settings.set("REP_PIN_FILE", _pin_file(opts.pins), priority="cmdline")
        if opts.state is not None:
            settings.set("REP_STATE_DIR", opts.state, priority="cmdline")
        checked = settings
        if opts.agent is not None:
            # --agent picks the group of the verdicts, which the command works out,
            # not the crawl: the crawl keeps the project's agent, and the start
            # WARNINGs are about the project's settings, not about --agent
            checked = settings.copy()
            checked.set("ROBOTSTXT_USER_AGENT", opts.agent, priority="cmdline")
            self._notes += _agent_notes(opts.agent)
            if _agent_invalid(settings):  # the crawl could not start with the project's
                settings.set("ROBOTSTXT_USER_AGENT", opts.agent, priority="cmdline")
        try:
            self._config = Config.from_settings(checked)
        except InvalidSetting as exc:
            if opts.purpose and exc.setting == "REP_PURPOSES":
                reason = str(exc).removeprefix("REP_PURPOSES: ")
                raise UsageError(f"--purpose: {reason}", print_help=False) from None
            if opts.agent is not None and exc.setting == "ROBOTSTXT_USER_AGENT":
                raise UsageError(
                    f"--agent {opts.agent!r} names no crawler; give the token robots.txt "
                    "groups use for it, e.g. --agent ExampleBot",
                    print_help=False,
                ) from None
            if opts.pins is not None and exc.setting == "REP_PIN_FILE":
                reason = str(exc).removeprefix("REP_PIN_FILE: ")
                raise UsageError(f"--pins: {reason}", print_help=False) from None
            raise UsageError(f"invalid setting {exc}", print_help=False) from None
        self._agent_source = _agent_source(checked, self._config, opts.agent)
        self._urls = _check_arguments(args, local=opts.file is not None)
        if opts.file is not None:
            try:
                self._file_body = Path(opts.file).read_bytes()
            except OSError as exc:
                raise UsageError(
                    f"--file: cannot read {opts.file!r}: {exc.strerror or exc}",
                    print_help=False,
                ) from None
        else:
            _use_scrapy_rep_middleware(settings)

    # -- running --------------------------------------------------------------

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if self._file_body is not None:
            reports: list[Report] | None = [self._check_file(opts.file, self._file_body)]
        else:
            reports = self._check_fetched()
        if reports is None:
            self.exitcode = 2
            return
        config = self._config
        pin_file = config.pin_file if self._file_body is None else None
        if opts.json:
            text = render_json(reports, config)
            if pin_file is not None:
                data = json.loads(text)
                data["pins"] = self._pins
                text = json.dumps(data, indent=2)
            print(text)
        else:
            print(f"agent {config.user_agent!r} ({self._agent_source})")
            print("".join(f"note: {note}\n" for note in self._notes))
            print(render_text(reports, config))
            if pin_file is not None:
                print()
                print(render_pins(self._pins, pin_file))
        allowed = all(verdict.allowed for report in reports for verdict in report.verdicts)
        self.exitcode = 0 if allowed else 1

    def _check_file(self, path: str, body: bytes) -> Report:
        config = self._config
        origins = {_origin(url) for url in self._urls}
        origin = origins.pop() if len(origins) == 1 else None
        base = origin.robots_url if origin is not None else None  # for relative Sitemap lines
        robots = RobotsTxt.parse(body, url=base, max_size=config.max_size)
        now = _clock.now()
        entry = Entry(
            robots, PARSED, float("inf"), now, truncated=robots.truncated, size=len(body), url=path
        )
        return explain(path, entry, self._urls, config, from_file=True)

    def _check_fetched(self) -> list[Report] | None:
        by_origin: dict[Origin, list[str]] = {}
        for url in self._urls:
            origin = _origin(url)
            assert origin is not None  # checked in process_options
            by_origin.setdefault(origin, []).append(url)
        check = _Check([urls[0] for urls in by_origin.values()])
        process = self.crawler_process
        assert process is not None
        process.crawl(_RobotsSpider, check=check)
        process.start()
        missing = [url for url in check.urls if check.entries.get(url) is None]
        if process.bootstrap_failed or check.problems or missing:
            for problem in check.problems or ["the crawl did not run (see the log above)"]:
                print(f"scrapy robots: {problem}", file=sys.stderr)
            return None
        reports = []
        for origin, urls in by_origin.items():
            entry = check.entries[urls[0]]
            assert entry is not None
            report = explain(origin.robots_url, entry, urls, self._config)
            reports.append(report)
            if check.watch is not None:
                agent = self._config.user_agent
                self._pins.append(pin_report(check.watch, origin, entry, report.verdicts, agent))
        self._notes += pin_notes(self._pins)
        return reports


@dataclass
class _Check:
    """The first URL of each origin, and what the check's crawl found for them."""

    urls: list[str]
    entries: dict[str, Entry | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    watch: PinWatch | None = None  # the crawl's pins (REP_PIN_FILE)


class _RobotsSpider(Spider):
    """Asks the crawl's robots service for each origin's robots.txt; yields nothing."""

    name = "scrapy_rep_robots"

    def __init__(self, check: _Check, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check

    async def start(self) -> AsyncIterator[Any]:
        check = self.check
        robots = robots_service(self.crawler)
        if robots is None:
            why = robots_off(self.crawler)
            check.problems.append(f"robots.txt is not obeyed in this project: {why}")
        else:
            check.watch = robots.pins

            async def ask(url: str) -> None:
                check.entries[url] = await robots.entry_for(url)

            # all origins at once, on any reactor
            outcomes = await maybe_deferred_to_future(
                DeferredList([deferred_from_coro(ask(u)) for u in check.urls], consumeErrors=True)
            )
            for url, (_ok, result) in zip(check.urls, outcomes, strict=True):
                if isinstance(result, Failure):
                    check.problems.append(f"checking {url} failed: {result.getErrorMessage()}")
        for _ in ():  # an async generator that yields no request
            yield


# -- helpers --------------------------------------------------------------------


def _quiet_logging(settings: BaseSettings) -> None:
    """At most WARNING: the report is on stdout, the log only says what went wrong."""
    level = logging.getLevelName(str(settings.get("LOG_LEVEL", "")).upper())
    if not isinstance(level, int) or level < logging.WARNING:
        settings.set("LOG_LEVEL", "WARNING", priority="cmdline")


def _notes(settings: BaseSettings) -> list[str]:
    """What the user's own settings change about these verdicts in a real crawl."""
    notes: list[str] = []
    try:
        obey = settings.getbool("ROBOTSTXT_OBEY")
        dry_run = settings.getbool("REP_DRY_RUN")
    except ValueError:
        return notes  # Config.from_settings reports the invalid value
    if not obey and (inside_project() or settings.getpriority("ROBOTSTXT_OBEY") != _DEFAULT):
        notes.append("ROBOTSTXT_OBEY is False here: a crawl with these settings ignores robots.txt")
    if dry_run:
        notes.append("REP_DRY_RUN is on: a crawl only counts forbidden requests, it sends them")
    problem = decompression.problem(_as_a_crawl_has_them(settings)) if inside_project() else None
    if problem is not None:  # this check decodes with a bound all the same
        notes.append(
            f"{problem}: a crawl with these settings inflates compressed robots.txt answers "
            "up to DOWNLOAD_MAXSIZE, and loses larger ones"
        )
    return notes


def _agent_notes(agent: str) -> list[str]:
    """What --agent is checked as, when that is less than the name given."""
    rest = cut_short(agent)
    token = product_token(agent)
    if rest is None or token is None:
        return []
    return [
        f"--agent {agent!r} is checked as {token!r}: a robots.txt product token holds only "
        f"letters, '_' and '-', so it ends before {rest!r}"
    ]


def _agent_invalid(settings: BaseSettings) -> bool:
    try:
        Config.from_settings(settings)
    except InvalidSetting as exc:
        return exc.setting == "ROBOTSTXT_USER_AGENT"
    return False


def _as_a_crawl_has_them(settings: BaseSettings) -> BaseSettings:
    """``settings`` as the project's add-ons change a crawl's (``scrapy_rep.Addon``
    enables the middlewares the notes are about); quiet: the check's crawl logs them."""
    if not isinstance(settings, Settings):
        return settings
    logging.disable(logging.CRITICAL)
    try:
        crawler = Crawler(Spider, settings)
        crawler.addons.load_settings(crawler.settings)
    except Exception:  # a broken add-on is for the crawl to report
        return settings
    finally:
        logging.disable(logging.NOTSET)
    return crawler.settings


def _agent_source(settings: BaseSettings, config: Config, agent: str | None) -> str:
    if agent is not None:
        return "from --agent"
    if settings.get("ROBOTSTXT_USER_AGENT"):
        return "from ROBOTSTXT_USER_AGENT"
    if config.user_agent_problem:
        return config.user_agent_problem + ", or use --agent"
    return "from USER_AGENT"


def _pin_file(path: str) -> str:
    """``--pins``: a pin file, or an evidence directory (its evidence.jsonl)."""
    return str(Path(path) / JSONL) if Path(path).is_dir() else path


def _origin(url: str) -> Origin | None:
    try:
        parsed = urlparse(url)
    except ValueError:
        return None
    return origin_of(parsed)


def _check_arguments(args: list[str], *, local: bool) -> list[str]:
    """The URLs to check; UsageError for anything else."""
    for arg in args:
        if arg.startswith("-"):
            raise UsageError(f"unknown option {arg}", print_help=False)
    if not args:
        raise UsageError("give at least one URL", print_help=False)
    for url in args:
        if _origin(url) is not None or (local and url.startswith("/")):
            continue
        expected = "an absolute http(s) URL"
        if local:
            expected = "a path (/...) or " + expected
        hint = f" (did you mean 'https://{url}'?)" if "://" not in url and "." in url else ""
        raise UsageError(f"{url!r} is not {expected}{hint}", print_help=False)
    return list(args)


def _use_scrapy_rep_middleware(settings: BaseSettings) -> None:
    """scrapy-rep's middleware on (the project's own, if it enables it or a
    subclass), Scrapy's off, and compressed answers decoded with a bound, whatever
    the project says, for this crawl only (as the add-on would set them)."""
    enabled = [cls for cls, _ in _compat.downloader_middlewares(settings)]
    if not any(isinstance(cls, type) and issubclass(cls, RobotsTxtMiddleware) for cls in enabled):
        _compat.set_component(
            settings, "DOWNLOADER_MIDDLEWARES", RobotsTxtMiddleware, MIDDLEWARE_ORDER
        )
    _compat.set_component(settings, "DOWNLOADER_MIDDLEWARES", ScrapyRobotsTxtMiddleware, None)
    if BoundedDecompressionMiddleware not in enabled:
        _compat.set_component(
            settings, "DOWNLOADER_MIDDLEWARES", BoundedDecompressionMiddleware, DECOMPRESSION_ORDER
        )
