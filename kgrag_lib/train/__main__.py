"""`python -m kgrag_lib.train ...`: DPO training with the flags of `kgrag train dpo`, the entry point
`accelerate launch` runs in every process (its own module so that the training code never imports
the CLI)."""
import sys

from kgrag_lib.train.cli import dpo_main

sys.exit(dpo_main())
