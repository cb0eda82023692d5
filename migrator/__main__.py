import sys

from migrator.cli import main

sys.exit(main())
