"""One embedded engine for every DSL test (loading it is the slow part)."""

from __future__ import annotations

import pytest

from frontend_dsl import EngineBackend


@pytest.fixture(scope="session")
def engine_backend():
    backend = EngineBackend()
    yield backend
    backend.shutdown()


@pytest.fixture()
def engine(engine_backend):
    return engine_backend.engine
