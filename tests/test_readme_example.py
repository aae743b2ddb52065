"""The README's worked example, run exactly as written: write a sweep, train it, table it, find the dashboard."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"<!-- worked-example:start -->\n```bash\n(.*?)```\n<!-- worked-example:end -->", re.S)


def worked_example() -> str:
    (block,) = BLOCK.findall(README.read_text(encoding="utf-8"))
    return block


def test_the_worked_example_is_in_the_readme():
    block = worked_example()
    assert "ablate sweep mysweeps/rope.yaml" in block and "ablate table mysweeps/rope.yaml" in block


@pytest.mark.slow
def test_the_readme_worked_example_runs_as_written(tmp_path):
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", worked_example()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = (tmp_path / "myresults" / "rope_tiny.md").read_text(encoding="utf-8")
    assert "| rope |" in table and "2 done" in table
    assert (tmp_path / "myresults" / "index.html").stat().st_size > 0
