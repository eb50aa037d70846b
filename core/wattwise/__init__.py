"""wattwise core: framework-neutral devices, measurement, decisions, stores, configuration and CLI."""

__version__ = "0.1.0"
