"""Copies the finished runs of ``runs/sched/`` into ``results/schedules/runs/`` (gzipped records,
summary, provenance, composed config). Usage: python results/schedules/collect.py"""
import gzip
import pathlib
import shutil

src, dst = pathlib.Path("runs/sched"), pathlib.Path("results/schedules/runs")
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
