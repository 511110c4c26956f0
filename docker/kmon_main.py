"""`kmon` as a Python file, for spark-submit (the Spark operator's mainApplicationFile)."""

import sys

from kmon.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
