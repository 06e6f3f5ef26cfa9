"""Settings of the example project: a regular Scrapy project with scrapy-rep enabled."""

BOT_NAME = "example"
SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

# scrapy-rep replaces Scrapy's RobotsTxtMiddleware; ROBOTSTXT_OBEY stays the switch.
ADDONS = {"scrapy_rep.Addon": 100}
ROBOTSTXT_OBEY = True
ROBOTSTXT_USER_AGENT = "ExampleBot"
USER_AGENT = "ExampleBot/1.0 (+http://127.0.0.1/bot.html)"

# Politeness comes from each site's robots.txt (Crawl-delay) plus one request at a
# time per site; no blanket delay, so the Crawl-delay's effect stands out.
CONCURRENT_REQUESTS_PER_DOMAIN = 1
DOWNLOAD_DELAY = 0

DOWNLOADER_MIDDLEWARES = {
    # Must run before the robots middleware (100), which applies Crawl-delay to
    # the request's download slot.
    "example.middlewares.SlotPerOriginMiddleware": 50,
}
SPIDER_MIDDLEWARES = {
    # The same, for the requests the spider yields: scrapy-rep's scheduler queue
    # holds each slot's requests until that slot is ready, so the slot must be
    # named before they are scheduled.
    "example.middlewares.SlotPerOriginMiddleware": 50,
}
EXTENSIONS = {
    "example.extensions.StatsFile": 500,
}

FEED_EXPORT_ENCODING = "utf-8"
