import sys

from metagen.cli import main

sys.exit(main())
