"""Subcommands of the ``neardup`` command line, one module per group."""
