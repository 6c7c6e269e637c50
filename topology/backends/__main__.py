"""`python -m quicbed.topology.backends [--fresh]`: every backend's proof on this host, one line
each, in auto's order (`--fresh`: the UML and QEMU boots again, not from the cache)."""

from __future__ import annotations

import sys

from quicbed.topology.backends import in_auto_order


def main() -> int:
    for backend in in_auto_order():
        proof = backend.prove(fresh="--fresh" in sys.argv)
        print(f"{backend.name}: {'runs' if proof.runs else 'cannot run here'}: {proof.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
