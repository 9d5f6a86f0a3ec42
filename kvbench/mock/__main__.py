"""`python -m kvbench.mock serve ...` (what spawned_mock runs)."""

from kvbench.mock.commands import main

if __name__ == "__main__":
    main()
