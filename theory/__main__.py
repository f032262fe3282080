"""Entry point of ``python -m theory`` (see ``theory.cli``)."""
import sys

from theory.cli import main

sys.exit(main())
