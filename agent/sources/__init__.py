"""Discovery sources: one module per source; each returns a value and keeps no state."""
