"""Pure decision logic: no I/O, no asyncio, no clock reads."""
