"""Side studies beside the lab: the book, sweeps, limits, cross-checks, costs."""
