"""Scrapy commands shipped with scrapy-rep (registered through the
``scrapy.commands`` entry point): ``scrapy robots``."""
