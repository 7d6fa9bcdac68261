"""One module per `warmstart` subcommand; each only parses, calls the library and prints."""
