import sys

from tlsearch.cli import main

sys.exit(main())
