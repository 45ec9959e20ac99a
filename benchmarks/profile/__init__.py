"""Where the app server's CPU goes: py-spy while measured, a flame graph, CPU by bucket."""
