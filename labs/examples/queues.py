"""Lab 2. Bandwidth-delay product and queues (labs/02-queues.md): india with a 200 ms queue
(max_queue_size is in packets: 200 ms at 20 Mbit/s is about 330 full-size frames).

Run as root: python labs/examples/queues.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs).
"""

import sys

from quicbed.labs.containernet import CLI, Containernet

net = Containernet()
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20, max_queue_size=330)
try:
    net.start()
    calibration = net.calibrate()
    if "--no-cli" not in sys.argv:
        CLI(net)
finally:
    net.stop()
sys.exit(0 if calibration.passed else 3)
