import sys

from rtdebug.cli import main

sys.exit(main())
