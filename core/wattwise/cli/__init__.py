"""The `wattwise` command line. Each sub-command lives in its own module here."""
