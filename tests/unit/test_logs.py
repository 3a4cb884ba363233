"""The library's loggers (``tumbler._logs``): the logging package is imported at their first
use, the ``tumbler`` logger then gets its NullHandler, and a set-up asked for beforehand (the
CLI's handler) runs before the first record; the CLI prints errors, and warnings only with
``--verbose``.

Each case runs in a fresh interpreter: whether a tumbler logger was used is the process's.
"""

from __future__ import annotations

from tests.processes import run_python


def test_a_logger_imports_logging_at_its_first_use_and_adds_the_null_handler() -> None:
    done = run_python(
        """
        import sys
        from tumbler._logs import logger
        log = logger("tumbler.case")
        assert "logging" not in sys.modules
        log.warning("nobody set logging up")
        import logging
        handlers = logging.getLogger("tumbler").handlers
        assert [type(h).__name__ for h in handlers] == ["NullHandler"], handlers
        log.warning("again")
        assert len(logging.getLogger("tumbler").handlers) == 1
        """
    )
    assert done.returncode == 0, done.stderr
    # the NullHandler keeps Python's last-resort handler from printing the library's warnings
    assert done.stderr == ""


def test_a_set_up_runs_before_the_first_record_or_at_once_and_can_be_withdrawn() -> None:
    done = run_python(
        """
        import sys
        from tumbler import _logs
        seen = []
        _logs.when_used(lambda: seen.append("first"))
        withdraw = _logs.when_used(lambda: seen.append("withdrawn"))
        withdraw()
        assert seen == [] and "logging" not in sys.modules
        _logs.logger("tumbler.case").debug("a record")
        assert seen == ["first"], seen
        _logs.when_used(lambda: seen.append("at once"))
        assert seen == ["first", "at once"], seen
        """
    )
    assert done.returncode == 0, done.stderr


def test_the_command_line_prints_errors_and_with_verbose_warnings_too() -> None:
    program = """
        import sys
        from tumbler import _logs
        from tumbler.cli import _library_logging
        verbose = {verbose}
        with _library_logging(verbose):
            assert ("logging" in sys.modules) == verbose
            log = _logs.logger("tumbler.case")
            log.warning("a warning")
            log.error("an error")
        log.error("after the command")
        """
    quiet = run_python(program.format(verbose=False))
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.splitlines() == ["tumbler: ERROR: an error"]
    loud = run_python(program.format(verbose=True))
    assert loud.returncode == 0, loud.stderr
    assert loud.stderr.splitlines() == [
        "tumbler: WARNING: a warning",
        "tumbler: ERROR: an error",
    ]


def test_a_loggers_level_is_read_afresh_and_its_methods_follow_it() -> None:
    done = run_python(
        """
        import logging
        from tumbler._logs import logger
        log = logger("tumbler.case")
        seen = []
        class Keep(logging.Handler):
            def emit(self, record):
                seen.append(record.getMessage())
        logging.getLogger("tumbler").addHandler(Keep())
        logging.getLogger("tumbler.case").setLevel(logging.ERROR)
        assert log.level == logging.ERROR
        log.warning("not kept")
        logging.getLogger("tumbler.case").setLevel(logging.WARNING)
        assert log.level == logging.WARNING
        log.warning("kept")
        assert seen == ["kept"], seen
        """
    )
    assert done.returncode == 0, done.stderr
