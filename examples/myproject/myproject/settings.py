"""Settings of an ordinary Scrapy project, plus the lines that add neardup.

Everything above the neardup block is what ``scrapy startproject`` writes (trimmed). The neardup
block is all a project needs: with ``NEARDUP_KAFKA_BOOTSTRAP`` set (here, or in the environment
as for every ``NEARDUP_*`` setting), every HTML response is published to ``pages`` and the
requests a callback yields wait for the page's decision: followed for a new page, dropped for a
near-duplicate. Without it the components switch themselves off and the project crawls as
before (the seen filter then keeps its set in memory, like Scrapy's own).
"""

BOT_NAME = "myproject"
SPIDER_MODULES = ["myproject.spiders"]
NEWSPIDER_MODULE = "myproject.spiders"
ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS_PER_DOMAIN = 8
FEED_EXPORT_ENCODING = "utf-8"

# ---- neardup ---------------------------------------------------------------------------------
SPIDER_MIDDLEWARES = {"crawler.middleware.NeardupSpiderMiddleware": 100}
ITEM_PIPELINES = {"crawler.pipelines.KafkaPagePipeline": 300}
EXTENSIONS = {"crawler.scheduling.DecisionScheduler": 500}
DUPEFILTER_CLASS = "crawler.dupefilter.SeenFilter"
DOWNLOAD_HANDLERS = {
    "http": "crawler.download_handler.CancellableDownloadHandler",
    "https": "crawler.download_handler.CancellableDownloadHandler",
}
# NEARDUP_KAFKA_BOOTSTRAP = "kafka-1:9092"   # or the environment variable of the same name
# NEARDUP_REDIS_URL = "redis://redis:6379/0"  # a seen set shared by all processes of the crawl
# NEARDUP_ITEM_VERDICT = True                 # dict items get "neardup_verdict"
