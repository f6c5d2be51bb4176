"""Side-by-side benchmarks: actorrt vs raw torch RPC vs Ray (``python -m benchmarks``)."""

import os as _os

# Ray, which these benchmarks run beside actorrt, takes this node's address to be its
# routable IP and listens on every interface; with this setting (read when `ray` is
# first imported, so it is set here, before any benchmark imports it) it runs as one
# local node on 127.0.0.1 and listens there only, as actorrt's local cluster does.
_os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
