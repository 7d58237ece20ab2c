"""The verifier's errors, under the project's ZooError so the CLI shows them as one line."""

from marketplace.errors import ZooError


class VerifierError(ZooError):
    """Base of every error the verifier raises on purpose."""


class InputsUnavailable(VerifierError, LookupError):
    """A unit's spec, data or checkpoint could not be fetched (yet): retry, never judge on it."""


class Withheld(InputsUnavailable):
    """A checkpoint the unit's own provider committed could not be fetched (yet): once that lasts
    past the unit's `withheld_after`, the unit fails, since serving it is part of committing it."""
