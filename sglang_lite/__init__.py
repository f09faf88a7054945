"""sglang-lite: a structured-generation LLM serving engine."""

from sglang_lite.engine import Engine
from sglang_lite.errors import QueueFullError, RequestError
from sglang_lite.sampling_params import SamplingParams

__all__ = ["Engine", "QueueFullError", "RequestError", "SamplingParams"]
__version__ = "0.1.0"
