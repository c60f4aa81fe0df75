import sys

from habroker.cli import main

sys.exit(main())
