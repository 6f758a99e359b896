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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's own ``timeout`` mark, scaled by ZODEX_TEST_SLOWDOWN."""
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
