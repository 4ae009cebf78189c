"""The standing attack suite: inputs a hostile user or plugin would write (issue #16)."""
