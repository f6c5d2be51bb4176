"""``python -m examples.atari_dqn``: see driver.py and README.md."""

import sys

from examples.atari_dqn.driver import main

if __name__ == "__main__":
    sys.exit(main())
