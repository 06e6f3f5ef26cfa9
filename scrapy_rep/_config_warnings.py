"""Settings that are usable but odd: one WARNING each at start (:attr:`Config.warnings`)."""

from __future__ import annotations

import difflib
import os
import re
import sys

from scrapy.settings import BaseSettings, Settings

from scrapy_rep.robotstxt._agent import cut_short, product_token


def odd_settings(settings: BaseSettings, token: str, explicit: bool, known: set[str]) -> list[str]:
    """The warnings for ``settings``, whose robots.txt token is ``token``
    (``explicit``: from ROBOTSTXT_USER_AGENT) and whose read names are ``known``."""
    cut = _agent_cut_short(settings, token, explicit)
    return (
        cut
        # a cut-short token is about to be renamed: naming it in USER_AGENT is no fix
        + ([] if cut else _agent_mismatch(settings, token, explicit))
        + _unknown_settings(settings, known)
        + _parser_setting(settings)
    )


ROBOT_PARSER = "scrapy_rep.RobotParser"


# Names that look meant for scrapy-rep or Scrapy's robots.txt settings, in any case.
_OUR_PREFIXES = ("REP_", "ROBOTSTXT")


def _unknown_settings(settings: BaseSettings, known: set[str]) -> list[str]:
    """One warning per setting nobody reads that looks meant for us, naming the
    closest known one: REP_* and ROBOTSTXT* names in any case (``rep_unreachable``,
    ``ROBOTSTXT_USERAGENT``), and near misses of them (``REP_UNREACHEABLE``)."""
    scrapys = {str(name) for name in Settings()}
    names = {name.upper(): name for name in known | scrapys if name.startswith(_OUR_PREFIXES)}
    warnings = []
    module, module_names = _settings_module_names()
    given = {str(key) for key in settings}
    for name in sorted(given | module_names):
        if name in known or name in scrapys:
            continue
        upper = name.upper()
        close = difflib.get_close_matches(upper, sorted(names), n=1, cutoff=0.75)
        if not upper.startswith(_OUR_PREFIXES) and not (
            close and difflib.SequenceMatcher(None, upper, close[0]).ratio() >= 0.85
        ):
            continue  # someone else's setting
        hint = f"; did you mean {names[close[0]]}?" if close else ""
        if name not in given:  # only in the module: Scrapy never read it
            hint += f" (in {module}: Scrapy reads only upper-case names from a settings module)"
        warnings.append(f"Unknown setting {name} is ignored{hint}")
    return warnings


def _settings_module_names() -> tuple[str, set[str]]:
    """The project's settings module (SCRAPY_SETTINGS_MODULE, already imported by
    Scrapy) and its names Scrapy left out for not being upper case, which
    ``settings`` therefore never shows (``rep_max_waiting = 10``)."""
    name = os.environ.get("SCRAPY_SETTINGS_MODULE", "")
    module = sys.modules.get(name) if name else None
    if module is None:
        return name, set()
    return name, {attr for attr in vars(module) if not attr.isupper() and not attr.startswith("_")}


def _agent_cut_short(settings: BaseSettings, token: str, explicit: bool) -> list[str]:
    """A name that reads as more than its product token: "My Crawler" is "My"."""
    setting = "ROBOTSTXT_USER_AGENT" if explicit else "USER_AGENT"
    value = settings.get(setting)
    rest = cut_short(value) if isinstance(value, (str, bytes)) else None
    if rest is None:
        return []
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    name = "".join(re.findall(r"[A-Za-z_-]+", text.split("/", 1)[0]))
    fix = f"Set ROBOTSTXT_USER_AGENT to a name of letters, '_' and '-' only (e.g. {name!r})"
    if not explicit:
        fix += ", or make USER_AGENT begin with one"
    else:
        sent = _sent_token(settings)
        if sent is None or sent.lower() != name.lower():
            fix += f", and USER_AGENT name the same crawler ('{name}/1.0 (+https://your.site/bot)')"
    return [
        f"{setting} {value!r} is obeyed as {token!r}: a robots.txt product token holds only "
        f"letters, '_' and '-' (RFC 9309 §2.2.1), so it ends before {rest!r}. User-agent lines "
        f"are cut the same way: the groups of 'User-agent: {token}', '{token}1' or "
        f"'{token} Other' apply to this crawler. {fix}"
    ]


def _agent_mismatch(settings: BaseSettings, token: str, explicit: bool) -> list[str]:
    """Sites read USER_AGENT; robots.txt is obeyed for ROBOTSTXT_USER_AGENT."""
    if not explicit:
        return []
    sent = _sent_token(settings)
    if sent is not None and sent.lower() == token.lower():
        return []
    header = settings.get("USER_AGENT")
    return [
        f"USER_AGENT {header!r} does not name {token!r} (ROBOTSTXT_USER_AGENT): sites see "
        f"one crawler while robots.txt is obeyed for another; set USER_AGENT = "
        f"'{token}/1.0 (+https://your.site/bot)'"
    ]


def _sent_token(settings: BaseSettings) -> str | None:
    """The product token USER_AGENT names, the one sites see."""
    header = settings.get("USER_AGENT")
    return product_token(header) if isinstance(header, (str, bytes)) else None


def _parser_setting(settings: BaseSettings) -> list[str]:
    """ROBOTSTXT_PARSER only matters to Scrapy's own middleware, off with scrapy-rep's."""
    default = Settings().get("ROBOTSTXT_PARSER")
    parser = settings.get("ROBOTSTXT_PARSER")
    if parser in (None, default, ROBOT_PARSER) or settings.getpriority("ROBOTSTXT_PARSER") == 0:
        return []
    name = parser if isinstance(parser, str) else getattr(parser, "__qualname__", repr(parser))
    return [
        f"ROBOTSTXT_PARSER = {name!r} is not used: scrapy_rep.RobotsTxtMiddleware reads "
        "robots.txt with its own parser (ROBOTSTXT_PARSER is for Scrapy's middleware)"
    ]
