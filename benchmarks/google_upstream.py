"""scrapy_rep, the fast-robotstxt fork and Google's own robots.cc on the same questions.

    .venv/bin/python benchmarks/google_upstream.py --source ~/src/robotstxt
    REP_GOOGLE_ROBOTSTXT_DIR=~/src/robotstxt .venv/bin/python benchmarks/google_upstream.py

tests/test_google_agreement.py compares our verdicts with fast-robotstxt, a fork of Google's
library (github.com/nzrsky/robotstxt) whose URL parser differs: it parses URLs as WHATWG says
(ada) and decodes every %XX before matching. Google's own robots.cc (github.com/google/robotstxt)
takes the path as written and compares bytes. This script asks all three the same questions
(the test's: every (site, URL) of site-urls.tsv with a corpus file, and URLs made from each
file's rules) and prints how often each pair agrees, and why they differ: each difference is
classified by a re-check that removes one known cause, as the test does.

Google's source is not part of scrapy-rep: --source (or $REP_GOOGLE_ROBOTSTXT_DIR) names a
directory holding its robots.cc and robots.h, a clone of the repository. The script compiles
them with a small harness of ours (HARNESS, below) using a C++17 compiler ($CXX, else g++)
and abseil's headers and libraries (Debian: apt-get install g++ libabsl-dev). It says what is
missing and exits 2 when it cannot build, or when fast-robotstxt (the test extra) is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
SOURCE_ENV = "REP_GOOGLE_ROBOTSTXT_DIR"
# abseil's libraries robots.cc needs, when pkg-config cannot say
ABSL_FALLBACK = ["-labsl_strings", "-labsl_strings_internal", "-labsl_int128"]
ABSL_FALLBACK += ["-labsl_throw_delegate", "-labsl_raw_logging_internal", "-labsl_base"]

# fork vs upstream: the causes their code differs by (the re-check named after each)
FORK_DECODES = "the fork decodes every %XX of the URL; upstream compares the URL's bytes"
FORK_URL_PARSER = "the fork's WHATWG URL parser rewrites the URL (empty '?', '\\', dot segments)"
FORK_OTHER = "both URL causes at once"


def upstream_words(agreement: ModuleType) -> dict[str | None, str | None]:
    """The test's causes, named for upstream where its code differs from the fork's."""
    return {
        agreement.ESCAPES: "percent-escapes: upstream compares the URL's bytes as written;"
        " we normalise both sides (RFC 9309 §2.2.2-2.2.3)",
        agreement.URL_PARSER: "upstream's path extraction differs from ours",
    }


# Our harness around Google's RobotsMatcher (scrapy-rep's code; Google's is compiled
# from where it lies): one process answers many questions, so 300,000 checks take seconds.
HARNESS = r"""// Asks Google's own robots.txt matcher (github.com/google/robotstxt, robots.cc)
// for verdicts; written out and built by benchmarks/google_upstream.py.
//
// stdin, repeated until EOF:  'B' <u32 size> <robots.txt bytes>   (the body asked next)
//                             'Q' <u32 count> (<u32 size> <url bytes>) * count
// stdout, per 'Q': count bytes, '1' allowed / '0' disallowed, then a flush.
// The product token is argv[1]. Sizes are little-endian.

#include <cstdint>
#include <cstdio>
#include <string>

#include "robots.h"

