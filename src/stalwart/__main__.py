"""``python -m stalwart`` runs the command line."""

from ._cli import main

main()
