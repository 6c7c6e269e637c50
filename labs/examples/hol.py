"""Lab 3. Loss and head-of-line blocking (labs/03-hol.md): india at 5 % loss.

Run as root: python labs/examples/hol.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs).
"""

import sys

from quicbed.labs.containernet import CLI, Containernet

net = Containernet()
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20, loss=5)
try:
    net.start()
    calibration = net.calibrate()
    if "--no-cli" not in sys.argv:
        CLI(net)
finally:
    net.stop()
sys.exit(0 if calibration.passed else 3)
