"""Commands: each a table (spec.py) run by our parser (parse.py); parse flags, call one function
below, render. No logic lives here (docs/cli.md)."""
