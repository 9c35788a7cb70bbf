import sys

from zoo.cli import main

sys.exit(main())
