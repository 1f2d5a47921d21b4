"""``python -m kvplan``: the same entry point as the ``kvplan`` console script."""

from kvplan.cli import main

if __name__ == "__main__":
    main()
