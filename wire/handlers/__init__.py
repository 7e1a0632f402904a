"""One module per API family; importing this package registers every handler."""

from wire.handlers import admin, fetch, groups, metadata, offsets, produce  # noqa: F401
