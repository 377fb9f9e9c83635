"""The error hierarchy. The CLI turns each into a one-line message (exit 1)."""


class VaultSearchError(Exception):
    """Base class: ``str(err)`` is a one-line message that says what to do."""


class VaultNotFoundError(VaultSearchError):
    """The vault folder does not exist or is not a folder."""


class IndexNotFoundError(VaultSearchError):
    """No index has been built for this vault yet."""


class IndexVersionError(VaultSearchError):
    """The index was written by a newer vault-search, or cannot be migrated."""


class IndexCorruptError(VaultSearchError):
    """The index database cannot be read."""


class ConfigError(VaultSearchError):
    """A configuration file or value is invalid."""


class PathOutsideVaultError(VaultSearchError):
    """A requested path resolves outside the vault."""


class NoteNotFoundError(VaultSearchError):
    """A requested note does not exist in the vault."""


class UsageValueError(VaultSearchError):
    """A value the user gave is malformed or unsupported (the CLI exits 2)."""


class VaultMismatchError(VaultSearchError):
    """The index was built for another vault."""
