"""The verifier: sampled re-execution of work units."""
