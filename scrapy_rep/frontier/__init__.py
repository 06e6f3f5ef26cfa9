"""The frontier: a scheduler priority queue that hands Scrapy only requests a site is ready for.

``SCHEDULER_PRIORITY_QUEUE = "scrapy_rep.PolitePriorityQueue"`` (set by the
add-on when the project keeps Scrapy's default queue; ``REP_FRONTIER = False``
keeps Scrapy's). See docs/scheduling.md, and docs/development.md for the modules.
"""

from scrapy_rep.frontier.queue import PolitePriorityQueue

__all__ = ["PolitePriorityQueue"]
