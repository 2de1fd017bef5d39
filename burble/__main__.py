import sys

from burble.cli import main

sys.exit(main())
