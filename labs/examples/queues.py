"""Lab 2. Bandwidth-delay product and queues (labs/02-queues.md): india with a 200 ms queue
(max_queue_size is in packets: 200 ms at 20 Mbit/s is about 330 full-size frames).

Run as root: python labs/examples/queues.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs); run_example
is net.start(), net.calibrate(), CLI(net) and net.stop().
"""

import sys

from quicbed.labs.containernet import Containernet, run_example

net = Containernet()
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20, max_queue_size=330)
sys.exit(run_example(net))
