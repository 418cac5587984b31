"""The checks verify runs on an archive, one concern per module; `view` reads the archive."""
