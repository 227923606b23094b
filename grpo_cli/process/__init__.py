"""Set-up of the process a heavy command runs in, one concern per module: the allocator (allocator.py) and the
libraries left unimported (optional_libraries.py)."""
