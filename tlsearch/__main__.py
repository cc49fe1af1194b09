import sys

from tlsearch.cli import main

if __name__ == "__main__":  # worker processes re-import this module
    sys.exit(main())
