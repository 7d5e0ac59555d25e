"""What the stores say: per-cell summaries, statistics, REPORT.md blocks and plots, the
recommendation, fix/failure cross-tables, benches and prices, one trial shown."""
