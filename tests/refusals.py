"""One clean refusal, the shape every bad-input case checks (imported by tests/test_validation.py
and tests/test_hardening.py; pytest puts tests/ on sys.path, conftest registers it for assert
rewriting): the API raises the project's error type, a ValueError, in one line; the CLI prints
one line on stderr and exits 2."""
from steptime.cli import main
from steptime.errors import SteptimeError


def clean(exc_info, cls=SteptimeError) -> str:
    """A clean refusal: the project's type, a ValueError, one line. Returns the message."""
    e = exc_info.value
    assert isinstance(e, cls) and isinstance(e, SteptimeError) and isinstance(e, ValueError)
    assert "\n" not in str(e) and str(e)
    return str(e)


def run_cli(capsys, argv):
    """(exit code, stdout, stderr) of `steptime argv` run in this process."""
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def refuses(capsys, argv, needle) -> str:
    """`steptime argv` refuses with exit 2 and one stderr line holding `needle` (no traceback),
    argparse's own refusals included. Returns the line."""
    try:
        rc, _, err = run_cli(capsys, argv)
    except SystemExit as exc:  # argparse
        rc, err = exc.code, capsys.readouterr().err
    assert rc == 2, err
    assert needle in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err
