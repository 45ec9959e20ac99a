"""What a run's files mean: metrics, the report, its plots, the reference."""
