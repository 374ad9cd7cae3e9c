"""The library's log messages reach Python's `logging` ("stoker" logger); STOKER_LOG
sets the library's threshold."""

import logging
import os
import subprocess
import sys
import time

import stoker
from stoker import _stoker

ERROR, WARN, INFO, DEBUG = 0, 1, 2, 3


def _records(caplog, text):
    return [r for r in caplog.records if r.name == "stoker" and text in r.getMessage()]


def test_message_logged_on_a_python_thread_reaches_the_stoker_logger(caplog):
    with caplog.at_level(logging.DEBUG, logger="stoker"):
        _stoker._log(WARN, "io engine fell back (test)")
        _stoker._log(ERROR, "shard unreadable (test)")
    (w,) = _records(caplog, "io engine fell back (test)")
    assert w.levelno == logging.WARNING
    (e,) = _records(caplog, "shard unreadable (test)")
    assert e.levelno == logging.ERROR


def test_message_logged_on_a_library_thread_reaches_the_stoker_logger(caplog):
    with caplog.at_level(logging.DEBUG, logger="stoker"):
        _stoker._log(WARN, "from stoker-io (test)", from_library_thread=True)
        deadline = time.monotonic() + 10
        while not _records(caplog, "from stoker-io (test)") and time.monotonic() < deadline:
            time.sleep(0.01)
    (r,) = _records(caplog, "from stoker-io (test)")
    assert r.levelno == logging.WARNING


def test_messages_keep_their_order_across_threads(caplog):
    with caplog.at_level(logging.DEBUG, logger="stoker"):
        _stoker._log(WARN, "order 1 (test)", from_library_thread=True)
        _stoker._log(WARN, "order 2 (test)")  # delivers what was queued first
    got = [r.getMessage() for r in caplog.records if r.getMessage().startswith("order ")]
    assert got == ["order 1 (test)", "order 2 (test)"]


def test_threshold_drops_messages_before_python(caplog):
    saved = _stoker._log_level()
    try:
        _stoker._set_log_level(ERROR)
        with caplog.at_level(logging.DEBUG, logger="stoker"):
            _stoker._log(WARN, "below the threshold (test)")
        assert not _records(caplog, "below the threshold (test)")
    finally:
        _stoker._set_log_level(saved)


def test_stoker_logger_level_silences_messages(caplog):
    with caplog.at_level(logging.ERROR, logger="stoker"):
        _stoker._log(WARN, "silenced (test)")
    assert not _records(caplog, "silenced (test)")


def _run(env_value, code):
    env = dict(os.environ)
    env.pop("STOKER_LOG", None)
    if env_value is not None:
        env["STOKER_LOG"] = env_value
    script = "import logging, stoker\nfrom stoker import _stoker\nlogging.basicConfig(level=logging.DEBUG, format='%(name)s %(levelname)s %(message)s')\n" + code
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stderr


def test_stoker_log_environment_sets_the_threshold():
    code = "for lv, name in enumerate(('error', 'warn', 'info', 'debug')): _stoker._log(lv, name + ' message')\n"
    default = _run(None, code)
    assert "stoker ERROR error message" in default and "stoker WARNING warn message" in default
    assert "info message" not in default and "debug message" not in default
    debug = _run("debug", code)
    assert "stoker INFO info message" in debug and "stoker DEBUG debug message" in debug
    error = _run("error", code)
    assert "error message" in error and "warn message" not in error
    bad = _run("loud", code)
    assert "STOKER_LOG='loud' names no level" in bad and "warn message" in bad and "info message" not in bad


def test_a_message_at_exit_from_a_library_thread_is_not_lost():
    out = _run(None, "_stoker._log(1, 'last words (test)', from_library_thread=True)\n")
    assert "last words (test)" in out
