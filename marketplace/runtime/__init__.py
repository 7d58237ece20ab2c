"""What every long-running role is built on: a journal, an event cursor, a tick loop, an outbox."""
