"""The Sockets tab: a Locust web UI plugin, its numbers, its screenshots."""
