"""One lab run: its options, its results layout, the runner, its progress."""
