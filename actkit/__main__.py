import sys

from actkit.cli import main

sys.exit(main())
