"""The memory family: the versioned memory stores, learnings and memory_search."""
