from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.gateway import CONNECTORS, GatewayEnv, gateway_env


@pytest.fixture
def genv() -> Iterator[GatewayEnv]:
    with gateway_env() as env:
        yield env


@pytest.fixture(params=sorted(CONNECTORS))
def connect(request: pytest.FixtureRequest) -> object:
    """Parametrises a test over both transports: ``async with connect(genv) as mcp``."""
    return CONNECTORS[request.param]
