"""Data-parallel training across ranks: compressed updates and Byzantine-robust aggregation."""
