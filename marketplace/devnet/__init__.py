"""The local devnet: every part of the network on loopback, started and stopped by pid."""

from marketplace.chain.toolchain import PROJECT_ROOT

STATE_DIR = PROJECT_ROOT / ".devnet"  # state, logs and the user's settings of the running devnet
