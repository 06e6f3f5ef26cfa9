"""``scrapy_rep.ProvenanceMiddleware``: each item carries its response's provenance.

A spider middleware, enabled by the add-on when ``REP_PROVENANCE_FIELD`` names
a field, which every item a callback yields gets (through ``itemadapter``; an
item type without the field is left as it is, with one WARNING). docs/evidence.md.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy import Request
from scrapy.exceptions import NotConfigured

from scrapy_rep import _compat
from scrapy_rep._context import crawl_context
from scrapy_rep.evidence.provenance import PROVENANCE_META

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

__all__ = ["ORDER", "ProvenanceMiddleware"]

logger = logging.getLogger(__name__)

ORDER = 40
"""Close to the engine: items made or changed by other spider middlewares are filled too."""


class ProvenanceMiddleware:
    """Copies rep_provenance into ``REP_PROVENANCE_FIELD`` of items."""

    def __init__(self, field: str, stats: StatsCollector | None) -> None:
        self.field = field
        self._stats = stats
        self._warned: set[type] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProvenanceMiddleware:
        _compat.check()
        config = crawl_context(crawler).config
        if config.provenance_field is None:
            raise NotConfigured("REP_PROVENANCE_FIELD is not set")
        return cls(config.provenance_field, crawler.stats)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterator[Any]:
        provenance = _provenance(response)
        for found in result:
            yield self._fill(found, provenance)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        provenance = _provenance(response)
        async for found in result:
            yield self._fill(found, provenance)

    def _fill(self, found: Any, provenance: Any) -> Any:
        if provenance is None or isinstance(found, Request) or not is_item(found):
            return found
        try:
            ItemAdapter(found)[self.field] = copy.deepcopy(provenance)
        except KeyError:
            if self._stats is not None:
                self._stats.inc_value("rep/provenance/unfilled")
            kind = type(found)
            if kind not in self._warned:
                self._warned.add(kind)
                logger.warning(
                    "Items of type %s.%s have no field %r (REP_PROVENANCE_FIELD): "
                    "their provenance is not recorded; declare the field to keep it",
                    kind.__module__,
                    kind.__qualname__,
                    self.field,
                )
        return found


def _provenance(response: Response) -> Any:
    request = getattr(response, "request", None)
    return request.meta.get(PROVENANCE_META) if request is not None else None
