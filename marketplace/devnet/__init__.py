"""The local devnet: every part of the network on loopback, started and stopped by pid."""

from marketplace.config import DEVNET_DIR

STATE_DIR = DEVNET_DIR  # state, logs and the user's settings of the running devnet
