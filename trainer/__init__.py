"""Trainer of the collaborative deep learning testbed: baseline and Hivemind strategies with telemetry."""

__version__ = "0.1.0"
