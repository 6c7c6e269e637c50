"""Lab 5. Video under loss (labs/05-video.md): india at 5 % loss, then `play quic` and
`play tls1.3` at the CLI.

Run as root: python labs/examples/video.py (--no-cli: up, calibrate, down).
Containernet's style on quicbed (labs/containernet.py says where it differs); run_example
is net.start(), net.calibrate(), CLI(net) and net.stop().
"""

import sys

from quicbed.labs.containernet import Containernet, run_example

net = Containernet()
client = net.addDocker("client", dimage="quicbed/client:dev")
server = net.addDocker("server", dimage="quicbed/nginx")
net.addLink(client, server, delay="40ms", bw=20, loss=5)
sys.exit(run_example(net))
