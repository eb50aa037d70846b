"""Per-GPU energy, power, power limit and locked clock for Prometheus (`agent serve --metrics-port N`).

Read at scrape time from the agent's devices, labelled by GPU index and by the holder's job name
(`job_name`, empty when nobody holds the GPU). Served by prometheus-client on its own thread, on
127.0.0.1 by default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from wattwise.devices.base import DeviceError

if TYPE_CHECKING:
    from wattwise.agent.agent import Agent

#: `job_name`, not `job`: Prometheus gives every scraped series its own `job` label (the scrape job).
LABELS = ["gpu", "job_name"]


class AgentCollector:
    """A Prometheus collector reading the agent's GPUs at each scrape (never between scrapes)."""

    def __init__(self, agent: Agent) -> None:
        """Collect from `agent`'s GPUs and leases."""
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        """Per GPU: energy, power, power limit and locked SM clock, labelled by `gpu` and the holder's `job_name`.

        A GPU that cannot be read at this scrape is left out of it.
        """
        energy = CounterMetricFamily(
            "wattwise_gpu_energy_joules", "GPU energy since the agent started (J)", labels=LABELS
        )
        power = GaugeMetricFamily("wattwise_gpu_power_watts", "GPU power draw (W)", labels=LABELS)
        limit = GaugeMetricFamily("wattwise_gpu_power_limit_watts", "GPU power limit (W)", labels=LABELS)
        clock = GaugeMetricFamily(
            "wattwise_gpu_locked_sm_clock_mhz",
            "Upper end of the locked SM clock range (MHz); 0 when not locked",
            labels=LABELS,
        )
        for index, device in sorted(dict(self.agent.devices).items()):
            holder = self.agent.leases.holder(index)
            labels = [str(index), holder.job if holder else ""]
            try:
                energy.add_metric(labels, device.energy_j())
                power.add_metric(labels, device.power_w())
                limit.add_metric(labels, device.power_limit_w())
                locked = device.locked_sm_clocks_mhz()
                clock.add_metric(labels, float(locked[1]) if locked else 0.0)
            except DeviceError:
                continue
        yield from (energy, power, limit, clock)


def start_metrics(agent: Agent, host: str, port: int) -> None:
    """Serve `agent`'s metrics over HTTP on `host`:`port` (a thread of prometheus_client's).

    Raises:
        OSError: The port cannot be bound.
    """
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    start_http_server(port, addr=host, registry=registry)
