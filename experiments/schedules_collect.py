"""Copies the finished runs of ``runs/sched/`` into ``results/schedules/runs/`` (gzipped records,
summary, provenance, composed config).

    python -m experiments.schedules_collect [SRC] [DST]
"""
import gzip
import pathlib
import shutil
import sys


def collect(src="runs/sched", dst="results/schedules/runs") -> list[str]:
    """Copies every finished run (one with ``summary.json``) of ``src`` into ``dst``; returns their names."""
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    done = []
    for d in sorted(src.iterdir()):
        if not (d / "summary.json").exists():
            print("not finished:", d.name)
            continue
        out = dst / d.name
        out.mkdir(parents=True, exist_ok=True)
        with open(d / "metrics.jsonl", "rb") as f, gzip.GzipFile(out / "metrics.jsonl.gz", "wb", mtime=0) as g:
            g.write(f.read())
        shutil.copy(d / "summary.json", out / "summary.json")
        shutil.copy(d / "provenance.json", out / "provenance.json")
        shutil.copy(d / ".hydra" / "config.yaml", out / "config.yaml")
        print("collected", d.name)
        done.append(d.name)
    return done


if __name__ == "__main__":
    collect(*sys.argv[1:3])
