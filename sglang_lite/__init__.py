"""sglang-lite: a structured-generation LLM serving engine."""
