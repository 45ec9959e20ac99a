"""app/watchers/tracing.py: off by default, the app unchanged; bad settings refused at start.

Tracing on is exercised in a process of its own (the Redis instrumentor patches
redis-py for the whole process): tests/lab/test_instruments.py runs the app traced
against a real OTLP receiver and counts the spans.
"""

from __future__ import annotations

import pytest
import redis
from conftest import make_config

from app import create_app
from app.settings import ConfigError


def test_tracing_is_off_by_default_and_leaves_the_app_unchanged(redis_url):
    app = create_app(make_config(redis_url))
    assert (app.config["TRACING"], app.config["TRACE_SAMPLE"]) == (False, 1.0)
    assert "tracing" not in app.extensions
    assert not getattr(app, "_is_instrumented_by_opentelemetry", False)
    # no instrumentor wrapped redis-py (wrapt leaves __wrapped__ on what it wraps)
    assert not hasattr(redis.Redis.execute_command, "__wrapped__")
    assert app.test_client().get("/healthz").status_code == 200


@pytest.mark.parametrize("value", [2, -0.1, "a tenth", True, None])
def test_a_trace_sample_outside_0_to_1_is_refused_at_start(redis_url, value):
    with pytest.raises(ConfigError, match=r"TRACE_SAMPLE \(FLASK_TRACE_SAMPLE\) must be a "
                                          r"ratio from 0 to 1"):
        create_app(make_config(redis_url, TRACING=True, TRACE_SAMPLE=value))
    assert not hasattr(redis.Redis.execute_command, "__wrapped__")  # refused before it
