"""`wattwise example-data DIR` writes the documentation's inputs, and installed configurations are found by name."""

from __future__ import annotations

import csv
import json
from importlib import resources
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.errors import ConfigError
from wattwise.pipeline.profiles import load_profile
from wattwise.record.files import read_run_dir

SHIPPED = (
    "gpt3-175b+a100_sxm_bf16.csv",
    "power-model-a40-resnet50.csv",
    "power-model-a40-bert-base-uncased.csv",
    "summary_train.csv",
    "summary_power_a40.csv",
    "README.md",
)


def test_example_data_writes_every_input_the_docs_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["example-data", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    data = tmp_path / "data"
    for name in (*SHIPPED, "pue.csv", "intensity.csv", "price.csv", "configs/tune.yaml", "configs/energy.yaml"):
        assert (data / name).is_file(), name
        assert str(data / name) in out.splitlines()
    profile = load_profile(data / "gpt3-175b+a100_sxm_bf16.csv")
    assert profile.num_stages == 8
    assert read_run_dir(data / "run").summary.simulated
    with open(data / "summary_train.csv") as fh:
        workloads = {(r["dataset"], r["network"]) for r in csv.DictReader(fh)}
    assert workloads == {("cifar100", "shufflenetv2"), ("squad", "bert_base_uncased")}
    assert "Apache License 2.0" in (data / "README.md").read_text()


def test_shipped_data_stays_small() -> None:
    folder = Path(str(resources.files("wattwise").joinpath("data")))
    assert sum(p.stat().st_size for p in folder.iterdir()) < 1_000_000


def test_power_models_are_the_zeus_windows_relative_to_the_highest_limit(tmp_path: Path) -> None:
    assert main(["example-data", str(tmp_path)]) == 0
    with open(tmp_path / "power-model-a40-resnet50.csv") as fh:
        rows = {float(r["power_limit"]): (float(r["time"]), float(r["power"])) for r in csv.DictReader(fh)}
    assert rows[300.0][0] == 1.0
    assert rows[100.0][0] > 2.0  # the lowest limit is much slower on a real A40
    assert all(power <= limit * 1.2 for limit, (_, power) in rows.items())


def test_an_installed_configuration_is_found_by_name_from_any_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(["tune.yaml"]).power_limit.mode == "tune"
    assert load_config(["cap"]).power_limit.mode == "cap"
    with pytest.raises(ConfigError, match=r"installed configuration: cap\.yaml, energy\.yaml"):
        load_config(["no-such.yaml"])


def test_a_file_in_the_folder_wins_over_an_installed_configuration(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tune.yaml").write_text(json.dumps({"power_limit": {"eta": 0.25}}))
    assert load_config(["tune.yaml"]).power_limit.eta == 0.25


def test_every_link_in_the_package_points_at_a_folder_the_container_build_copies() -> None:
    copied = {
        src.rstrip("/")
        for line in (REPO_ROOT / "deploy" / "Containerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
    }
    links = [p for p in (REPO_ROOT / "core").rglob("*") if p.is_symlink()]
    assert links, "core/wattwise/configs links the configuration files"
    for link in links:
        target = link.resolve().relative_to(REPO_ROOT)
        assert target.parts[0] in copied, f"{link} -> {target}: not copied by deploy/Containerfile"
