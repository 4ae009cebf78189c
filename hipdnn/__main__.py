import sys

from hipdnn.cli import main

sys.exit(main())
