"""Weights kept quantized at run time: packed formats, GGUF blocks read as they are, and the
modules that replace the model's linears (see ``apply``)."""
