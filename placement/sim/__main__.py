"""``python -m placement.sim``: see ``placement.sim.cli``."""

import sys

from placement.sim.cli import main

sys.exit(main())
