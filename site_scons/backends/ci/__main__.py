import sys

from backends.ci.main import main

sys.exit(main())
