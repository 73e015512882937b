"""`python -m pal_slurm` is `pal`."""

import sys

from pal_slurm.cli.main import main

sys.exit(main())
