"""quicbed: a containerized testbed comparing QUIC/HTTP3 with TLS over TCP on calibrated emulated paths."""

import sys

if sys.argv[:1] == ["-m"]:
    # `python -m quicbed.<module>` (e.g. `python -m quicbed.servers list`): the registries check
    # every descriptor while the package is imported, before the module's own main could catch a
    # bad one, so a user's error (QuicbedError) is printed as its one line here, not a traceback.
    from quicbed.errors import install_excepthook

    install_excepthook()
