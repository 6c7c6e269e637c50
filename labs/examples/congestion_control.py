"""Lab 4. Congestion control (labs/04-congestion-control.md): india at 1 % loss, BBR.

Run as root: python labs/examples/congestion_control.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs).
"""

import sys

from quicbed.labs.containernet import CLI, Containernet

net = Containernet(tcp_cc="bbr")
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20, loss=1)
try:
    net.start()
    calibration = net.calibrate()
    if "--no-cli" not in sys.argv:
        CLI(net)
finally:
    net.stop()
sys.exit(0 if calibration.passed else 3)
