"""Coverage of the speed-up intervals by simulation (``prs.analysis.coverage``; issue #31, item 4).

    python -m experiments.coverage                                   # 400 studies per scenario -> results/coverage/coverage.md
    python -m experiments.coverage --studies 50 --n-boot 500 --out /tmp/cov.md

Writes the markdown page (``--out``) and the numbers beside it (same name, ``.json``: command, commit,
results); ``--render results/coverage/coverage.json`` re-renders the page from those numbers.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

from prs.analysis import coverage as C
from experiments import cli


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


@cli.command("experiments.coverage")
def main(argv=None) -> int:
    p = cli.ArgumentParser(prog="python -m experiments.coverage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--studies", type=int, default=400)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenarios", nargs="*", default=[s.name for s in C.SCENARIOS])
    p.add_argument("--out", default="results/coverage/coverage.md")
    p.add_argument("--render", metavar="JSON", help="re-render the page from saved numbers (no simulation)")
    a = p.parse_args(argv)
    if a.render:
        saved = json.loads(pathlib.Path(a.render).read_text())
        md = C.coverage_markdown(saved["results"], command=saved["command"], commit=saved.get("commit"))
        pathlib.Path(a.out).write_text(md)
        print(md)
        return 0
    if a.studies < 1 or a.n_boot < 1:
        p.error("--studies and --n-boot must be >= 1")
    by_name = {s.name: s for s in C.SCENARIOS}
    unknown = [n for n in a.scenarios if n not in by_name]
    if unknown:
        p.error(f"unknown scenarios {unknown}; choose from {sorted(by_name)}")
    results = []
    for name in a.scenarios:
        t0 = time.perf_counter()
        results.append(C.coverage_study(by_name[name], studies=a.studies, n_boot=a.n_boot, seed=a.seed))
        print(f"{name}: {a.studies} studies in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    cmd = ("python -m experiments.coverage " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    commit = _commit()
    md = C.coverage_markdown(results, command=cmd, commit=commit)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    out.with_suffix(".json").write_text(json.dumps({"command": cmd, "commit": commit, "results": results}, indent=1)
                                        + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
