"""Leaderboard for auto-tuning search agents: metrics, scoring and tables."""
