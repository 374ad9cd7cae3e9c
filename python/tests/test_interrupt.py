"""Ctrl-C while the loop waits for a slow loader stops it promptly."""

import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import sys, time
    import stoker
    # Reads throttled to 10 kB/s: the epoch (180 JPEGs of ~1 KB) takes over 15 s.
    loader = stoker.Loader(sys.argv[1], batch_size=8, size=16, threads=1, io_limit_mbps=0.01,
                           io_engine="pread")
    n = 0
    try:
        for b in loader:
            n += 1
            print("batch", n, flush=True)
    except KeyboardInterrupt:
        print("interrupted after", n, "of", len(loader), flush=True)
        raise
    print("finished", n, flush=True)
""")


def test_sigint_ends_the_loop_promptly(big_image_dataset, tmp_path):
    path, _ = big_image_dataset
    script = tmp_path / "slow.py"
    script.write_text(SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        first = p.stdout.readline()
        assert first.startswith("batch 1"), first + p.stderr.read()
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert "KeyboardInterrupt" in err, err
    assert "interrupted after" in out and "finished" not in out, out
    assert p.returncode != 0
    # Prompt: the wait polls signals every 50 ms and closing waits at most 1 s for the
    # batch in flight, so the process ends long before the epoch would have.
    assert elapsed < 8, elapsed
