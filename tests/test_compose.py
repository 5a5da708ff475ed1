"""docker-compose.yml is for users; no Docker engine runs here, so it is checked without one.

The Compose specification's JSON schema (tests/data/compose-spec.json, from compose-spec/compose-spec)
checks the file's shape. The other tests check what a schema cannot: pinned images, the Spark version
against pyspark's, the shared data volume, dependencies, DataBuild's settings and the published ports.
Where a Docker Compose v2 client is installed, `docker compose config` checks the file as well.
"""

import json
import os
import re
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from databuild.config import ENV_NAMES, Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "compose-spec.json"

SPARK_REPOSITORIES = {
    "apache/spark",
    "spark",
    "library/spark",
    "docker.io/apache/spark",
    "docker.io/library/spark",
}
SPARK_SERVICES = ("spark-master", "spark-worker", "spark-connect")
DATABUILD_SERVICES = ("databuild-worker", "databuild-web")
LAKE_VOLUME = "lake"
# Settings every DataBuild service gets, with their values (docs/configuration.md).
DATABUILD_ENV = {
    "DATABUILD_TEMPORAL_ADDRESS": "temporal:7233",
    "DATABUILD_DATABASE_URL": "postgresql+psycopg://databuild:databuild@bel-db:5432/databuild",
    "DATABUILD_STORAGE_ROOT": "/data/lake",
    "DATABUILD_SPARK_MASTER": "spark://spark-master:7077",
    "DATABUILD_SPARK_CONNECT_URL": "sc://spark-connect:15002",
}
TOKENS = "DATABUILD_API_TOKENS"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())  # resolves the file's anchors and `<<` merges
    assert isinstance(loaded, dict), "docker-compose.yml is not a mapping"
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict) and found, "docker-compose.yml defines no services"
    return found


def split_image(reference: str) -> tuple[str, str | None]:
    """`repo[:tag][@digest]` -> (repo, tag); the tag is None when there is none."""
    name = reference.split("@", 1)[0]
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:  # no colon, or the colon belongs to a registry's host:port
        return name, None
    return repo, tag


def dockerfile_images() -> dict[str, str]:
    """The images docker/Dockerfile builds FROM, keyed by how they are written (ARG defaults resolved)."""
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.MULTILINE))
    images = {}
    for written in re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE):
        images[written] = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), written)
    return images


def built_from(service: dict[str, Any]) -> str | None:
    """The base image of a service built from docker/Dockerfile: its SPARK_IMAGE build argument."""
    build = service.get("build")
    if build is None:
        return None
    assert isinstance(build, dict), "give `build` as a mapping (context, dockerfile, args)"
    args = build.get("args") or {}
    if isinstance(args, list):
        args = dict(item.split("=", 1) for item in args)
    return args.get("SPARK_IMAGE")


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: str(value) for key, value in env.items()}


def volume_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each mount, short (`src:dst[:mode]`) or long syntax."""
    mounts = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            source, _, rest = entry.partition(":")
            mounts.append((source, rest.split(":", 1)[0]))
        else:
            mounts.append((entry.get("source", ""), entry["target"]))
    return mounts


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def published_ports(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(host ip, host port, protocol) of each published port."""
    published = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                published.append(
                    (entry.get("host_ip", ""), str(entry["published"]), entry.get("protocol", "tcp"))
                )
            continue
        spec, _, protocol = str(entry).partition("/")
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:
            continue  # only a container port: Docker picks a free host port
        host_ip = parts[0].strip("[]") if len(parts) == 3 else ""
        published.append((host_ip, parts[-2], protocol or "tcp"))
    return published


def test_schema_is_the_compose_specification() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema.get("title") == "Compose Specification"


def test_file_validates_against_the_compose_specification(compose: dict[str, Any]) -> None:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA_FILE.read_text()))
    errors = sorted(validator.iter_errors(compose), key=lambda error: list(error.absolute_path))
    assert not errors, "\n".join(
        f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}" for error in errors
    )


