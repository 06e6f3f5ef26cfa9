"""What differs between the Scrapy releases scrapy-rep supports (placeholder, see compat branch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.misc import load_object

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def robots_parsed_signal() -> object | None:
    """Scrapy's ``robots_parsed`` signal (Scrapy 2.18+), else None."""
    return getattr(signals, "robots_parsed", None)


def enabled_downloader_middlewares(settings: BaseSettings) -> dict[Any, int]:
    """The enabled downloader middleware classes and their orders, base included."""
    components = settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    enabled: dict[Any, int] = {}
    for component, order in components.items():
        if order is None:
            continue
        try:
            cls = load_object(component) if isinstance(component, str) else component
        except (ImportError, NameError, ValueError, AttributeError):
            continue
        enabled[cls] = order
    return enabled
