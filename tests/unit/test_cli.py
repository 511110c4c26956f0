"""Every subcommand answers --help."""

from __future__ import annotations

import pytest

from kmon.cli import SUBCOMMANDS, main


@pytest.mark.parametrize(
    "argv",
    [
        [],
        *([name] for name in SUBCOMMANDS),
        *(["cluster", verb] for verb in
          ["up", "down", "status", "pause", "resume", "kill", "start", "logs"]),
        *(["prometheus", verb] for verb in ["up", "down", "status"]),
    ],
)
def test_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    assert "usage: kmon" in capsys.readouterr().out
