"""Shared-memory bank model for the CPU tests of the GEMV rounds' load layouts (32 banks of 4 bytes)."""


def banks(addr_bytes, width):
    """The 4-byte banks one lane's load of `width` bytes at `addr_bytes` touches."""
    return [((addr_bytes // 4) + i) % 32 for i in range(width // 4)]


def conflict_free(addrs, width):
    """Lanes of one shared-memory phase: every bank serves one word (equal addresses broadcast)."""
    words = {}
    for addr in addrs:
        for i, b in enumerate(banks(addr, width)):
            words.setdefault(b, set()).add(addr // 4 + i)
    return all(len(v) == 1 for v in words.values())
