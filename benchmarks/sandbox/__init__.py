"""Where a stage's roles run: network namespaces, processes, Nginx configs."""
