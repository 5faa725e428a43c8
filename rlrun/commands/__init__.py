"""One module per `rlrun` subcommand, each with `add_arguments(parser)` and `main(args) -> int`."""
