"""docker-compose.yml and the Dockerfile agree with the code's configuration and with the README.

No Docker engine runs where these tests run, so the file is checked, not started: the
same topology is started natively by tests/test_cluster.py with the same variable names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from icesink.catalog.config import CatalogConfig
from icesink.settings import SETTINGS

ROOT = Path(__file__).parent.parent
SERVICES = {
    "postgres",
    "minio",
    "create-bucket",
    "db-upgrade",
    "spark-master",
    "spark-worker",
    "committer",
    "orders-generator",
    "producer",
}
# Variables read by the third-party images, not by icesink.
THIRD_PARTY = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def environment(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def test_every_service_of_the_production_shape_is_there(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    icesink_image = {name for name, s in services.items() if s.get("image") == "icesink:dev"}
    assert icesink_image == {"db-upgrade", "spark-master", "spark-worker", "committer", "orders-generator", "producer"}
    assert services["db-upgrade"]["build"] == "."  # the image is built from the repository's Dockerfile
    for name in ("postgres", "minio", "create-bucket"):
        assert re.fullmatch(r"[\w/.-]+:[\w.-]+", services[name]["image"]), f"{name}: pin the image tag"
        assert not services[name]["image"].endswith(":latest")
    assert set(compose["volumes"]) == {"postgres-data", "minio-data", "orders", "checkpoints"}


def test_every_variable_is_a_known_setting_and_the_catalog_resolves(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog_env: dict[str, str] = {}
    for name, service in compose["services"].items():
        for variable, value in environment(service).items():
            if variable.startswith("PYICEBERG_CATALOG__DEFAULT__"):
                catalog_env[variable] = value
            else:
                assert variable in SETTINGS or variable in THIRD_PARTY, f"{name}: unknown variable {variable}"
    for variable, value in catalog_env.items():
        monkeypatch.setenv(variable, value)
    config = CatalogConfig.resolve()  # raises on an unknown s3.* key
    assert config.name == "default" and config.uri.startswith("postgresql+psycopg2://")
    assert config.warehouse == "s3://lake/warehouse"
    assert config.properties["s3.endpoint"] == "http://minio:9000"
    postgres = environment(compose["services"]["postgres"])
    assert f"{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@postgres:5432/{postgres['POSTGRES_DB']}" in (
        config.uri
    )
    minio = environment(compose["services"]["minio"])
    assert (config.properties["s3.access-key-id"], config.properties["s3.secret-access-key"]) == (
        minio["MINIO_ROOT_USER"],
        minio["MINIO_ROOT_PASSWORD"],
    )
    bucket = config.warehouse.removeprefix("s3://").split("/")[0]
    assert f"lake/{bucket}" in " ".join(compose["services"]["create-bucket"]["command"])


def test_services_are_wired_in_the_right_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["db-upgrade"]["command"] == ["icesink", "db", "upgrade"]
    assert services["db-upgrade"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    committer = services["committer"]
    assert committer["command"][:3] == ["icesink", "committer", "run"]
    assert committer["depends_on"]["db-upgrade"]["condition"] == "service_completed_successfully"
    assert committer["depends_on"]["create-bucket"]["condition"] == "service_completed_successfully"
    assert services["producer"]["depends_on"]["committer"]["condition"] == "service_healthy"
    # The metrics port is published, and the health check asks /healthz on it.
    port = environment(committer)["ICESINK_METRICS_PORT"]
    assert f"{port}:{port}" in committer["ports"]
    assert environment(committer)["ICESINK_METRICS_HOST"] == "0.0.0.0"
    assert f"127.0.0.1:{port}/healthz" in " ".join(committer["healthcheck"]["test"])
    # Executors read the input files: the worker sees the same volume as the job and the generator.
    source = environment(services["producer"])["ICESINK_SOURCE_DIR"]
    for name in ("producer", "spark-worker", "orders-generator"):
        assert f"orders:{source}" in services[name]["volumes"], name
    assert "examples/stream_job.py" in services["producer"]["command"]
    assert "spark://spark-master:7077" in services["producer"]["command"]
    assert environment(services["producer"])["ICESINK_COMMITTER"] == "daemon"


def test_dockerfile_installs_every_role_and_points_spark_at_its_python() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir '.[all]'" in dockerfile
    assert "openjdk-17-jre-headless" in dockerfile
    assert "PYSPARK_PYTHON=/usr/local/bin/python" in dockerfile
    for copied in ("icesink", "examples", "pyproject.toml"):
        assert re.search(rf"^COPY .*\b{copied}\b", dockerfile, re.MULTILINE), copied


def test_the_deployment_page_describes_every_service_and_says_there_is_no_engine_here(compose: dict[str, Any]) -> None:
    """Every setting has its entry in the generated settings reference (tests/test_docs.py checks that)."""
    page = (ROOT / "docs" / "operations" / "deployment.md").read_text()
    for service in compose["services"]:
        assert f"`{service}`" in page, f"docs/operations/deployment.md does not describe the {service} service"
    assert "docker compose up" in page
    assert "no Docker engine" in page
