"""Observation encoders."""
