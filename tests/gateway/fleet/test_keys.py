"""zodex host keygen and the fleet's key-file rules (docs/fleet.md#keys)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
import zmq
from click.testing import CliRunner

from tests.support.second_user import run_as_second_user, second_user_python
from zodex_gateway.cli import cli
from zodex_gateway.fleet import keys


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_keygen_writes_a_curve_pair_signing_and_mcp_keys(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["host", "keygen", "--out", str(tmp_path), "--name", "alpha"])
    assert done.exit_code == 0, done.output
    secret, public = tmp_path / "alpha.key", tmp_path / "alpha.pub"
    assert done.output.split() == [str(secret), str(public)]
    assert (_mode(secret), _mode(public)) == (0o600, 0o644)
    assert zmq.curve_public(keys.read_z85_secret(secret)) == keys.read_public_key(public)
    assert (
        runner.invoke(
            cli, ["host", "keygen", "--out", str(tmp_path), "--name", "alpha", "--signing"]
        ).exit_code
        == 0
    )
    signing = keys.signing_key(keys.read_z85_secret(tmp_path / "alpha.signing"))
    assert len(signing) == 32 and _mode(tmp_path / "alpha.signing") == 0o600
    assert (
        runner.invoke(cli, ["host", "keygen", "--out", str(tmp_path), "--name", "alpha", "--mcp"]).exit_code
        == 0
    )
    assert len((tmp_path / "alpha.mcp").read_text().strip()) == 43 and _mode(tmp_path / "alpha.mcp") == 0o600


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "alpha"], "exists; keygen never overwrites a key (remove it first to replace it)"),
        (["--name", "../x"], "key name '../x' must be 1-64 of A-Z a-z 0-9 . _ -"),
        (["--name", "b", "--signing", "--mcp"], "--signing and --mcp write different keys"),
    ],
)
def test_keygen_refusals_change_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "alpha.pub").write_text("x\n")  # one of the pair exists: neither is written
    before = sorted(p.name for p in tmp_path.iterdir())
    done = CliRunner().invoke(cli, ["host", "keygen", "--out", str(tmp_path), *args])
    assert done.exit_code == 1 and message in done.output and done.output.startswith("error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_keygen_that_cannot_write_says_so_in_one_line_and_leaves_no_half_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = keys._write_new

    def full_disk_on_pub(path: Path, text: str, mode: int) -> None:
        if path.suffix == ".pub":
            raise OSError(28, "No space left on device")
        real_write(path, text, mode)

    monkeypatch.setattr(keys, "_write_new", full_disk_on_pub)
    done = CliRunner().invoke(cli, ["host", "keygen", "--out", str(tmp_path), "--name", "alpha"])
    assert done.exit_code == 1
    assert done.output == f"error: cannot write {tmp_path / 'alpha.pub'}: No space left on device\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run keygen as another account")
def test_keygen_in_a_directory_it_cannot_write_is_one_line() -> None:
    # The project through a Python nobody can run (staged when the clone is out of its reach).
    zodex = [*second_user_python(), "-c", "import sys; from zodex_gateway.cli import main; main()"]
    with tempfile.TemporaryDirectory(dir="/tmp") as made:
        out = Path(made)
        out.chmod(0o755)  # root's, in reach of nobody, who may not write in it
        done = run_as_second_user(
            [*zodex, "host", "keygen", "--out", str(out), "--name", "alpha"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert done.stderr == f"error: cannot write {out / 'alpha.key'}: Permission denied\n"
        assert list(out.iterdir()) == []


def test_keygen_needs_an_existing_directory(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["host", "keygen", "--out", str(tmp_path / "nope"), "--name", "a"])
    assert done.exit_code == 1 and f"error: {tmp_path / 'nope'} is not a directory" in done.output


def test_key_files_others_can_read_or_malformed_are_refused(tmp_path: Path) -> None:
    keys.keygen(tmp_path, "k")
    secret = tmp_path / "k.key"
    secret.chmod(0o604)
    with pytest.raises(keys.KeyFileError, match=r"can be read by other accounts \(mode 0604\): chmod o-rwx"):
        keys.read_z85_secret(secret)
    secret.chmod(0o640)  # group-readable is allowed (Kubernetes' fsGroup)
    keys.read_z85_secret(secret)
    link = tmp_path / "link.key"
    link.symlink_to(secret)  # Secrets are mounted through links
    assert keys.read_z85_secret(link) == keys.read_z85_secret(secret)
    bad = tmp_path / "bad.key"
    bad.write_text("short\n")
    bad.chmod(0o600)
    with pytest.raises(keys.KeyFileError, match="is not a z85 key of 40 characters"):
        keys.read_z85_secret(bad)
    with pytest.raises(keys.KeyFileError, match="no such key file"):
        keys.read_z85_secret(tmp_path / "missing.key")
    with pytest.raises(keys.KeyFileError, match="owned by uid"):
        keys.read_z85_secret(secret, owners={os.getuid() + 1})


def test_gateway_keys_are_every_pub_file_and_none_is_refused(tmp_path: Path) -> None:
    with pytest.raises(keys.KeyFileError, match=r"no gateway public keys \(\*\.pub\) in"):
        keys.gateway_keys(tmp_path)
    keys.keygen(tmp_path, "one")
    keys.keygen(tmp_path, "two")
    assert len(keys.gateway_keys(tmp_path)) == 2  # the .key files beside them are ignored
    (tmp_path / "three.pub").write_text("not a key\n")
    with pytest.raises(keys.KeyFileError, match=r"three\.pub is not a z85 key"):
        keys.gateway_keys(tmp_path)
