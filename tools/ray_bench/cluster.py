# One-node Ray cluster on this machine (2 CPUs), like `ray start --head`; SIGTERM shuts it down.
import signal
import sys
import time

from ray.cluster_utils import Cluster

c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
print(c.address, flush=True)
signal.signal(signal.SIGTERM, lambda *a: (c.shutdown(), sys.exit(0)))
while True:
    time.sleep(1)