def test_every_image_is_pinned_and_none_is_bitnami(services: dict[str, dict[str, Any]]) -> None:
    references = {f"service {name}": service.get("image") for name, service in services.items()}
    references |= {f"{name} build base": built_from(service) for name, service in services.items()}
    references |= {f"Dockerfile FROM {written}": image for written, image in dockerfile_images().items()}
    for name, service in services.items():
        assert service.get("image") or service.get("build"), f"service {name} has neither image nor build"
    for where, reference in references.items():
        if reference is None:
            continue
        assert "bitnami" not in reference.lower(), f"{where}: {reference} (the bitnami images are retired)"
        _, tag = split_image(reference)
        assert tag, f"{where}: {reference} has no tag; pin a version"
        assert tag != "latest", f"{where}: {reference} uses `latest`; pin a version"
        assert not re.search(r"\$\{?\w", reference), f"{where}: {reference} is not resolved"


def test_spark_images_match_the_pinned_pyspark(services: dict[str, dict[str, Any]]) -> None:
    pyspark = version("pyspark")
    spark_images = {}
    for name in SPARK_SERVICES:
        assert name in services, f"no {name} service"
        image = built_from(services[name]) or services[name].get("image")
        assert image and split_image(image)[0] in SPARK_REPOSITORIES, (
            f"{name} must run the official Spark image or the DataBuild image built FROM it, not {image}"
        )
    for name, service in services.items():
        for image in (service.get("image"), built_from(service)):
            if image and split_image(image)[0] in SPARK_REPOSITORIES:
                spark_images[f"service {name}"] = image
    for written, image in dockerfile_images().items():
        spark_images[f"Dockerfile FROM {written}"] = image
    for where, image in spark_images.items():
        repo, tag = split_image(image)
        assert repo in SPARK_REPOSITORIES, f"{where}: {image} is not an official Spark image"
        assert tag == pyspark or (tag or "").startswith(f"{pyspark}-"), (
            f"{where}: {image} is not Spark {pyspark}, the pyspark version pinned in pyproject.toml"
        )


def test_databuild_image_is_built_from_the_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r'^ENTRYPOINT\s+\[.*"databuild"\]', text, flags=re.MULTILINE), (
        "entrypoint is not databuild"
    )
    assert re.search(r"pip install .*/tmp/databuild", text), "the Dockerfile does not pip-install the project"
    for name in DATABUILD_SERVICES:
        build = services[name].get("build")
        assert isinstance(build, dict), f"{name} is not built from docker/Dockerfile"
        dockerfile = (ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).resolve()
        assert dockerfile == DOCKERFILE, f"{name} builds {dockerfile}, not {DOCKERFILE}"
    built = {service.get("image") for service in services.values() if service.get("build")}
    assert len(built) == 1, f"services built from docker/Dockerfile must share one image name, not {built}"


