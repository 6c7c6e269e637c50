"""Lab 4. Congestion control (labs/04-congestion-control.md): india at 1 % loss, BBR.

Run as root: python labs/examples/congestion_control.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs); run_example
is net.start(), net.calibrate(), CLI(net) and net.stop().
"""

import sys

from quicbed.labs.containernet import Containernet, run_example

net = Containernet(tcp_cc="bbr")
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20, loss=1)
sys.exit(run_example(net))
