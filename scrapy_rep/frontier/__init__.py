"""The frontier: a scheduler priority queue that hands Scrapy only requests a site is ready for.

``SCHEDULER_PRIORITY_QUEUE = "scrapy_rep.PolitePriorityQueue"`` (set by the
add-on when the project keeps Scrapy's default queue; ``REP_FRONTIER = False``
keeps Scrapy's). See docs/scheduling.md.

- :mod:`~scrapy_rep.frontier.queue`: the queue, per download slot, and when a slot is ready;
- :mod:`~scrapy_rep.frontier.turns`: the next turn, per slot (the requests out are the ledger's);
- :mod:`~scrapy_rep.frontier.robots`: the way to the crawl's robots.txt state, and prefetching;
- :mod:`~scrapy_rep.frontier.shared`: what the memory and disk queues of a crawl share.

Scrapy internals it reads (download slots, the engine's wake-up) are in
:mod:`scrapy_rep._slots.readiness` and :mod:`scrapy_rep._slots.wakeup`.
"""

from scrapy_rep.frontier.queue import PolitePriorityQueue

__all__ = ["PolitePriorityQueue"]
