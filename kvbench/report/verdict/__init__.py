"""The offload verdict: offload on vs off (and vs no reuse) for one trace, one table with intervals."""
