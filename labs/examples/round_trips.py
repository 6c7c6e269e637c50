"""Lab 1. Count the round trips (labs/01-round-trips.md): india, 40 ms each way (80 ms RTT), 20 Mbit/s.

Run as root: python labs/examples/round_trips.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs); run_example
is net.start(), net.calibrate(), CLI(net) and net.stop().
"""

import sys

from quicbed.labs.containernet import Containernet, run_example

net = Containernet()
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20)
sys.exit(run_example(net))
