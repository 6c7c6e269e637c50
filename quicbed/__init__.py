"""quicbed: a containerized testbed comparing QUIC/HTTP3 with TLS over TCP on calibrated emulated paths."""
