"""benchmarks/host_copy_contention.py runs without a GPU and reports its six cases."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "host_copy_contention.py"


def test_the_benchmark_reports_every_case():
    done = subprocess.run([sys.executable, str(SCRIPT), "--repeats", "1"], capture_output=True, text=True,
                          timeout=120, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["case"].split(":")[0] for r in rows] == ["large", "large", "small", "small", "dense", "dense"]
    assert all(r["alone_ms"] > 0 and r["beside_spinner_ms"] > 0 for r in rows)
    assert "| case | alone ms |" in done.stdout
