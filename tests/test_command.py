"""``scrapy robots``, run as a user runs it (``scrapy`` in a process of its own:
scrapy_forks.py, each run forked from one process that imported Scrapy once),
against real local servers: what it prints, what reached the server, and its
exit status."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from scrapy_forks import Robots, ScrapyForks
from servers import Reply, ScriptedServer

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # scrapy robots subprocesses

ROBOTS = """\
# test shop
User-agent: *
Disallow: /private/
Allow: /private/public-note
Crawl-delay: 2

User-agent: ExampleBot
Disallow: /cart
Disallow: /*?sort=
Crawl-delay: 3
Request-rate: 1/10s

Sitemap: /sitemap.xml
Sitemap: http://elsewhere.example/news.xml.gz
"""


def verdict_line(stdout: str, url: str) -> str:
    """The output line that gives ``url``'s verdict, spaces squeezed."""
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1] == url:
            return " ".join(words)
    raise AssertionError(f"no verdict for {url} in:\n{stdout}")


def fact(stdout: str, label: str) -> str:
    match = re.search(rf"^  {label} +(.*)$", stdout, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{stdout}"
    return match.group(1)


def test_forbidden_url_names_group_line_and_rule_and_exits_1(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    site.robots(ROBOTS)
    urls = [site.url("/"), site.url("/cart"), site.url("/shoes?sort=price"), site.url("/private/x")]
    result = scrapy_robots("--agent", "ExampleBot", *urls, cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, result.stderr
    assert out.startswith("agent 'ExampleBot' (from --agent)")
    assert verdict_line(out, site.url("/")) == f"ALLOWED {site.url('/')} no rule matched"
    assert verdict_line(out, site.url("/cart")) == (
        f"FORBIDDEN {site.url('/cart')} line 8: Disallow: /cart"
    )
    assert verdict_line(out, site.url("/shoes?sort=price")).endswith("line 9: Disallow: /*?sort=")
    # ExampleBot has its own group: the "*" group's /private/ rule is not its
    assert verdict_line(out, site.url("/private/x")).startswith("ALLOWED")
    assert fact(out, "group") == "User-agent: examplebot"
    assert (
        fact(out, "delay")
        == "10 s between requests (line 10: Crawl-delay: 3; line 11: Request-rate: 1/10s)"
    )
    assert f"sitemaps  {site.url('/sitemap.xml')}\n" in out
    assert "            http://elsewhere.example/news.xml.gz\n" in out
    fetched = fact(out, "fetched")
    assert re.match(r"HTTP 200, \d+ bytes; fresh until .* \(expires in 86400 s\)", fetched)
    # one robots.txt block for four URLs of one origin, one download, no page fetched
    assert out.count("/robots.txt\n") == 1
    assert site.paths() == ["/robots.txt"]


def test_all_allowed_exits_0_and_the_star_group_applies_to_other_agents(
    site: ScriptedServer, site2: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    site.robots(ROBOTS)
    site2.script("/robots.txt", Reply(status=404))
    note = site.url("/private/public-note")
    no_robots = site2.url("/private/x")
    result = scrapy_robots(site.url("/cart"), note, no_robots, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    assert out.startswith("agent 'Scrapy' (from USER_AGENT)")
    assert fact(out, "group") == "User-agent: * (no group names 'Scrapy')"
    assert verdict_line(out, note) == f"ALLOWED {note} line 4: Allow: /private/public-note"
    assert fact(out, "delay") == "2 s between requests (line 5: Crawl-delay: 2)"
    assert "HTTP 404: no usable robots.txt, everything allowed; fresh until" in out
    assert verdict_line(out, no_robots) == f"ALLOWED {no_robots} no robots.txt rules apply"


def test_urls_of_two_origins_get_one_block_each_and_503_means_dropped(
    site: ScriptedServer, site2: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    site.robots(ROBOTS)
    site2.script("/robots.txt", Reply(status=503))
    down = site2.url("/page")
    result = scrapy_robots(site.url("/a"), down, site.url("/b"), cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, result.stderr
    blocks = out.split("\n\n")[1:]
    assert [block.splitlines()[0] for block in blocks] == [
        site.url("/robots.txt"),
        site2.url("/robots.txt"),
    ]
    assert re.search(r"fetched +unreachable \(HTTP 503\); a crawl asks again in 60 s", blocks[1])
    assert "REP_UNREACHABLE = 'disallow': every request to this origin is dropped" in blocks[1]
    assert verdict_line(out, down) == (
        f"FORBIDDEN {down} robots.txt unreachable: dropped (REP_UNREACHABLE)"
    )
    assert site2.hits("/page") == 0

    allowing = scrapy_robots("-s", "REP_UNREACHABLE=allow", down, cwd=tmp_path)
    assert allowing.returncode == 0, allowing.stderr
    assert verdict_line(allowing.stdout, down).startswith(f"ALLOWED {down} robots.txt unreachable")


def test_redirected_robots_txt_and_capped_crawl_delay(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    site.script("/robots.txt", Reply(status=301, headers={"Location": "/moved/robots.txt"}))
    site.script(
        "/moved/robots.txt",
        Reply(body=b"User-agent: *\nCrawl-delay: 120\nDisallow: /x\n"),
    )
    result = scrapy_robots("-s", "REP_MAX_CRAWL_DELAY=30", site.url("/x/1"), cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, result.stderr
    assert fact(out, "redirect") == f"1 redirect -> {site.url('/moved/robots.txt')}"
    assert fact(out, "delay") == (
        "30 s between requests (line 2: Crawl-delay: 120, capped at REP_MAX_CRAWL_DELAY = 30)"
    )
    assert verdict_line(out, site.url("/x/1")).endswith("line 3: Disallow: /x")


def test_project_settings_apply_inside_a_project(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    site.robots(
        "User-agent: *\nDisallow:\n\nUser-agent: ProjectBot\nDisallow: /members/\nCrawl-delay: 4\n"
    )
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(
        textwrap.dedent(
            """\
            BOT_NAME = "shop"
            SPIDER_MODULES = []
            USER_AGENT = "ProjectBot/2.0 (+http://example.com/bot)"
            DEFAULT_REQUEST_HEADERS = {"X-Project": "shop"}
            ROBOTSTXT_OBEY = False
            REP_OBEY_CRAWL_DELAY = False
            LOG_LEVEL = "DEBUG"
            """
        )
    )
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = shop.settings\n")
    members = site.url("/members/list")
    result = scrapy_robots(members, cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, result.stderr
    assert out.startswith("agent 'ProjectBot' (from USER_AGENT)\n")
    assert "note: ROBOTSTXT_OBEY is False here" in out
    # the project can act on this one: its crawls decode compressed answers unbounded
    assert "note: scrapy_rep.BoundedDecompressionMiddleware is not enabled" in out
    assert fact(out, "group") == "User-agent: projectbot"
    assert fact(out, "delay") == (
        "not applied (REP_OBEY_CRAWL_DELAY = False); robots.txt asks line 6: Crawl-delay: 4"
    )
    assert verdict_line(out, members) == f"FORBIDDEN {members} line 5: Disallow: /members/"
    (hit,) = site.log()
    assert hit.headers["User-Agent"] == "ProjectBot/2.0 (+http://example.com/bot)"
    assert hit.headers["X-Project"] == "shop"
    # the project's DEBUG level does not flood the report's terminal
    assert "DEBUG" not in result.stderr


def test_local_file_needs_no_server_and_takes_paths(tmp_path: Path, scrapy_robots: Robots) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text("User-agent: *\nDisallow: /tmp/\nAllow: /tmp/ok$\nSitemap: /s.xml\n")
    result = scrapy_robots(
        "--file", str(robots), "/tmp/ok", "/tmp/ok2", "https://example.com/tmp/x", cwd=tmp_path
    )
    out = result.stdout
    assert result.returncode == 1, result.stderr
    size = robots.stat().st_size
    assert f"robots.txt file {robots}\n  file      {size} bytes, nothing fetched\n" in out
    assert verdict_line(out, "/tmp/ok") == "ALLOWED /tmp/ok line 3: Allow: /tmp/ok$"
    assert verdict_line(out, "/tmp/ok2") == "FORBIDDEN /tmp/ok2 line 2: Disallow: /tmp/"
    assert verdict_line(out, "https://example.com/tmp/x").startswith("FORBIDDEN")

    allowed = scrapy_robots("--file", str(robots), "--agent", "OtherBot", "/a", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.startswith("agent 'OtherBot' (from --agent)")


def test_json_output(site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots) -> None:
    site.robots(ROBOTS)
    result = scrapy_robots(
        "--json", "--agent", "examplebot", site.url("/cart"), site.url("/"), cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["agent"] == "examplebot"
    assert data["allowed"] is False
    (robots,) = data["robots"]
    assert robots["robots_txt"] == site.url("/robots.txt")
    assert robots["fetch"]["status"] == 200
    assert robots["group"] == ["examplebot"]
    assert (robots["crawl_delay"], robots["request_rate"], robots["delay"]) == (3, [1, 10], 10)
    assert robots["sitemaps"][0] == site.url("/sitemap.xml")
    assert [(u["url"], u["verdict"], u["line"], u["rule"]) for u in robots["urls"]] == [
        (site.url("/cart"), "forbidden", 8, "Disallow: /cart"),
        (site.url("/"), "allowed", None, None),
    ]


USAGE_ERRORS = [
    ([], "give at least one URL"),
    (["example.com/a"], "'example.com/a' is not an absolute http(s) URL"),
    (["ftp://example.com/a"], "is not an absolute http(s) URL"),
    (["http://[::1/a"], "is not an absolute http(s) URL"),
    (["--file", "/nonexistent/robots.txt", "/a"], "--file: cannot read"),
    (["--file", "robots.txt", "a/b"], "'a/b' is not a path (/...)"),
    (["--agent", "Mozilla/5.0", "http://example.com/"], "names no crawler"),
    (["--agent", "", "http://example.com/"], "--agent needs the token"),
    (["--jsn", "http://example.com/"], "unknown option --jsn"),
    (["-s", "REP_UNREACHABLE=maybe", "http://example.com/"], "REP_UNREACHABLE"),
]


def test_usage_errors_exit_2_with_the_reason(tmp_path: Path, forks: ScrapyForks) -> None:
    (tmp_path / "robots.txt").write_text("User-agent: *\nDisallow: /\n")
    runs = [forks.start("robots", *args, cwd=tmp_path) for args, _ in USAGE_ERRORS]
    for run, (args, message) in zip(runs, USAGE_ERRORS, strict=True):
        ended = forks.wait(run, timeout=60)
        stdout, stderr = ended.stdout, ended.stderr
        assert ended.returncode == 2, (args, stdout, stderr)
        assert message in stderr, (args, stderr)
        assert stdout == "", args


def test_outside_a_project_no_warning_about_middlewares_it_cannot_act_on(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    """Outside a project there are no settings to fix: the check enables what the
    add-on would (bounded decoding of compressed answers) and warns about none of it."""
    site.robots("User-agent: *\nDisallow: /x\n")
    result = scrapy_robots(site.url("/x"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert "note:" not in result.stdout


def test_typos_and_a_cut_short_agent_are_warned_about_once_each(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    """-s rep_unreachable=allow, -s ROBOTSTXT_USERAGENT=X: unknown, with the setting meant;
    ROBOTSTXT_USER_AGENT=Agent5 is checked as Agent, and the WARNING says why."""
    site.robots("User-agent: Agent1\nDisallow: /one\n\nUser-agent: *\nDisallow:\n")
    result = scrapy_robots(
        *("-s", "rep_unreachable=allow", "-s", "ROBOTSTXT_USERAGENT=X"),
        *("-s", "ROBOTSTXT_USER_AGENT=Agent5", "-s", "USER_AGENT=Agent5/1.0"),
        site.url("/one"),
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    warnings = [line.split(" WARNING: ", 1)[1] for line in result.stderr.splitlines()
                if " WARNING: " in line]  # fmt: skip
    assert len(warnings) == 3, result.stderr
    for typo, meant in (("rep_unreachable", "REP_UNREACHABLE"),
                        ("ROBOTSTXT_USERAGENT", "ROBOTSTXT_USER_AGENT")):  # fmt: skip
        assert f"Unknown setting {typo} is ignored; did you mean {meant}?" in warnings
    (agent,) = [w for w in warnings if "Agent5" in w]
    assert agent.startswith("ROBOTSTXT_USER_AGENT 'Agent5' is obeyed as 'Agent': ")
    assert result.stdout.startswith("agent 'Agent' (from ROBOTSTXT_USER_AGENT)")
    assert verdict_line(result.stdout, site.url("/one")).startswith("FORBIDDEN")
