"""Hivemind collaborative training: the strategy (strategy.py); its averaging rounds timed per round
(round_timing.py) and its optimizer instrumented, leaving the last rounds without waiting for nobody
(optimizer.py), both on Hivemind internals that internals.py checks against the pinned version; the run's
start barrier, sync and finish over the DHT (coordination.py); the DHT-only bootstrap node, ``trainer dht``
(dht_node.py). Nothing is imported here:
importing hivemind takes seconds, and ``trainer dht`` needs no torch model."""
