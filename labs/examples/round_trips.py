"""Lab 1. Count the round trips (labs/01-round-trips.md): india, 40 ms each way (80 ms RTT), 20 Mbit/s.

Run as root: python labs/examples/round_trips.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs).
"""

import sys

from quicbed.labs.containernet import CLI, Containernet

net = Containernet()
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20)
try:
    net.start()
    calibration = net.calibrate()
    if "--no-cli" not in sys.argv:
        CLI(net)
finally:
    net.stop()
sys.exit(0 if calibration.passed else 3)
