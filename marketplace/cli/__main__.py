"""`python -m marketplace.cli`: the `zoo-compute` command, for processes the devnet starts."""

from marketplace.cli import main

main()
