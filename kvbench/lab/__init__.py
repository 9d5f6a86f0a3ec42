"""The kvbench lab: a real networked KV tier (G4) with a shaped link, on one Linux machine.

    kvbench lab up       storage namespace + veth pair shaped with tc, sshd in the namespace,
                         the G4 path mounted on the host over sshfs, two llama-server instances
                         saving their slots there (each behind a G4 connector), noise servers
    kvbench lab status   what is up, with URLs and the link's shape and measured throughput
    kvbench lab down     removes every piece, also after a crash (state file + discovery by name)

Why it exists: the published tests (TTFT from G4, persistence across instances, the noisy
neighbour) need a KV tier on *networked* storage. On a laptop or in CI, kvbench otherwise has only
the mock's model of one. The lab makes every byte of a G4 read cross a real TCP link with a real
bandwidth limit, through a real remote filesystem, while real competing traffic shares that link.

One module per job: config (names, addresses, the state file), system (commands, feature probes),
link (namespace, veth, tc), storage (sshd + sshfs mounts), engines (llama-server + connectors),
connector (the G4 connector process), sink (noise servers in the namespace), down (discovery and
cleanup), up (the order things start in), status, manifest (what a run records), commands (CLI).
"""
