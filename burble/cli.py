"""``burble`` command line: one entry point, one module per subcommand (``burble/commands/``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

# name -> module; a module is imported only when its command runs (fast --help, few heavy imports).
COMMANDS = {
    "transcribe": "burble.commands.transcribe",
    "score": "burble.commands.score",
    "stream": "burble.commands.stream",
    "listen": "burble.commands.listen",
    "serve": "burble.commands.serve",
    "client": "burble.commands.client",
    "codec": "burble.commands.codec",
    "speak": "burble.commands.speak",
    "lm": "burble.asr.fusion.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="burble",
        description="Streaming speech toolkit: transcribe files, caption a microphone, serve streaming ASR, speak text.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        try:
            importlib.import_module(module).add_parser(subparsers)
        except ImportError as error:  # an optional part is not installed: say so, keep the rest
            stub = subparsers.add_parser(name, help=f"(unavailable: {error})")
            stub.set_defaults(unavailable=str(error))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    if getattr(args, "unavailable", None):
        print(f"burble {args.command}: unavailable ({args.unavailable})", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[args.command])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
