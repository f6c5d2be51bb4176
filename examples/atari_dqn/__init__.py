"""Distributed DQN on Atari with actorrt: collectors stream replay data to one learner.

Run ``python -m examples.atari_dqn --help``; see README.md in this folder.
"""

import os as _os

# --backend ray: Ray takes this node's address to be its routable IP and listens on
# every interface; with this setting (read when `ray` is first imported, so it is set
# here, before the example imports it) it runs as one local node on 127.0.0.1 and
# listens there only, as actorrt's local cluster does.
_os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
