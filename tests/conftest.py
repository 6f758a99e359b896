from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import CONNECTORS, GatewayEnv, gateway_env
from tests.support.second_user import world_tree_dir


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
