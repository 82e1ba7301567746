"""Errors that name the config key or file a user has to fix."""


class InfbenchError(Exception):
    """Base class for errors a user can act on."""


class ConfigError(InfbenchError):
    """A config value is wrong; ``key`` is its dotted path."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"config key '{key}': {message}")


class InputFileError(InfbenchError):
    """An input file is missing or unreadable."""

    def __init__(self, path, message: str):
        self.path = str(path)
        super().__init__(f"{path}: {message}")
