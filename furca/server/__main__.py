"""``python -m furca.server [MODEL] [options]``: the same as ``furca serve``."""

import sys

from furca.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
