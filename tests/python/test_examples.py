"""examples/python: the engine loop runs on the CPU in every mode and each mode
matches native; the fla comparison runs, or says why not and exits 77."""
import os
import subprocess
import sys

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLES = os.path.join(TOP, "examples", "python")
ENV = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"), PYTHONDONTWRITEBYTECODE="1")


def run(script, *args, timeout=600):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def test_decode_loop_on_the_cpu():
    r = run("decode_loop.py", "--device", "cpu", "--requests", "7", "--slots", "3",
            "--rounds", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "on the CPU" in lines[0]
    for mode in ("native", "compact", "replay"):
        assert any(line.startswith(mode) for line in lines), r.stdout
    assert sum("identical to native's" in line for line in lines) == 2, r.stdout
    assert all(" 4 slot reuses" in line for line in lines[1:]), r.stdout


def test_decode_loop_refuses_bad_usage():
    assert run("decode_loop.py", "--requests", "0").returncode == 2


def test_vs_fla_runs_or_says_why_not():
    r = run("vs_fla.py", "--prompt", "64", "--steps", "2", "--reps", "2")
    assert r.returncode in (0, 77), r.stdout + r.stderr
    if r.returncode == 77:
        assert r.stdout.startswith("vs_fla: skipped: "), r.stdout
    else:
        assert "relative RMS difference" in r.stdout
        assert "ssmstate and fla-core agree within the numerics contract" in r.stdout, r.stdout
