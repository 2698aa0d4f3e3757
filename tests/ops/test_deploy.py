"""The compose file: services, official images, health checks, and commands that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from toolsift.app import create_app
from toolsift.cli import app as cli_app
from toolsift.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _interpolate(value: Any) -> Any:
    """`${VAR:-default}` -> default, `${VAR:?msg}` -> a placeholder, as compose would."""
    if isinstance(value, str):
        value = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
        return re.sub(r"\$\{[A-Z_]+(:\?[^}]*)?\}", "x", value)
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return dict(_interpolate(yaml.safe_load(COMPOSE.read_text()))["services"])


def _check_cli(argv: list[str]) -> None:
    """Resolve argv through the real typer app: unknown commands or options fail."""
    command: Any = typer.main.get_command(cli_app)
    args = list(argv[1:])
    parent: Any = None
    while hasattr(command, "resolve_command"):  # a group (typer vendors its own click)
        context = command.make_context("toolsift", list(args), parent=parent)
        name, sub, args = command.resolve_command(
            context, [*context._protected_args, *context.args]
        )
        assert sub is not None, f"no command {name!r} in {argv}"
        command, parent = sub, context
    command.make_context(command.name or "", list(args), parent=parent)


class TestCompose:
    def test_services_and_images(self, services: dict[str, Any]) -> None:
        assert set(services) == {
            "postgres",
            "redis",
            "migrate",
            "api",
            "worker",
            "beat",
            "mcp-listener",
        }
        assert services["postgres"]["image"] == "pgvector/pgvector:pg18"
        assert services["redis"]["image"].startswith("redis:")

    def test_health_checks_and_restart_policies(self, services: dict[str, Any]) -> None:
        for name, service in services.items():
            if name == "migrate":
                assert service["restart"] == "no"
                assert service["healthcheck"] == {"disable": True}
                continue
            assert service["restart"] == "unless-stopped", name
            assert service["healthcheck"]["test"], name

    def test_order_of_start(self, services: dict[str, Any]) -> None:
        assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
        for name in ("api", "worker", "beat", "mcp-listener"):
            wanted = services[name]["depends_on"]["migrate"]["condition"]
            assert wanted == "service_completed_successfully"

    def test_every_toolsift_command_exists_in_the_cli(self, services: dict[str, Any]) -> None:
        checked = 0
        for service in services.values():
            for argv in (service.get("command"), service.get("healthcheck", {}).get("test")):
                if not argv or isinstance(argv, str):
                    continue
                argv = argv[1:] if argv[0] in ("CMD", "CMD-SHELL") else argv
                if argv[0] == "toolsift":
                    _check_cli(argv)
                    checked += 1
        assert checked >= 8

    def test_health_urls_exist_in_the_app(self, services: dict[str, Any]) -> None:
        paths = set(create_app(Settings()).openapi()["paths"])
        probe = " ".join(services["api"]["healthcheck"]["test"])
        for path in re.findall(r"127\.0\.0\.1:8000(/\w+)", probe):
            assert path in paths

    def test_settings_come_from_the_environment(self, services: dict[str, Any]) -> None:
        env = services["api"]["environment"]
        fields = {f"TOOLSIFT_{name.upper()}" for name in Settings.model_fields}
        for name in env:
            assert name in fields | {"DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"}, name
        # Every other setting through the optional env file, in every toolsift service.
        for name, service in services.items():
            if "build" in service:
                assert service["env_file"] == [{"path": "toolsift.env", "required": False}], name

    def test_only_the_api_keeps_metrics_files(self, services: dict[str, Any]) -> None:
        """Every process that imports the app's counters in multiprocess mode writes a file
        per pid: a health check's `toolsift ping`, every 30 s, left one each time."""
        assert "PROMETHEUS_MULTIPROC_DIR" not in DOCKERFILE.read_text()
        keeping = {
            n for n, s in services.items() if "PROMETHEUS_MULTIPROC_DIR" in s.get("environment", {})
        }
        assert keeping == {"api"}

    def test_unknown_commands_are_caught(self) -> None:
        with pytest.raises(Exception, match=r"(?i)no such"):
            _check_cli(["toolsift", "serve", "--no-such-option"])
        with pytest.raises(Exception, match=r"(?i)no such"):
            _check_cli(["toolsift", "nonsense"])


class TestDockerfile:
    def test_multi_stage_non_root_without_build_tools(self) -> None:
        text = DOCKERFILE.read_text()
        stages = text.split("\nFROM ")
        assert len(stages) == 3, "a build stage and a runtime stage"
        runtime = stages[2]
        assert "build-essential" not in runtime
        assert "apt-get install" not in runtime
        assert re.search(r"^USER (?!root|0)", runtime, re.M)
        assert "COPY --from=build /opt/venv /opt/venv" in runtime
        assert "COPY migrations migrations" in runtime

    def test_the_image_ships_the_built_embedding_model(self) -> None:
        # Built in the build stage by a real command, read from the same folder at run time.
        stages = DOCKERFILE.read_text().split("\nFROM ")
        built = re.search(
            r"^RUN TOOLSIFT_EMBEDDING_CACHE_DIR=(\S+) /opt/venv/bin/(toolsift .+)$", stages[1], re.M
        )
        assert built is not None
        folder, command = built.groups()
        _check_cli(command.split())
        assert f"COPY --from=build {folder} {folder}" in stages[2]
        assert f"TOOLSIFT_EMBEDDING_CACHE_DIR={folder}" in stages[2]
