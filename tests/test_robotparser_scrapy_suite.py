"""scrapy_rep.RobotParser takes Scrapy's own generic parser tests.

``BaseRobotParserTest`` comes from ``tests/test_robotstxt_interface.py`` of the
installed Scrapy's sdist (see scrapy_sdist.py), so the tests are those of the
Scrapy release in use: 2.14 calls ``from_crawler(crawler=None,
robotstxt_body=...)``, 2.18 adds ``crawl_delay``.
"""

from __future__ import annotations

import pytest
from scrapy_sdist import scrapy_test_module

from scrapy_rep.robotparser import RobotParser

pytestmark = pytest.mark.reactor_free  # no crawl in pytest's process: its reactor changes nothing

scrapy_interface_tests = scrapy_test_module("test_robotstxt_interface")


class TestRepRobotParser(scrapy_interface_tests.BaseRobotParserTest):  # type: ignore[misc]
    def setup_method(self) -> None:
        self._setUp(RobotParser)

    def test_order_based_precedence(self) -> None:
        # Scrapy skips it for Protego too: RFC 9309 §2.2.2 picks the longest match.
        pytest.skip("RFC 9309: the most specific rule wins, not the first")
