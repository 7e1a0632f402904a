"""`python -m kafkaesque` runs the CLI."""

from kafkaesque.cli import main

main()
