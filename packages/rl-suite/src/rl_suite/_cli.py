"""The `rl-suite` command line."""

from __future__ import annotations

import argparse
import sys


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the `rl-suite` command line with `argv` (default: `sys.argv[1:]`); return the exit code."""
    parser = argparse.ArgumentParser(prog="rl-suite", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command")
    demo = commands.add_parser(
        "demo", help="fill a [T, B] sample batch in shared memory from worker processes"
    )
    demo.add_argument("-T", type=_positive_int, default=64, help="time steps (default 64)")
    demo.add_argument("-B", type=_positive_int, default=8, help="environments (default 8)")
    demo.add_argument("--workers", type=_positive_int, default=2, help="processes (default 2)")
    demo.add_argument(
        "--start-method",
        choices=["fork", "forkserver", "spawn"],
        default="spawn",
        help="how workers are started (default spawn)",
    )
    args = parser.parse_args(argv)
    if args.version:
        import rl_suite

        print(f"rl-suite {rl_suite.__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        from ._demo import run_demo

        try:
            print(run_demo(args.T, args.B, args.workers, args.start_method))
        except ValueError as error:
            parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
