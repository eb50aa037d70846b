"""The agent's Prometheus metrics (`agent serve --metrics-port N`): per GPU, per lease, and its own.

Read at scrape time from the agent's devices and leases, and served on a thread of its own, on 127.0.0.1
by default, at `/metrics` (any other path is 404). As dcgm-exporter does, every GPU series carries the
GPU's `gpu` index, its `uuid` and the node's `hostname`; units are base units and counters end in `_total`.

- `wattwise_gpu_energy_joules_total{gpu, uuid, hostname}`: the GPU's energy counter. Its labels never
  change, so `increase()` over any range is the GPU's energy in that range, whoever held it.
- `wattwise_lease_energy_joules_total{gpu, uuid, hostname, job_name, job_id, uid}`: the energy of one
  lease, from its start (or the agent's restart) to now; once the lease has ended, its energy to the end
  for `ENDED_LEASE_SHOWN_S` more (so that the scrape after the end counts the last joules), then the
  series ends. The energy of a job is `sum by (job_name) (increase(...))` of this counter: no idle time
  and no other job counted.
- Gauges labelled by GPU and the holder's `job_name` (empty when nobody holds it): power, power limit and
  the upper end of the locked SM clock range.
- The agent itself: requests answered, refusals by status, leases held, GPUs restored and restores that
  failed.

`job_name`, not `job`: Prometheus gives every scraped series its own `job` label (the scrape job).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from wattwise.devices.agent import gpu_uuid
from wattwise.devices.base import DeviceError

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from wattwise.agent.agent import Agent

GPU_LABELS = ["gpu", "uuid", "hostname"]
HELD_LABELS = [*GPU_LABELS, "job_name"]
LEASE_LABELS = [*GPU_LABELS, "job_name", "job_id", "uid"]
#: Seconds an ended lease's energy is still shown: longer than any scrape interval.
ENDED_LEASE_SHOWN_S = 600.0


class AgentCollector:
    """A Prometheus collector reading the agent's GPUs and leases at each scrape (never between scrapes)."""

    def __init__(self, agent: Agent, hostname: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """Collect from `agent`'s GPUs and leases, on the node `hostname` (None: this host's name).

        `clock`: the clock of `EndedLease.ended_s` (tests pass their own).
        """
        self.agent = agent
        self.hostname = hostname or socket.gethostname()
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        """Every metric of the module docstring; a GPU that cannot be read at this scrape is left out of it."""
        energy = CounterMetricFamily(
            "wattwise_gpu_energy_joules", "GPU energy since the agent started (J)", labels=GPU_LABELS
        )
        lease_energy = CounterMetricFamily(
            "wattwise_lease_energy_joules",
            "GPU energy since the lease began (J), by the lease's job and user",
            labels=LEASE_LABELS,
        )
        power = GaugeMetricFamily("wattwise_gpu_power_watts", "GPU power draw (W)", labels=HELD_LABELS)
        limit = GaugeMetricFamily("wattwise_gpu_power_limit_watts", "GPU power limit (W)", labels=HELD_LABELS)
        clock = GaugeMetricFamily(
            "wattwise_gpu_locked_sm_clock_mhz",
            "Upper end of the locked SM clock range (MHz); 0 when not locked",
            labels=HELD_LABELS,
        )
        live: set[tuple[str, ...]] = set()
        for index, device in sorted(dict(self.agent.devices).items()):
            lease = self.agent.leases.get(index)
            holder = lease.holder if lease is not None else None
            gpu = [str(index), gpu_uuid(device.spec()), self.hostname]
            held = [*gpu, holder.job if holder else ""]
            try:
                joules = device.energy_j()
                watts, limit_w, locked = device.power_w(), device.power_limit_w(), device.locked_sm_clocks_mhz()
            except DeviceError:
                continue
            energy.add_metric(gpu, joules)
            power.add_metric(held, watts)
            limit.add_metric(held, limit_w)
            clock.add_metric(held, float(locked[1]) if locked else 0.0)
            if holder is not None and lease is not None and lease.start_energy_j is not None:
                labels = (*gpu, holder.job, holder.job_id, str(holder.uid))
                live.add(labels)
                lease_energy.add_metric(list(labels), max(0.0, joules - lease.start_energy_j))
        for labels, joules in self._ended(live).items():
            lease_energy.add_metric(list(labels), joules)
        counts = self.agent.counts
        requests = CounterMetricFamily("wattwise_agent_requests", "Requests the agent answered")
        requests.add_metric([], counts.requests)
        refusals = CounterMetricFamily("wattwise_agent_refusals", "Requests refused, by HTTP status", labels=["status"])
        for status, n in sorted(counts.refusals.items()):
            refusals.add_metric([str(status)], n)
        leases = GaugeMetricFamily("wattwise_agent_leases", "GPUs held under a lease now")
        leases.add_metric([], len(list(self.agent.leases.items())))
        restores = CounterMetricFamily("wattwise_agent_restores", "GPUs given back with their original settings")
        restores.add_metric([], counts.restores)
        failures = CounterMetricFamily(
            "wattwise_agent_restore_failures", "Give-backs the device refused (the GPU stays journalled)"
        )
        failures.add_metric([], counts.restore_failures)
        yield from (energy, lease_energy, power, limit, clock, requests, refusals, leases, restores, failures)

    def _ended_labels(self, index: int) -> list[str] | None:
        device = self.agent.devices.get(index)
        return None if device is None else [str(index), gpu_uuid(device.spec()), self.hostname]

    def _ended(self, live: set[tuple[str, ...]]) -> dict[tuple[str, ...], float]:
        """The energy of each lease that ended within `ENDED_LEASE_SHOWN_S`, by its labels (the last one's).

        A live lease under the same labels (the same job's next lease of the GPU) is shown instead.
        """
        now = self.clock()
        shown: dict[tuple[str, ...], float] = {}
        for ended in list(self.agent.ended_leases):  # one copy: the event loop appends meanwhile
            gpu = self._ended_labels(ended.index)
            if gpu is None or now - ended.ended_s > ENDED_LEASE_SHOWN_S:
                continue
            holder = ended.holder
            labels = (*gpu, holder.job, holder.job_id, str(holder.uid))
            if labels not in live:
                shown[labels] = ended.energy_j
        return shown


#: The one path the metrics are served at (Prometheus' default `metrics_path`, as dcgm-exporter's).
METRICS_PATH = "/metrics"


def metrics_app(registry: CollectorRegistry) -> WSGIApplication:
    """The WSGI application of the metrics port: `registry` at `METRICS_PATH`, 404 for any other path."""
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == METRICS_PATH:
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"404 not found: the agent's metrics are at {METRICS_PATH}\n".encode()]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    """No line per scrape on the agent's stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def start_metrics(agent: Agent, host: str, port: int) -> None:
    """Serve `agent`'s metrics over HTTP on `host`:`port`, at `METRICS_PATH` only, on a thread of its own.

    Raises:
        OSError: The port cannot be bound.
    """
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    server = make_server(host, port, metrics_app(registry), _Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="wattwise-metrics", daemon=True).start()
