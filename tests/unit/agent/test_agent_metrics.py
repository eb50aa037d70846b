"""The agent's Prometheus metrics count energy per GPU and per lease truly, against a known load.

Before, the GPU's running total was labelled with whichever job held it: `increase()` per job counted
other jobs and idle time, and a sum over jobs counted the GPU twice. The collector is read in-process
(`AgentCollector.collect`), on simulated GPUs driven by a virtual clock, so every joule is known.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from tests.support.clock import VirtualClock
from wattwise.agent.agent import Agent
from wattwise.agent.config import AgentConfig
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder
from wattwise.agent.metrics import ENDED_LEASE_SHOWN_S, AgentCollector
from wattwise.agent.processes import process_start_ticks
from wattwise.devices.simulated import PowerModel, SimulatedGPU

IDLE_W = 60.0  # the default power model's idle power


def samples(metrics: list[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for m in metrics for s in m.samples if s.name == name]


@pytest.fixture()
def node(tmp_path: Path) -> tuple[Agent, VirtualClock, AgentCollector]:
    clock = VirtualClock()
    gpus = [
        SimulatedGPU(i, PowerModel.default(), state_file=tmp_path / f"gpu{i}.json", clock=clock, sleep=clock.sleep)
        for i in range(2)
    ]
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    agent = Agent(list(gpus), "simulated", AgentConfig(), journal)
    agent.clock = clock
    return agent, clock, AgentCollector(agent, hostname="node7", clock=clock)


def me(job: str, job_id: str = "") -> Holder:
    return Holder(os.getpid(), os.getuid(), job, process_start_ticks(os.getpid()) or 0, job_id=job_id)


def test_each_lease_counts_its_own_energy_and_the_gpu_counter_keeps_its_labels(node) -> None:
    agent, clock, collector = node
    first = collector.collect()
    [(gpu0, start_j), _] = samples(list(first), "wattwise_gpu_energy_joules_total")
    assert set(gpu0) == {"gpu", "uuid", "hostname"} and gpu0["hostname"] == "node7" and gpu0["uuid"].startswith("GPU-")
    clock.sleep(10.0)  # idle, nobody holds it: 600 J that no job used
    alice = me("bert", "4711")
    agent.set_power_limit(0, alice, set(), 200.0)
    clock.sleep(20.0)  # bert's lease: 1200 J
    metrics = list(collector.collect())
    [(labels, joules)] = samples(metrics, "wattwise_lease_energy_joules_total")
    assert labels == {**gpu0, "job_name": "bert", "job_id": "4711", "uid": str(os.getuid())}
    assert joules == pytest.approx(20.0 * IDLE_W)
    clock.sleep(7.0)  # after the last scrape, before its end: 420 J more of bert's
    agent.release(0, alice)
    clock.sleep(5.0)  # free again
    bob = me("gpt")
    agent.set_power_limit(0, bob, set(), 250.0)
    clock.sleep(10.0)  # gpt's lease: 600 J
    metrics = list(collector.collect())
    leases = {labels["job_name"]: joules for labels, joules in samples(metrics, "wattwise_lease_energy_joules_total")}
    # bert's ended lease still shows its energy to its end: the scrape after its end counts its last 7 s.
    assert leases == pytest.approx({"bert": 27.0 * IDLE_W, "gpt": 10.0 * IDLE_W})
    [(same, total_j), _] = samples(metrics, "wattwise_gpu_energy_joules_total")
    assert same == gpu0  # one series for the GPU whoever holds it: increase() over any range is the GPU's
    assert total_j - start_j == pytest.approx(52.0 * IDLE_W)
    [(held, _)] = [s for s in samples(metrics, "wattwise_gpu_power_limit_watts") if s[0]["gpu"] == "0"]
    assert held["job_name"] == "gpt"  # the gauges still say who holds the GPU now
    assert samples(metrics, "wattwise_agent_leases") == [({}, 1.0)]
    assert samples(metrics, "wattwise_agent_restores_total") == [({}, 1.0)]  # bert's release
    clock.sleep(ENDED_LEASE_SHOWN_S)  # long after its end: bert's series has ended
    later = {
        labels["job_name"] for labels, _ in samples(list(collector.collect()), "wattwise_lease_energy_joules_total")
    }
    assert later == {"gpt"}


@pytest.mark.parametrize(("path", "status"), [("/metrics", "200 OK"), ("/", "404 Not Found"), ("/x", "404 Not Found")])
def test_the_metrics_port_answers_only_at_metrics_and_404_elsewhere(
    node: tuple[Agent, VirtualClock, AgentCollector], path: str, status: str
) -> None:
    from prometheus_client import CollectorRegistry

    from wattwise.agent.metrics import metrics_app

    registry = CollectorRegistry()
    registry.register(node[2])
    answered: list[str] = []
    body = b"".join(
        metrics_app(registry)(
            {"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""},
            lambda s, headers: answered.append(s),
        )
    )
    assert answered == [status]
    assert (b"wattwise_gpu_energy_joules_total" in body) == (status == "200 OK")
