"""The provider: training engine and daemon."""
