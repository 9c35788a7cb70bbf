"""eBPF probes (BCC) of a local zoo: router ⇄ agent hop latency from uprobes on libzmq, and the CPU side of
tail latency (run-queue delay, off-CPU time of the engine thread) from scheduler tracepoints.

Needs root, Debian's python3-bpfcc, kernel headers and tracefs: ``make ebpf`` (scripts/install_ebpf.sh)
installs them; ``ebpf_status()`` says which is missing. Importing this package never imports bcc.
"""

from observe.ebpf.env import ebpf_status
from observe.ebpf.probe import ZooProbe, add_probe_args, find_zoo_processes, run_probe

__all__ = ["ZooProbe", "add_probe_args", "ebpf_status", "find_zoo_processes", "run_probe"]
