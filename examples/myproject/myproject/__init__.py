"""An example Scrapy project with neardup added (README, "Add neardup to your Scrapy project")."""
