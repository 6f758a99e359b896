from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import CONNECTORS, GatewayEnv, gateway_env
from tests.support.second_user import world_tree_dir
from tests.support.slowdown import factor


def pytest_configure(config: pytest.Config) -> None:
    # The global per-test timeout (pyproject.toml), scaled by ZODEX_TEST_SLOWDOWN.
    timeout = config.getini("timeout")
    if factor() != 1 and timeout:
        config.option.timeout = float(timeout) * factor()


# Where the end-to-end tests live: whole runtimes, services, accounts and outside clients.
E2E_DIRS = ("integration", "local", "sprite", "fleet", "outside_clients", "deploy")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``e2e`` mark for the end-to-end tiers (scripts/test.sh runs the rest first), and
    each test's own ``timeout`` mark scaled by ZODEX_TEST_SLOWDOWN."""
    for item in items:
        relative = Path(str(item.path)).resolve().relative_to(TESTS.resolve())
        if relative.parts[0] in E2E_DIRS or relative.name == "test_second_user.py":
            item.add_marker(pytest.mark.e2e)
    if factor() == 1:
        return
    for item in items:
        marker = item.get_closest_marker("timeout")
        if marker is not None and marker.args:
            item.add_marker(pytest.mark.timeout(float(marker.args[0]) * factor()), append=False)


@pytest.fixture
def genv() -> Iterator[GatewayEnv]:
    with gateway_env() as env:
        yield env


@pytest.fixture(params=sorted(CONNECTORS))
def connect(request: pytest.FixtureRequest) -> object:
    """Parametrises a test over both transports: ``async with connect(genv) as mcp``."""
    return CONNECTORS[request.param]


@pytest.fixture
def second_user_tree(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh 0755 directory under /tmp that ``nobody`` can reach, removed after the test."""
    with world_tree_dir(request.node.name) as path:
        yield path
