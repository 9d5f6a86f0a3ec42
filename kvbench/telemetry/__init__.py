"""Telemetry over time: a run's metrics sampled on its own clock while a phase runs.

sampler.py    `Sampler`: the engine's /metrics (metrics.jsonl), the exporters and this host
              (telemetry.jsonl) every `telemetry.interval_s`, each source on its own loop and
              its own connection, rows written as they come
exporters.py  an exporter's kind (node, dcgm, prometheus): which series are kept; one scrape
host.py       this host's /proc/net/dev and /proc/diskstats as node-exporter series
lab_link.py   the lab link's host-end veth counters (/sys/class/net), on a lab run
"""
