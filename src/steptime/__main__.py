import sys

from steptime.cli import main

sys.exit(main())