def test_lake_volume_is_mounted_at_one_path_in_drivers_and_executors(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    assert LAKE_VOLUME in (compose.get("volumes") or {}), "no top-level `lake` volume"
    # Every user of the volume (Spark, DataBuild and any other service) mounts it at the same path.
    mounts = {
        name: [target for source, target in volume_mounts(service) if source == LAKE_VOLUME]
        for name, service in services.items()
    }
    for name in SPARK_SERVICES + DATABUILD_SERVICES:
        assert len(mounts[name]) == 1, (
            f"{name} must mount the `{LAKE_VOLUME}` volume once, not {mounts[name]}"
        )
    paths = {target for targets in mounts.values() for target in targets}
    mounted = {name: targets for name, targets in mounts.items() if targets}
    assert paths == {DATABUILD_ENV["DATABUILD_STORAGE_ROOT"]}, f"`{LAKE_VOLUME}` is mounted at {mounted}"


def test_every_dependency_exists_and_can_become_healthy(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for target, condition in depends_on(service).items():
            assert target in services, f"{name} depends on {target}, which is not a service"
            assert target != name, f"{name} depends on itself"
            if condition == "service_healthy":
                check = services[target].get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), (
                    f"{name} waits for {target} to be healthy, but {target} has no healthcheck"
                )


def test_databuild_services_are_configured(services: dict[str, dict[str, Any]]) -> None:
    for name in DATABUILD_SERVICES:
        env = environment(services[name])
        for key, value in DATABUILD_ENV.items():
            assert env.get(key) == value, f"{name}: {key} is {env.get(key)!r}, expected {value!r}"
    assert services["databuild-worker"].get("command") == ["worker"]
    # Every DATABUILD_ variable the file sets is a setting DataBuild reads, with a valid default.
    known = set(ENV_NAMES.values())
    worker_env = environment(services["databuild-worker"])
    assert {k for k in worker_env if k.startswith("DATABUILD_")} <= known | {"DATABUILD_TEMPORAL_UI_URL"}
    defaults = {k: re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", v) for k, v in worker_env.items()}
    assert defaults["DATABUILD_EXECUTOR"] in ("session", "submit", "connect")
    Settings.model_validate({"spark_connect_url": worker_env["DATABUILD_SPARK_CONNECT_URL"]})
    connect_port = services["spark-connect"]["command"][-1].rsplit("=", 1)[1]
    assert worker_env["DATABUILD_SPARK_CONNECT_URL"].endswith(f":{connect_port}")
    web = services["databuild-web"]
    command = web.get("command")
    assert command[:1] == ["web"] and "0.0.0.0" in command and "8000" in command, command
    web_env = environment(web)
    assert "localhost:8080" in web_env.get("DATABUILD_TEMPORAL_UI_URL", ""), "DATABUILD_TEMPORAL_UI_URL"
    # No default secret: the value must come from the user's environment, and Compose refuses to start
    # without it (`${VAR:?message}`).
    assert re.fullmatch(r"\$\{" + TOKENS + r":\?[^}]*\}", web_env.get(TOKENS, "")), (
        f"{TOKENS} must be `${{{TOKENS}:?...}}`, not {web_env.get(TOKENS)!r}"
    )


def test_published_ports_do_not_clash(services: dict[str, dict[str, Any]]) -> None:
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for name, service in services.items():
        for host_ip, port, protocol in published_ports(service):
            for (other_port, other_protocol), (other_name, other_ip) in seen.items():
                if (port, protocol) != (other_port, other_protocol):
                    continue
                overlap = host_ip == other_ip or "" in (host_ip, other_ip) or "0.0.0.0" in (host_ip, other_ip)
                assert not overlap, f"{name} and {other_name} both publish {protocol} port {port}"
            seen[(port, protocol)] = (name, host_ip)
    for name in ("spark-worker", "databuild-worker"):  # scaled with --scale: nothing fixed per container
        assert not published_ports(services[name]), f"{name} publishes a host port, so it cannot scale"
        assert "container_name" not in services[name], f"{name} has a container_name, so it cannot scale"


def compose_command() -> list[str] | None:
    """A Docker Compose v2 client: the `docker compose` plugin, else a standalone `docker-compose` v2."""
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for command in candidates:
        try:
            run = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if run.returncode == 0 and re.search(r"\bv?2\.\d+", run.stdout):
            return command
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    command = compose_command()
    if command is None:
        pytest.skip(
            "no Docker Compose v2 client installed; the schema and semantic tests above checked the file"
        )
    config = [*command, "-f", str(COMPOSE_FILE), "config", "-q"]
    env = {**os.environ, TOKENS: "ci=0123456789abcdef0123456789abcdef"}
    run = subprocess.run(config, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    env.pop(TOKENS)
    run = subprocess.run(config, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and TOKENS in run.stderr, "Compose must refuse to start without API tokens"
