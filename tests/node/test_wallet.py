"""The encrypted keystore and `zoo-compute wallet`: round trips, wrong passwords, no leaks."""

from __future__ import annotations

import logging
import stat

import pytest
from click.testing import CliRunner

from marketplace import wallet
from marketplace.cli import main
from marketplace.config import Settings

PASSWORD = "s3cret-keystore-password"
KEY = "0x" + "11" * 32


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(home=tmp_path, wallet=None, wallet_password=None, wallet_password_file=None)


def test_create_reload_unlock_round_trip(settings, caplog):
    caplog.set_level(logging.DEBUG)
    account, path = wallet.create(settings, PASSWORD)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert wallet.keystore_path(settings) == path
    assert wallet.address_of(path) == account.address
    assert wallet.unlock(path, PASSWORD).key == account.key
    assert PASSWORD not in caplog.text and PASSWORD not in path.read_text()


def test_wrong_password_is_a_clear_error(settings):
    _, path = wallet.create(settings, PASSWORD)
    with pytest.raises(wallet.WrongPassword, match="wrong password for keystore"):
        wallet.unlock(path, "not it")


def test_password_sources_env_then_file(settings, tmp_path):
    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD + "\n")
    assert (
        wallet.resolve_password(settings.model_copy(update={"wallet_password_file": secret_file}))
        == PASSWORD
    )
    from_env = Settings(home=tmp_path, wallet_password="from-env", wallet_password_file=secret_file)
    assert wallet.resolve_password(from_env) == "from-env"


def test_no_password_source_without_a_terminal(settings):
    with pytest.raises(wallet.NoPassword, match="ZOO_WALLET_PASSWORD"):
        wallet.resolve_password(settings)


def test_no_wallet_and_several_wallets(settings):
    with pytest.raises(wallet.NoWallet, match="wallet new"):
        wallet.keystore_path(settings)
    wallet.create(settings, PASSWORD)
    wallet.create(settings, PASSWORD)
    with pytest.raises(wallet.NoWallet, match="ZOO_WALLET"):
        wallet.keystore_path(settings)


def test_import_refuses_a_bad_key_and_a_duplicate(settings):
    with pytest.raises(wallet.InvalidKey):
        wallet.import_key(settings, "0xnot-a-key", PASSWORD)
    wallet.import_key(settings, KEY, PASSWORD)
    with pytest.raises(wallet.WalletError, match="already exists"):
        wallet.import_key(settings, KEY, PASSWORD)


def test_cli_import_from_stdin_then_address(tmp_path):
    runner = CliRunner()
    env = {"ZOO_HOME": str(tmp_path), "ZOO_WALLET_PASSWORD": PASSWORD}
    imported = runner.invoke(main, ["wallet", "import"], input=KEY + "\n", env=env)
    assert imported.exit_code == 0, imported.output
    address = imported.output.split()[0]
    shown = runner.invoke(main, ["wallet", "address"], env={"ZOO_HOME": str(tmp_path)})
    assert shown.output.strip() == address
    for output in (imported.output, shown.output):
        assert PASSWORD not in output and KEY[2:] not in output


def test_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    env = {"ZOO_HOME": str(tmp_path), "ZOO_WALLET_PASSWORD": None, "ZOO_WALLET_PASSWORD_FILE": None}
    result = runner.invoke(main, ["wallet", "new"], env=env)
    assert result.exit_code == 1
    assert (
        result.output.startswith("Error: no wallet password") and "Traceback" not in result.output
    )
