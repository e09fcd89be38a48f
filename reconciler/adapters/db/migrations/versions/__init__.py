"""One module per schema revision, oldest first; never edit a shipped revision."""
