"""`python -m marketplace.ipfs --repo PATH [--host H] [--port N]`: run the embedded node."""

import argparse
import logging

from marketplace.ipfs.server import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m marketplace.ipfs", description=__doc__)
    parser.add_argument("--repo", required=True, help="folder holding blocks, pins and config")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5001, help="port; 0 picks a free one")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    serve(args.host, args.port, args.repo)


if __name__ == "__main__":
    main()
