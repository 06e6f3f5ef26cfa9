"""scrapy-rep: the Robots Exclusion Protocol (RFC 9309) for Scrapy.

The parser (``RobotsTxt``) imports nothing from Scrapy; everything else is
imported lazily, so ``from scrapy_rep import RobotsTxt`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scrapy_rep._version import __version__ as __version__
from scrapy_rep.robotstxt import Decision, DelayLine, Delays, RobotsTxt

# public name -> module that defines it (imported on first use)
_LAZY = {
    "Addon": "scrapy_rep.addon",
    "BoundedDecompressionMiddleware": "scrapy_rep.decompression",
    "RobotsTxtMiddleware": "scrapy_rep.middleware",
    "ForbiddenByRobots": "scrapy_rep.exceptions",
    "RobotsTxtUnavailable": "scrapy_rep.exceptions",
    "RobotsTxtChanged": "scrapy_rep.exceptions",
    "SiteChallenged": "scrapy_rep.exceptions",
    "PaymentRequired": "scrapy_rep.exceptions",
    "MetaRobotsMiddleware": "scrapy_rep.meta",
    "PolitePriorityQueue": "scrapy_rep.frontier",
    "ProvenanceMiddleware": "scrapy_rep.evidence",
    "RedisPoliteQueue": "scrapy_rep.cluster.queue",
    "RobotsSitemapMixin": "scrapy_rep.sitemaps",
    "RobotsSitemapSpider": "scrapy_rep.sitemaps",
    "RobotParser": "scrapy_rep.robotparser",
    "UsageMiddleware": "scrapy_rep.usage_middleware",
    "UsageDenied": "scrapy_rep.exceptions",
    "UsageDecision": "scrapy_rep.usage",
    "UsageLine": "scrapy_rep.usage",
}

# The public surface, the contract: docs/reference.md's "Public names" lists
# exactly these (tests/test_public_api.py checks both ways).
__all__ = [
    "Addon",
    "BoundedDecompressionMiddleware",
    "Decision",
    "DelayLine",
    "Delays",
    "ForbiddenByRobots",
    "MetaRobotsMiddleware",
    "PaymentRequired",
    "PolitePriorityQueue",
    "ProvenanceMiddleware",
    "RedisPoliteQueue",
    "RobotParser",
    "RobotsSitemapMixin",
    "RobotsSitemapSpider",
    "RobotsTxt",
    "RobotsTxtChanged",
    "RobotsTxtMiddleware",
    "RobotsTxtUnavailable",
    "SiteChallenged",
    "UsageDecision",
    "UsageDenied",
    "UsageLine",
    "UsageMiddleware",
]

if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from scrapy_rep.addon import Addon
    from scrapy_rep.cluster.queue import RedisPoliteQueue
    from scrapy_rep.decompression import BoundedDecompressionMiddleware
    from scrapy_rep.evidence import ProvenanceMiddleware
    from scrapy_rep.exceptions import (
        ForbiddenByRobots,
        PaymentRequired,
        RobotsTxtChanged,
        RobotsTxtUnavailable,
        SiteChallenged,
        UsageDenied,
    )
    from scrapy_rep.frontier import PolitePriorityQueue
    from scrapy_rep.meta import MetaRobotsMiddleware
    from scrapy_rep.middleware import RobotsTxtMiddleware
    from scrapy_rep.robotparser import RobotParser
    from scrapy_rep.sitemaps import RobotsSitemapMixin, RobotsSitemapSpider
    from scrapy_rep.usage import UsageDecision, UsageLine
    from scrapy_rep.usage_middleware import UsageMiddleware


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'scrapy_rep' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The public names too, lazy ones included (for completion in a shell)."""
    return sorted({*globals(), *__all__})
