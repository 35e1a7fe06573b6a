"""A run's record: what every Bench made, its comparison with a saved baseline, and the files
written from it, with or without pytest (the plugin session is one of these)."""
