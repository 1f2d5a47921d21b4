"""kvplan: exact KV-cache memory planning for LLM serving.

Only the version lives here: importing the package must stay cheap (no torch, numpy or matplotlib).
"""

__version__ = "0.1.0"
