"""The two OpenAI-compatible APIs the replay client speaks: what a request carries, what a chunk streams.

- ``completions`` (``POST /v1/completions``): the prompt as token ids, so prompt lengths and shared
  prefixes are exact; the server's ``usage.prompt_tokens`` must equal the client's count. Every
  server infbench launches speaks it, as do vLLM, SGLang and llama.cpp's ``llama-server``.
- ``chat`` (``POST /v1/chat/completions``): one user message, the token-id prompt decoded to text by
  the model's tokenizer (a local ``tokenizer.json``, or a directory holding one). The server
  tokenizes the text again and wraps it in its chat template, so its ``usage.prompt_tokens`` differs
  from the client's count and is recorded, not compared; the output must still be exactly
  ``max_tokens`` tokens by the server's ``usage.completion_tokens``. A chunk's tokens are its
  ``delta.content`` and reasoning text (``delta.reasoning_content`` / ``delta.reasoning``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from infbench.errors import ConfigError, InputFileError

API = Literal["completions", "chat"]


class Endpoint(Protocol):
    path: str
    compares_prompt_tokens: bool

    def prompt_fields(self, prompt: list[int]) -> dict[str, Any]: ...

    def piece(self, choice: dict[str, Any]) -> tuple[str, list[int] | None]:
        """(text, token ids or None) one streamed choice carries."""


class Completions:
    path = "/v1/completions"
    compares_prompt_tokens = True

    def prompt_fields(self, prompt: list[int]) -> dict[str, Any]:
        return {"prompt": prompt}

    def piece(self, choice: dict[str, Any]) -> tuple[str, list[int] | None]:
        return choice.get("text") or "", choice.get("token_ids")


class ChatCompletions:
    path = "/v1/chat/completions"
    compares_prompt_tokens = False

    def __init__(self, tokenizer: str):
        from tokenizers import Tokenizer

        path = Path(tokenizer)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise InputFileError(path, "no tokenizer.json (chat completions send text: give the model's tokenizer)")
        self.tokenizer = Tokenizer.from_file(str(file))

    def prompt_fields(self, prompt: list[int]) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": self.tokenizer.decode(prompt, skip_special_tokens=False)}]}

    def piece(self, choice: dict[str, Any]) -> tuple[str, list[int] | None]:
        delta = choice.get("delta") or {}
        text = "".join(delta.get(k) or "" for k in ("reasoning_content", "reasoning", "content"))
        return text, choice.get("token_ids")


def endpoint(api: API, tokenizer: str | None) -> Endpoint:
    if api == "completions":
        return Completions()
    if tokenizer is None:
        raise ConfigError("tokenizer", "chat completions send text: give the model's tokenizer.json")
    return ChatCompletions(tokenizer)
