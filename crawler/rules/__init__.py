"""URL rules that predict near-duplicates before they are fetched (issue 13).

The pure core (no Scrapy, Kafka or Redis imports):

- :mod:`~crawler.rules.rewrite`: the rule kinds (host alias, path-prefix rewrite, content-free
  parameter), their stable keys and ``apply(url) -> counterpart | None``;
- :mod:`~crawler.rules.policy`: when a rule becomes active, how often it is re-checked, when it
  is dropped (the numbers, with their reasons);
- :mod:`~crawler.rules.learning`: candidate rules from a decision (duplicate -> original), and
  the success/failure observations a decision gives the rules that apply to its page;
- :mod:`~crawler.rules.book`: the local index of a crawl's rules, fast enough per outlink;
- :mod:`~crawler.rules.counterparts`: the outlinks of a duplicate page judged against its
  keeper's (new content is followed, predicted duplicates are sampled first);
- :mod:`~crawler.rules.differing`: page pairs a rule that holds elsewhere got wrong (a
  release's release notes), never skipped on any host of the crawl;
- :mod:`~crawler.rules.short_pages`: a rule's checks on short pages, counted apart: its short
  pages are skipped only once those alone would activate it;
- :mod:`~crawler.rules.store`: the store interface and its in-memory implementation;
- :mod:`~crawler.rules.shared`: a store and a local book kept in step (refresh, learn).

The Redis store (:mod:`~crawler.rules.redis_store`, scripts in :mod:`~crawler.rules.redis_lua`)
is the adapter; import it explicitly, this package does not.
"""
