"""`python -m llmd.tui`: the same as the `llmd-top` console script."""

from llmd.tui.cli import main

main()
