"""Beam's pipeline arguments: parsed, merged, and what each runner needs."""