namespace {

bool ReadExact(std::string* out, uint32_t size) {
  out->resize(size);
  return size == 0 || std::fread(&(*out)[0], 1, size, stdin) == size;
}

bool ReadSize(uint32_t* size) {
  unsigned char raw[4];
  if (std::fread(raw, 1, 4, stdin) != 4) return false;
  *size = raw[0] | (raw[1] << 8) | (raw[2] << 16) | (uint32_t(raw[3]) << 24);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PRODUCT_TOKEN < records\n", argv[0]);
    return 2;
  }
  const std::string agent = argv[1];
  std::string body, url, answers;
  int kind;
  while ((kind = std::fgetc(stdin)) != EOF) {
    uint32_t size;
    if (!ReadSize(&size)) return 3;
    if (kind == 'B') {
      if (!ReadExact(&body, size)) return 3;
    } else if (kind == 'Q') {
      answers.clear();
      for (uint32_t i = 0; i < size; ++i) {
        uint32_t url_size;
        if (!ReadSize(&url_size) || !ReadExact(&url, url_size)) return 3;
        googlebot::RobotsMatcher matcher;  // one per question, as robots_main.cc does
        answers += matcher.OneAgentAllowedByRobots(body, agent, url) ? '1' : '0';
      }
      std::fwrite(answers.data(), 1, answers.size(), stdout);
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "unknown record %d\n", kind);
      return 3;
    }
  }
  return 0;
}
"""


class BuildError(Exception):
    """What is missing to build the harness, in words a user can act on."""


def build(source: Path, out_dir: Path) -> Path:
    """Compile robots.cc from ``source`` with our harness; the executable's path."""
    missing = [name for name in ("robots.cc", "robots.h") if not (source / name).is_file()]
    if missing:
        raise BuildError(
            f"Google's robotstxt source not found in {source} (no {', '.join(missing)}): "
            f"pass --source DIR or set {SOURCE_ENV} to a clone of "
            "https://github.com/google/robotstxt"
        )
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise BuildError("no C++ compiler (set CXX, or on Debian: apt-get install g++)")
    libs = ABSL_FALLBACK
    if shutil.which("pkg-config"):
        found = subprocess.run(
            ["pkg-config", "--libs", "absl_strings"], capture_output=True, text=True
        )
        if found.returncode == 0:
            libs = found.stdout.split()
    harness = out_dir / "google_upstream_harness.cc"
    harness.write_text(HARNESS)
    executable = out_dir / "google-upstream-harness"
    command = [compiler, "-O2", "-std=c++17", "-I", str(source), str(harness)]
    command += [str(source / "robots.cc"), *libs, "-o", str(executable)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(
            "building Google's robots.cc failed (abseil's headers and libraries are needed;"
            " on Debian: apt-get install g++ libabsl-dev):\n"
            + " ".join(command)
            + "\n"
            + done.stderr[-3000:]
        )
    return executable


class UpstreamMatcher:
    """Google's robots.cc through the harness: one process per product token."""

    def __init__(self, executable: Path) -> None:
        self._executable = executable
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    def _process(self, agent: str) -> subprocess.Popen[bytes]:
        if agent not in self._processes:
            self._processes[agent] = subprocess.Popen(
                [str(self._executable), agent], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        return self._processes[agent]

    def allowed_many(self, body: bytes, urls: list[str], agent: str) -> list[bool]:
        process = self._process(agent)
        assert process.stdin is not None
        assert process.stdout is not None
        parts = [b"B", struct.pack("<I", len(body)), body, b"Q", struct.pack("<I", len(urls))]
        for url in urls:
            data = url.encode("utf-8", "surrogateescape")
            parts += [struct.pack("<I", len(data)), data]
        process.stdin.write(b"".join(parts))
        process.stdin.flush()
        answers = process.stdout.read(len(urls))
        if len(answers) != len(urls):
            raise RuntimeError(f"the harness stopped (exit status {process.poll()})")
        return [answer == ord("1") for answer in answers]

    def allowed(self, body: bytes, url: str, agent: str) -> bool:
        return self.allowed_many(body, [url], agent)[0]

    def close(self) -> None:
        for process in self._processes.values():
            assert process.stdin is not None
            process.stdin.close()
            process.wait()


@dataclass
class Pair:
    """How often two matchers agree, and the classified causes when they do not."""

    checks: int = 0
    agreements: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    # fork vs upstream only: per cause, how many times our verdict is the fork's
    ours_as_fork: Counter[str] = field(default_factory=Counter)

    # per cause, how many times the first of the pair allowed (and the second did not)
    first_allows: Counter[str] = field(default_factory=Counter)

    def add(
        self, first: bool, second: bool, cause: Callable[[], str | None], case: str
    ) -> str | None:
        """Count one check; the cause of a difference ("UNEXPLAINED" if none is found)."""
        self.checks += 1
        if first == second:
            self.agreements += 1
            return None
        reason = cause() or "UNEXPLAINED"
        self.causes[reason] += 1
        self.first_allows[reason] += first
        self.examples[reason].append(case)
        return reason

    def report(self, title: str, examples: int) -> list[str]:
        lines = [f"  {title}: {self.agreements:,} of {self.checks:,} agree"]
        first = title.split("-")[0]
        for reason, count in self.causes.most_common():
            sided = f" [{first} allows {self.first_allows[reason]:,}]"
            if self.ours_as_fork:
                fork = self.ours_as_fork[reason]
                sided += f" [ours = fork {fork:,}, ours = upstream {count - fork:,}]"
            lines.append(f"    {count:7,d}  {reason}{sided}")
            lines += [f"               e.g. {case}" for case in self.examples[reason][:examples]]
        return lines


def fork_vs_upstream(fork: Callable[[bytes, str], bool], upstream: Callable[[bytes, str], bool],
                     body: bytes, url: str) -> str | None:  # fmt: skip
    """Why the fork and upstream differ on (body, url), or None."""
    import test_google_agreement as agreement

    origin, path = agreement.split_url(url)
    body_plain = agreement.without_escapes(body, url=False)
    url_plain = origin + agreement.without_escapes(path.encode("utf-8", "surrogateescape"),
                                                   url=True).decode()  # fmt: skip
    if fork(body_plain, url_plain) == upstream(body_plain, url_plain):
        return FORK_DECODES
    if fork(body, path) == upstream(body, path):
        return FORK_URL_PARSER
    path_plain = agreement.without_escapes(path.encode("utf-8", "surrogateescape"), url=True)
    if fork(body_plain, path_plain.decode()) == upstream(body_plain, path_plain.decode()):
        return FORK_OTHER
    return None


class Comparison:
    """Our verdicts, the fork's and upstream's on the same questions, pair by pair."""

    def __init__(self, upstream: UpstreamMatcher, agent: str) -> None:
        import test_google_agreement as agreement

        self.agreement = agreement
        self.words = upstream_words(agreement)
        self.upstream = upstream
        self.fork = agreement.GoogleMatcher()
        self.agent = agent
        self.pairs = {"ours-upstream": Pair(), "ours-fork": Pair(), "fork-upstream": Pair()}

    def run(self, cases: Iterable[tuple[str, bytes, list[str]]]) -> dict[str, Pair]:
        from scrapy_rep import RobotsTxt

        for name, body, urls in cases:
            robots = RobotsTxt.parse(body)
            theirs = self.upstream.allowed_many(body, urls, self.agent)
            for url, google in zip(urls, theirs, strict=True):
                self.ask(name, body, url, robots.allowed(url, user_agent=self.agent), google)
        return self.pairs

    def ask(self, name: str, body: bytes, url: str, ours: bool, upstream: bool) -> None:
        agreement, agent, case = self.agreement, self.agent, f"{name} {url!r}"
        forked = self.fork.allowed(body, url, agent)

        def ours_upstream() -> str | None:
            reason = agreement.classify(self.upstream, body, url, agent=agent)
            return self.words.get(reason, reason)

        def ours_fork() -> str | None:
            return agreement.classify(self.fork, body, url, agent=agent)  # type: ignore[no-any-return]

        def fork_upstream() -> str | None:
            return fork_vs_upstream(
                lambda b, u: self.fork.allowed(b, u, agent),
                lambda b, u: self.upstream.allowed(b, u, agent),
                body,
                url,
            )

        self.pairs["ours-upstream"].add(ours, upstream, ours_upstream, f"{case}: ours {ours}")
        self.pairs["ours-fork"].add(ours, forked, ours_fork, f"{case}: ours {ours}")
        split = self.pairs["fork-upstream"]
        reason = split.add(forked, upstream, fork_upstream, f"{case}: fork {forked}")
        if reason is not None and ours == forked:
            split.ours_as_fork[reason] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source_help = f"directory of Google's robots.cc and robots.h (default: ${SOURCE_ENV})"
    parser.add_argument("--source", type=Path, default=os.environ.get(SOURCE_ENV), help=source_help)
    parser.add_argument("--agent", default="examplebot", help="product token")
    parser.add_argument("--rules-per-file", type=int, default=100, metavar="N")
    parser.add_argument("--examples", type=int, default=2, metavar="N", help="shown per cause")
    args = parser.parse_args(argv)
    if args.source is None:
        print(
            f"Google's robotstxt source not given: pass --source DIR or set {SOURCE_ENV} to a"
            " clone of https://github.com/google/robotstxt (nothing of it ships with scrapy-rep)",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(REPO))  # the working tree's scrapy_rep
    sys.path.insert(0, str(REPO / "tests"))  # the agreement test's cases and re-checks
    import pytest

    try:
        import test_google_agreement as agreement
    except pytest.skip.Exception:  # the module skips itself without the fork
        print("fast-robotstxt is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    from _corpus import corpus_dir, missing_message, site_urls_path

    try:
        directory = corpus_dir()
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    for needed in (directory / "MANIFEST.tsv", site_urls_path()):
        if not needed.is_file():
            print(missing_message(needed), file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="scrapy-rep-google-") as out_dir:
        try:
            executable = build(Path(args.source).expanduser(), Path(out_dir))
        except BuildError as error:
            print(error, file=sys.stderr)
            return 2
        upstream = UpstreamMatcher(executable)
        try:
            for title, cases in (
                ("site URLs", agreement.site_url_cases(directory)),
                (f"rule-derived URLs ({args.rules_per_file} rules/file)",
                 agreement.rule_url_cases(directory, args.rules_per_file)),
            ):  # fmt: skip
                started = time.perf_counter()
                pairs = Comparison(upstream, args.agent).run(cases)
                print(f"{title} ({time.perf_counter() - started:.0f} s), token {args.agent}:")
                for key, pair in pairs.items():
                    if pair.checks:
                        print("\n".join(pair.report(key, args.examples)))
        finally:
            upstream.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
