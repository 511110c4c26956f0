import sys

from kmon.cli import main

sys.exit(main())
