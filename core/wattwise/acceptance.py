"""`python -m wattwise.acceptance`: the real-GPU acceptance checks, as published (`wattwise.tools.acceptance`)."""

from wattwise.tools.acceptance import main

if __name__ == "__main__":
    raise SystemExit(main())
