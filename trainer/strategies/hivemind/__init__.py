"""Hivemind collaborative training: the strategy (strategy.py), its averaging rounds instrumented per round
(rounds.py, a documented wrapper of Hivemind internals), the run's start barrier, sync and finish over the DHT
(coordination.py) and the DHT-only bootstrap node, ``trainer dht`` (dht_node.py). Nothing is imported here:
importing hivemind takes seconds, and ``trainer dht`` needs no torch model."""
