"""Errors that name the config key or file a user has to fix."""

from __future__ import annotations


class InfbenchError(Exception):
    """Base class for errors a user can act on."""


class ConfigError(InfbenchError):
    """A config value is wrong; ``key`` is its dotted path, ``where`` the config file(s) it was read from
    (empty where not known)."""

    def __init__(self, key: str, message: str, where: str = ""):
        self.key = key
        self.detail = message
        self.where = where
        super().__init__(f"{where}: config key '{key}': {message}" if where else f"config key '{key}': {message}")

    def read_from(self, where: str) -> ConfigError:
        """This error naming the config file(s) ``where`` it was read from."""
        return ConfigError(self.key, self.detail, where)


class InputFileError(InfbenchError):
    """An input file is missing or unreadable."""

    def __init__(self, path, message: str):
        self.path = str(path)
        super().__init__(f"{path}: {message}")
