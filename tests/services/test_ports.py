"""A reserved port is below the ephemeral range and never handed to two holders at once."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.services.ports import ephemeral_low, reserved_port


def test_a_held_port_is_not_reserved_again(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    with reserved_port(claims, span=2) as first:
        assert ephemeral_low() - 2 <= first < ephemeral_low()
        for _ in range(20):  # of the two ports only the other one is free to claim
            with reserved_port(claims, span=2) as second:
                assert second != first
    with reserved_port(claims, span=1) as again:  # released with the block
        assert again == ephemeral_low() - 1


def test_a_port_something_listens_on_is_passed_over(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", ephemeral_low() - 1))
        listener.listen()
        with reserved_port(tmp_path / "claims", span=2) as port:
            assert port == ephemeral_low() - 2


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    table = tmp_path / "range"
    table.write_text("40000\t60999\n")
    assert ephemeral_low(table) == 40000
    assert ephemeral_low(tmp_path / "missing") == 32768
