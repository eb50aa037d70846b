"""The agent's request bodies, read by the record codec: a bad body is refused with 400 (404 for a GPU no
name fits), a one-line error naming the field and what to send instead, and changes nothing."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from tests.support.agent_server import as_uid, served
from wattwise.agent.agent import Agent
from wattwise.agent.audit import AuditLog
from wattwise.agent.config import AgentConfig
from wattwise.agent.journal import AgentJournal
from wattwise.devices import simulated_gpus

POWER, CLOCKS, HOLDER = "/v1/gpus/0/power_limit", "/v1/gpus/0/sm_clocks", "/v1/gpus/0/holder"
JOBS, RELEASE = "/v1/jobs", "/v1/release"
SEND_WATTS = 'send {"watts": W, "job": "name"}: W the power limit, a finite number of watts'
SEND_CLOCKS = 'send {"min_mhz": F, "max_mhz": F, "job": "name"}'
SEND_PID = 'send {"pid": P}: P the pid of the caller\'s child, a positive integer'
SEND_JOB = 'send {"job_id": "J", "uid": U, "gpus": [index or uuid]}'

CASES = [
    (POWER, {"watts": "200"}, 400, f"request body: watts must be a finite number (got '200'); {SEND_WATTS}"),
    (POWER, {"watts": True}, 400, "watts must be a finite number (got True)"),
    (POWER, {"job": "bert"}, 400, f"request body: key 'watts' is missing; {SEND_WATTS}"),
    (POWER, {"watts": 200, "job": None}, 400, "job must be a printable string of at most 128 characters (got None)"),
    (POWER, {"watts": 200, "job_id": "7\n"}, 400, "job_id must be a printable string of at most 128 characters"),
    (
        CLOCKS,
        {"min_mhz": 1500.0, "max_mhz": 1600},
        400,
        f"min_mhz must be a whole number >= 0 (got 1500.0); {SEND_CLOCKS}",
    ),
    (CLOCKS, {"min_mhz": 900, "max_mhz": False}, 400, "max_mhz must be a whole number >= 0 (got False)"),
    (HOLDER, {"pid": 0}, 400, f"request body: pid must be a whole number >= 1 (got 0); {SEND_PID}"),
    (HOLDER, {"pid": "42"}, 400, "pid must be a whole number >= 1 (got '42')"),
    (RELEASE, {}, 400, "job_id must name the batch job whose GPUs to release (its SLURM_JOB_ID)"),
    (RELEASE, {"job_id": 5}, 400, "job_id must be a printable string of at most 128 characters (got 5)"),
    (JOBS, {"job_id": "", "uid": 1, "gpus": [0]}, 400, "job_id must name the batch job (its SLURM_JOB_ID)"),
    (JOBS, {"job_id": "7", "uid": -1, "gpus": [0]}, 400, f"uid must be a whole number >= 0 (got -1); {SEND_JOB}"),
    (JOBS, {"job_id": "7", "uid": True, "gpus": [0]}, 400, "uid must be a whole number >= 0 (got True)"),
    (JOBS, {"job_id": "7", "uid": 1}, 400, "key 'gpus' is missing"),
    (JOBS, {"job_id": "7", "uid": 1, "gpus": "0"}, 400, "gpus must be the list of the job's GPUs on this node"),
    (JOBS, {"job_id": "7", "uid": 1, "gpus": [0, 1, 0]}, 400, "gpus must be the list of the job's GPUs on this node"),
    # A name no GPU has is answered as a URL's is: 404, the name as JSON writes it.
    (JOBS, {"job_id": "7", "uid": 1, "gpus": [True]}, 404, "no GPU 'true' on this node"),
    (JOBS, {"job_id": "7", "uid": 1, "gpus": [1.0]}, 404, "no GPU '1.0' on this node"),
    (JOBS, {"job_id": "7", "uid": 1, "gpus": [-1]}, 404, "no GPU '-1' on this node"),
    (JOBS, {"job_id": "7", "uid": 1, "gpus": [[0]]}, 404, "no GPU '[0]' on this node"),
]


def make_agent(tmp_path: Path) -> Agent:
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    gpus = simulated_gpus(2, persist_dir=tmp_path / "sim")
    return Agent(list(gpus), "simulated", AgentConfig(), journal, AuditLog(tmp_path / "state"))


def _post(sock: Path, path: str, body: bytes) -> tuple[int, dict[str, object]]:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall(head.encode() + body)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    header, _, payload = b"".join(chunks).partition(b"\r\n\r\n")
    return int(header.split()[1]), json.loads(payload)


def test_a_bad_body_is_refused_naming_its_field_and_what_to_send(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)

    async def scenario() -> list[tuple[int, dict[str, object]]]:
        async with served(agent, tmp_path) as sock:
            return [await asyncio.to_thread(_post, sock, path, json.dumps(body).encode()) for path, body, _, _ in CASES]

    answers = asyncio.run(scenario())
    for (path, body, status, message), (got_status, answer) in zip(CASES, answers, strict=True):
        assert got_status == status and message in str(answer["error"]), (path, body, answer)
        assert "\n" not in str(answer["error"]) and list(answer) == ["error"]
    assert all(agent.gpu_status(i)["holder"] is None for i in (0, 1)) and list(agent.jobs) == []


@pytest.mark.parametrize(
    ("path", "body", "field", "value"),
    [
        (POWER, {"watts": 250, "job": "bert", "job_id": "77"}, "power_limit_w", 250.0),
        (POWER, {"watts": 250}, "power_limit_w", 250.0),  # job and job_id left out: ""
        (CLOCKS, {"min_mhz": 900, "max_mhz": 1500}, "locked_sm_clocks_mhz", [900, 1500]),
    ],
)
def test_a_good_body_is_read_into_its_wire_shape(
    tmp_path: Path, path: str, body: dict[str, object], field: str, value: object
) -> None:
    agent = make_agent(tmp_path)

    async def scenario() -> tuple[int, dict[str, object]]:
        async with served(agent, tmp_path) as sock:
            return await asyncio.to_thread(_post, sock, path, json.dumps(body).encode())

    status, answer = asyncio.run(scenario())
    assert status == 200 and answer[field] == value, answer
    holder = answer["holder"]
    assert isinstance(holder, dict) and (holder["job"], holder["job_id"]) == (
        body.get("job", ""),
        body.get("job_id", ""),
    )


def test_a_registration_names_its_gpus_by_index_or_uuid(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    uuid = agent.gpu_status(1)["uuid"]

    async def scenario() -> tuple[int, dict[str, object]]:
        async with served(agent, tmp_path, as_uid(0)) as sock:  # root, as the prolog runs
            body = {"job_id": "81", "uid": 4321, "gpus": [0, uuid]}
            return await asyncio.to_thread(_post, sock, JOBS, json.dumps(body).encode())

    status, answer = asyncio.run(scenario())
    assert status == 200 and (answer["job_id"], answer["uid"], answer["gpus"]) == ("81", 4321, [0, 1]), answer
