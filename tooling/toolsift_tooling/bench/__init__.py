"""Benchmarks that print figures: `toolsift bench select` measures the select path end to end."""
