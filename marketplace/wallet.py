"""Encrypted keystores (eth-account JSON v3) and where their password comes from: never a flag."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import click
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address

from marketplace.config import Settings
from marketplace.errors import ZooError

log = logging.getLogger(__name__)

PASSWORD_ENV = "ZOO_WALLET_PASSWORD"
PASSWORD_FILE_ENV = "ZOO_WALLET_PASSWORD_FILE"


class WalletError(ZooError):
    """A keystore that cannot be found, read, written or unlocked."""


class NoWallet(WalletError, FileNotFoundError):
    """No keystore where one was looked for, or several and none chosen."""


class WrongPassword(WalletError, ValueError):
    """The password does not decrypt the keystore."""


class NoPassword(WalletError):
    """No password source: no env var, no file, and no terminal to prompt on."""


class InvalidKey(WalletError, ValueError):
    """Text that is not a secp256k1 private key."""


def resolve_password(settings: Settings, *, confirm: bool = False) -> str:
    """The keystore password from ZOO_WALLET_PASSWORD, ZOO_WALLET_PASSWORD_FILE, or a prompt.

    Daemons run without a terminal, so a missing source there is an error that says how to give
    one, instead of a prompt that would hang on a closed stdin.
    """
    if settings.wallet_password is not None:
        return settings.wallet_password.get_secret_value()
    if settings.wallet_password_file is not None:
        try:
            return settings.wallet_password_file.read_text().rstrip("\r\n")
        except OSError as exc:
            raise NoPassword(
                f"cannot read the password file {settings.wallet_password_file}: "
                f"{exc.strerror or exc}"
            ) from None
    if not sys.stdin.isatty():
        raise NoPassword(
            f"no wallet password: set {PASSWORD_ENV} or {PASSWORD_FILE_ENV}, "
            "or run in a terminal to be prompted"
        )
    return click.prompt("Wallet password", hide_input=True, confirmation_prompt=confirm)


def keystore_path(settings: Settings) -> Path:
    """The keystore in use: ZOO_WALLET, else the only one under home/keystore."""
    if settings.wallet is not None:
        if not settings.wallet.is_file():
            raise NoWallet(f"no keystore at {settings.wallet}")
        return settings.wallet
    found = sorted(settings.keystore_dir.glob("UTC--*")) if settings.keystore_dir.is_dir() else []
    if not found:
        raise NoWallet(
            f"no wallet under {settings.keystore_dir}: run `zoo-compute wallet new` "
            "or `zoo-compute wallet import`"
        )
    if len(found) > 1:
        raise NoWallet(
            f"{len(found)} wallets under {settings.keystore_dir}: set ZOO_WALLET "
            "to the keystore file to use"
        )
    return found[0]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WalletError(f"cannot read keystore {path}: {exc}") from None


def address_of(path: Path) -> str:
    """The keystore's address, which JSON v3 keeps in clear: no password needed."""
    keystore = _read(path)
    if "address" not in keystore:
        raise WalletError(f"keystore {path} does not name its address")
    return to_checksum_address(keystore["address"])


def unlock(path: Path, password: str) -> LocalAccount:
    try:
        key = Account.decrypt(_read(path), password)
    except ValueError:
        raise WrongPassword(f"wrong password for keystore {path}") from None
    return Account.from_key(key)


def save(settings: Settings, account: LocalAccount, password: str) -> Path:
    """Encrypt `account` under `password` into a new 0600 keystore file named like geth's."""
    directory = settings.keystore_dir
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for existing in directory.glob("UTC--*"):
        if address_of(existing) == account.address:
            raise WalletError(f"a keystore for {account.address} already exists: {existing}")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H-%M-%S.%fZ")
    path = directory / f"UTC--{stamp}--{account.address[2:].lower()}"
    keystore = Account.encrypt(account.key, password)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(keystore, out)
    log.info("wrote keystore for %s to %s", account.address, path)
    return path


def create(settings: Settings, password: str) -> tuple[LocalAccount, Path]:
    account = Account.create()
    return account, save(settings, account, password)


def import_key(settings: Settings, private_key: str, password: str) -> tuple[LocalAccount, Path]:
    try:
        account = Account.from_key(private_key.strip())
    except (ValueError, TypeError):
        raise InvalidKey("not a private key: expected 32 bytes of hex") from None
    return account, save(settings, account, password)


def load_account(settings: Settings) -> LocalAccount:
    """Find the keystore, get its password from the configured source, and unlock it."""
    path = keystore_path(settings)
    return unlock(path, resolve_password(settings))
