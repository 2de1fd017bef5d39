"""Subcommands of the ``burble`` CLI: each module has ``add_parser(subparsers)`` and ``run(args)``."""
