"""``python -m cmdstalk_py``: the same as the ``cmdstalk`` command."""

from cmdstalk_py.supervisor.cli import main

if __name__ == "__main__":
    main()
